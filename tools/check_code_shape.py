#!/usr/bin/env python3
"""check_code_shape.py — the code-as-a-page limits of the project's C++ sources.

Lists every function body longer than --max_function_lines (default 80) and every non-test source
file longer than --max_file_lines (default 700) under the given roots (default: passes runtime
tools bench testing testdata). Tests (`*_test.cc`, `*_fuzz.cc`, testing/) are exempt from the file
limit and the function limit; a function whose body is a table (marked `// code-shape: table` on
the line before it) is listed but allowed. Exit 0 when within the limits, 1 otherwise.

Functions are found by brace matching on the source with comments and string literals blanked: a
body is a `{ ... }` that starts at the end of a line ending a signature (`)`, `) const`, `override`,
`-> T`) at namespace or class scope. It is a heuristic, good enough for the project's style.
"""
import argparse
import os
import re
import sys

EXEMPT_DIRS = ("testing/",)


def is_test(path):
    base = os.path.basename(path)
    return (base.endswith("_test.cc") or base.endswith("_fuzz.cc") or "/fuzz/" in path
            or any(path.startswith(d) for d in EXEMPT_DIRS) or base.endswith("_testing.h"))


def blank(text):
    """Comments and string/char literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


SIG_END = re.compile(r"(\)\s*(const)?\s*(noexcept)?\s*(override)?\s*(->\s*[\w:<>,\s*&]+)?\s*)$")
CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|else|do)\b|\b(if|for|while|switch|catch)\s*\(")


def functions(path):
    raw = open(path, encoding="utf-8", errors="replace").read()
    text = blank(raw)
    lines = text.split("\n")
    raw_lines = raw.split("\n")
    depth = 0
    stack = []  # (kind, start_line, name)
    found = []
    for ln, line in enumerate(lines):
        for pos, ch in enumerate(line):
            if ch == "{":
                before = line[:pos].rstrip()
                head = before
                k = ln
                # Look back over the signature lines for the function's head.
                while not head.strip() and k > 0:
                    k -= 1
                    head = lines[k].rstrip()
                is_fn = bool(SIG_END.search(head)) and not CONTROL.search(head) and \
                    not re.search(r"(=|return|\[[^\]]*\])\s*[\w:<>]*\s*\(.*\)\s*$", head) and \
                    all(kind != "fn" for kind, _, _ in stack)
                if is_fn:
                    m = None
                    for j in range(k, max(-1, k - 6), -1):
                        m = re.search(r"([~\w:]+)\s*\(", lines[j])
                        if m:
                            break
                    stack.append(("fn", ln, m.group(1) if m else "?"))
                else:
                    stack.append(("block", ln, ""))
            elif ch == "}" and stack:
                kind, start, name = stack.pop()
                if kind == "fn":
                    marker = raw_lines[start - 1] if start > 0 else ""
                    j = start - 1
                    while j >= 0 and "code-shape: table" not in raw_lines[j] and j > start - 8:
                        j -= 1
                    table = j >= 0 and "code-shape: table" in raw_lines[j]
                    found.append((name, start + 1, ln - start + 1, table))
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("roots", nargs="*", default=["passes", "runtime", "tools", "bench", "testing", "testdata"])
    ap.add_argument("--max_function_lines", type=int, default=80)
    ap.add_argument("--max_file_lines", type=int, default=700)
    args = ap.parse_args()
    bad = 0
    tables = 0
    for root in args.roots:
        for dirpath, _, names in os.walk(root):
            for name in sorted(names):
                if not name.endswith((".cc", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                if is_test(path):
                    continue
                n = sum(1 for _ in open(path, encoding="utf-8", errors="replace"))
                if n > args.max_file_lines:
                    print(f"{path}: {n} lines (over {args.max_file_lines})")
                    bad += 1
                for fn, line, length, table in functions(path):
                    if length > args.max_function_lines:
                        if table:
                            print(f"{path}:{line}: {fn}: {length} lines (a table: allowed)")
                            tables += 1
                        else:
                            print(f"{path}:{line}: {fn}: {length} lines (over {args.max_function_lines})")
                            bad += 1
    print(f"code shape: {bad} over the limits, {tables} table(s)")
    return 1 if bad or tables > 1 else 0


if __name__ == "__main__":
    sys.exit(main())
