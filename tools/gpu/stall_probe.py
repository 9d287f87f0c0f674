#!/usr/bin/env python3
"""stall_probe.py — does a model's step return under the TorchScript executor at its defaults?

For each archive, in a process of its own (so that a step that never returns cannot stop the
probe), loads it with torch.jit.load on CUDA and runs three forwards under torch.no_grad(), then
in another process three training steps (forward, sum of the float outputs, backward), timing
each call; a process that has not finished after --timeout seconds is reported as a stall with
the call it was in. Prints one line per archive and mode.

    python3 tools/gpu/stall_probe.py --inputs_dir DIR A.pt [B.pt ...] [--timeout 30] [--no_texpr]

DIR/<name>/inputs.pt are the sample inputs of archive .../<name>/*.pt (the corpus layout).
"""

import argparse
import os
import subprocess
import sys
import time

CHILD = r'''
import sys, time, torch
sys.path.insert(0, %(tools)r)
from train_client import float_tensors, to_device
if %(no_texpr)r:
    torch._C._jit_set_texpr_fuser_enabled(False)
m = torch.jit.load(%(model)r, map_location="cuda")
inputs = to_device(torch.load(%(inputs)r), "cuda")
if not isinstance(inputs, tuple):
    inputs = (inputs,)
for i in range(3):
    print("call", i + 1, "started", flush=True)
    t = time.perf_counter()
    if %(train)r:
        out = m(*inputs)
        loss = sum(o.float().sum() for o in float_tensors(out))
        loss.backward()
    else:
        with torch.no_grad():
            m(*inputs)
    torch.cuda.synchronize()
    print("call", i + 1, "%%.1f ms" %% ((time.perf_counter() - t) * 1e3), flush=True)
'''


def probe(model, inputs, train, timeout, no_texpr=False):
    tools = os.path.dirname(os.path.abspath(__file__))
    src = CHILD % {"tools": tools, "model": model, "inputs": inputs, "train": train,
                   "no_texpr": no_texpr}
    t = time.perf_counter()
    try:
        r = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=timeout)
        lines = [l for l in r.stdout.splitlines() if l.endswith("ms")]
        tail = r.stderr.strip().splitlines()[-1:] if r.returncode else []
        return "; ".join(lines + tail)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        done = [l for l in out.splitlines() if l.endswith("ms")]
        return "STALL after %.0f s (%s)" % (time.perf_counter() - t, "; ".join(done) or "in call 1")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inputs_dir", required=True)
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--no_texpr", action="store_true",
                    help="also run each archive with the TensorExpr (CUDA) fuser off")
    ap.add_argument("archives", nargs="+")
    args = ap.parse_args()
    for a in args.archives:
        name = os.path.basename(os.path.dirname(a))
        inputs = os.path.join(args.inputs_dir, name, "inputs.pt")
        for no_texpr in ((False, True) if args.no_texpr else (False,)):
            for train in (False, True):
                print("%s %s%s: %s" % (a, "training step" if train else "no_grad forward",
                                       " (TensorExpr fuser off)" if no_texpr else "",
                                       probe(a, inputs, train, args.timeout, no_texpr)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
