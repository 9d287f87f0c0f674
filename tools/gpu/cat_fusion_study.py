#!/usr/bin/env python3
"""cat_fusion_study.py — how long the TorchScript executor's first no_grad calls take on CUDA
when a fused cat has N inputs (N ReLUs of [batch, 16] tensors and their cat on dim 1, as in the
corpus list_input and the reference DLRM's interaction), written as the fuser takes it (the
cat's list built in the graph) and through `list(...)` (passes/unfused_large_cats.h). Each case
runs in a process of its own, given up after --timeout seconds.

    python3 tools/gpu/cat_fusion_study.py [--sizes 6,8,10,12,16,27] [--timeout 20]
"""

import argparse
import subprocess
import sys
import time

CHILD = r'''
import time, torch
n, copy = %(n)d, %(copy)r
args = ", ".join("x%%d: torch.Tensor" %% i for i in range(n))
items = ", ".join("torch.relu(x%%d)" %% i for i in range(n))
body = "list([%%s])" %% items if copy else "[%%s]" %% items
src = "def f(%%s):\n    return torch.cat(%%s, 1)\n" %% (args, body)
f = torch.jit.CompilationUnit(src).f
xs = [torch.randn(4096, 16, device="cuda") for _ in range(n)]
for i in range(4):
    t = time.perf_counter()
    with torch.no_grad():
        f(*xs)
    torch.cuda.synchronize()
    print("call %%d %%.1f ms" %% (i + 1, (time.perf_counter() - t) * 1e3), flush=True)
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="6,8,10,12,16,27")
    ap.add_argument("--timeout", type=float, default=20)
    args = ap.parse_args()
    for n in [int(s) for s in args.sizes.split(",")]:
        for copy in (False, True):
            t = time.perf_counter()
            try:
                out = subprocess.run([sys.executable, "-c", CHILD % {"n": n, "copy": copy}],
                                     capture_output=True, text=True, timeout=args.timeout)
                calls = [l for l in out.stdout.splitlines() if l.startswith("call")]
                res = "; ".join(calls) or (out.stderr.strip().splitlines() or ["?"])[-1]
            except subprocess.TimeoutExpired as e:
                done = [l for l in (e.stdout or b"").decode().splitlines() if l.startswith("call")]
                res = "STALL after %.0f s (%s)" % (time.perf_counter() - t, "; ".join(done) or "in call 1")
            print("cat of %d relus%s: %s" % (n, " via list()" if copy else "", res), flush=True)


if __name__ == "__main__":
    main()
