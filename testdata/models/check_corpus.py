#!/usr/bin/env python3
"""Checks a model corpus written by make_corpus.py.

Usage:
  /usr/bin/python3 testdata/models/check_corpus.py DIR [--manifest MANIFEST.json]
                   [--sentier_opt BIN [--rules patterns]]

For every DIR/<name>/ with an inputs.pt:
  * each archive (scripted.pt, traced.pt) loads with torch.jit.load and runs on
    m(*torch.load(inputs.pt)), twice, with the same outputs both times;
  * scripted and traced twins give the same outputs (allclose, rtol 1e-5, atol 1e-6);
  * the manifest (default: MANIFEST.json next to this script) has an entry for the model and
    its `traced` flag matches whether traced.pt exists.
With --sentier_opt, also runs that binary on each archive (with --inputs=inputs.pt) and checks
that every rule in the entry's expect_rules fires; an expected rule listed in the entry's
known_gaps for that archive may be missing (reported as a known gap, not a failure).

Exits 1 on any failure, 2 on bad usage. Runs under torch 1.13 and torch 2.x.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Dict, List

import torch

ARCHIVES = ("scripted", "traced")


def flatten(out) -> List[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        res: List[torch.Tensor] = []
        for o in out:
            res.extend(flatten(o))
        return res
    if isinstance(out, dict):
        res = []
        for k in sorted(out):
            res.extend(flatten(out[k]))
        return res
    raise TypeError("unexpected output type %s" % type(out).__name__)


def compare(a, b) -> str:
    """Empty string when the outputs match, else what differs."""
    xs, ys = flatten(a), flatten(b)
    if len(xs) != len(ys):
        return "%d vs %d output tensors" % (len(xs), len(ys))
    for k, (x, y) in enumerate(zip(xs, ys)):
        if x.shape != y.shape:
            return "output %d: shape %s vs %s" % (k, tuple(x.shape), tuple(y.shape))
        if x.dtype != y.dtype:
            return "output %d: dtype %s vs %s" % (k, x.dtype, y.dtype)
        if not torch.allclose(x, y, rtol=1e-5, atol=1e-6, equal_nan=True):
            diff = (x.double() - y.double()).abs().max().item()
            return "output %d: max abs diff %.3g" % (k, diff)
    return ""


def run_archive(path: str, inputs) -> object:
    m = torch.jit.load(path)
    with torch.no_grad():
        return m(*inputs)


def shape_text(out) -> str:
    return ",".join("x".join(str(s) for s in t.shape) for t in flatten(out))


def gaps_for(entry: Dict, archive: str) -> List[str]:
    rules: List[str] = []
    for gap in entry.get("known_gaps", []):
        if gap.get("archive") in (archive, "both"):
            rules.extend(gap.get("rules", []))
    return rules


def check_rules(binary: str, rules: str, path: str, inputs_path: str, entry: Dict,
                archive: str, failures: List[str], notes: List[str], name: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        report_path = os.path.join(tmp, "report.json")
        cmd = [binary, "--input=" + path, "--output=" + os.path.join(tmp, "out.pt"),
               "--inputs=" + inputs_path, "--report=" + report_path]
        if rules:
            cmd.append("--rules=" + rules)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True)
        if proc.returncode != 0:
            failures.append("%s/%s: sentier_opt exit %d: %s" % (
                name, archive, proc.returncode, proc.stdout.strip().splitlines()[-1:]))
            return "sentier_opt failed"
        with open(report_path) as f:
            report = json.load(f)
    fired = set(report.get("rule_counts", {}))
    expected = entry.get("expect_rules", [])
    gaps = gaps_for(entry, archive)
    def fires(r):  # "a|b": one of them (scripted and traced code spell some forms differently)
        return any(alt in fired for alt in r.split("|"))
    missing = [r for r in expected if not fires(r) and r not in gaps]
    known = [r for r in expected if not fires(r) and r in gaps]
    closed = [r for r in gaps if r in fired]
    if missing:
        failures.append("%s/%s: expected rules did not fire: %s (fired: %s)" % (
            name, archive, ", ".join(missing), ", ".join(sorted(fired)) or "none"))
    if closed:
        notes.append("%s/%s: known gap closed, now fires: %s" % (name, archive, ", ".join(closed)))
    text = "rules ok" if not missing else "rules MISSING " + ",".join(missing)
    if known:
        text += " (known gap: %s)" % ",".join(known)
    return text


def main(argv: List[str]) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description="Checks a corpus written by make_corpus.py.")
    parser.add_argument("dir", help="corpus directory, e.g. testdata/models/torch1.13")
    parser.add_argument("--manifest", default=os.path.join(here, "MANIFEST.json"))
    parser.add_argument("--sentier_opt", default="", help="also check expect_rules with this binary")
    parser.add_argument("--rules", default="", help="--rules for sentier_opt (default: its library)")
    opts = parser.parse_args(argv)

    if not os.path.isdir(opts.dir):
        print("check_corpus: no such directory: %s" % opts.dir, file=sys.stderr)
        return 2
    manifest: Dict[str, Dict] = {}
    if os.path.exists(opts.manifest):
        with open(opts.manifest) as f:
            manifest = {e["name"]: e for e in json.load(f)["models"]}
    else:
        print("check_corpus: no manifest at %s" % opts.manifest, file=sys.stderr)
        return 2

    torch.set_num_threads(1)
    names = sorted(n for n in os.listdir(opts.dir)
                   if os.path.exists(os.path.join(opts.dir, n, "inputs.pt")))
    if not names:
        print("check_corpus: no models under %s" % opts.dir, file=sys.stderr)
        return 1
    failures: List[str] = []
    notes: List[str] = []
    print("torch %s, %d models in %s" % (torch.__version__, len(names), opts.dir))
    for name in names:
        model_dir = os.path.join(opts.dir, name)
        inputs_path = os.path.join(model_dir, "inputs.pt")
        inputs = torch.load(inputs_path)
        if not isinstance(inputs, tuple):
            failures.append("%s: inputs.pt holds a %s, not a tuple" % (name, type(inputs).__name__))
            continue
        entry = manifest.get(name)
        if entry is None:
            failures.append("%s: not in the manifest" % name)
            entry = {}
        present = [a for a in ARCHIVES if os.path.exists(os.path.join(model_dir, a + ".pt"))]
        if "scripted" not in present and (entry or {}).get("scripted", True):
            failures.append("%s: scripted.pt missing" % name)
        if entry and entry.get("traced") != ("traced" in present):
            failures.append("%s: manifest says traced=%s but traced.pt %s" % (
                name, entry.get("traced"), "exists" if "traced" in present else "is missing"))
        outputs = {}
        parts: List[str] = []
        for archive in present:
            path = os.path.join(model_dir, archive + ".pt")
            try:
                first = run_archive(path, inputs)
                second = run_archive(path, inputs)
            except Exception as e:  # report every model, not only the first failure
                failures.append("%s/%s: %s" % (name, archive, str(e).strip().splitlines()[0]))
                continue
            outputs[archive] = first
            diff = compare(first, second)
            if diff:
                failures.append("%s/%s: two runs differ: %s" % (name, archive, diff))
            if not all(torch.isfinite(t).all().item() for t in flatten(first)
                       if t.is_floating_point()):
                failures.append("%s/%s: non-finite output" % (name, archive))
            if opts.sentier_opt and entry:
                parts.append("%s %s" % (archive, check_rules(
                    opts.sentier_opt, opts.rules, path, inputs_path, entry, archive, failures,
                    notes, name)))
        twins = "-"
        if len(outputs) == 2:
            diff = compare(outputs["scripted"], outputs["traced"])
            twins = "scripted == traced" if not diff else "scripted != traced: " + diff
            if diff:
                failures.append("%s: %s" % (name, twins))
        shape = shape_text(outputs[present[0]]) if present and present[0] in outputs else "?"
        print("%-18s %-16s out %-10s %s%s" % (name, "+".join(present), shape, twins,
                                            ("; " + "; ".join(parts)) if parts else ""))
    for note in notes:
        print("note: " + note)
    if failures:
        print("\n%d failure(s):" % len(failures))
        for f in failures:
            print("  " + f)
        return 1
    print("all %d models ok" % len(names))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
