#!/usr/bin/env python3
"""stall_probe.py — does a model's step return under the TorchScript executor at its defaults?

For each archive, in a process of its own (so that a step that never returns cannot stop the
probe), loads it with torch.jit.load on CUDA and runs three forwards under torch.no_grad(), then
in another process three training steps (forward, sum of the float outputs, backward), timing
each call; a process that has not finished after --timeout seconds is reported as a stall with
the call it was in. Prints one line per archive and mode.

    python3 tools/gpu/stall_probe.py --inputs_dir DIR A.pt [B.pt ...] [--timeout 30] [--no_texpr]
                                     [--diagnose OUTDIR] [--forward_only]

--diagnose: each child runs with the executor's own log on (PYTORCH_JIT_LOG_LEVEL: the graph after
each optimization stage, and the fuser's decisions) into OUTDIR/<archive>.<mode>.log; on a stall
the probe says whether the stalled process was spinning (CPU time grew) or blocked, and where
gdb is installed writes every thread's native stack to OUTDIR/<archive>.<mode>.stack.

DIR/<name>/inputs.pt are the sample inputs of archive .../<name>/*.pt (the corpus layout).
"""

import argparse
import os
import shutil
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
if %(train)r:
    for p in m.parameters():  # archives built in C++ may register parameters without it
        if p.is_floating_point():
            p.requires_grad_(True)
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


def cpu_ticks(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except OSError:
        return None


def where_stalled(proc, stem):
    """What the stalled child is doing: spinning or blocked, and its native stacks (gdb)."""
    t0 = cpu_ticks(proc.pid)
    time.sleep(2)
    t1 = cpu_ticks(proc.pid)
    state = "spinning (%d CPU ticks in 2 s)" % (t1 - t0) if t0 is not None and t1 is not None \
        and t1 > t0 else "blocked (no CPU time in 2 s)"
    if shutil.which("gdb"):
        with open(stem + ".stack", "w") as f:
            subprocess.run(["gdb", "-p", str(proc.pid), "-batch", "-ex", "thread apply all bt 40"],
                           stdout=f, stderr=subprocess.STDOUT, timeout=60)
        state += ", stacks in " + stem + ".stack"
    return state


def probe(model, inputs, train, timeout, no_texpr=False, diagnose=None):
    tools = os.path.dirname(os.path.abspath(__file__))
    src = CHILD % {"tools": tools, "model": model, "inputs": inputs, "train": train,
                   "no_texpr": no_texpr}
    env = dict(os.environ)
    stem = None
    if diagnose:
        stem = os.path.join(diagnose, "%s.%s%s" % (
            os.path.basename(os.path.dirname(model)) + "_" + os.path.basename(model),
            "train" if train else "infer", ".no_texpr" if no_texpr else ""))
        env["PYTORCH_JIT_LOG_LEVEL"] = "profiling_graph_executor_impl:>tensorexpr_fuser"
    t = time.perf_counter()
    err = open(stem + ".log", "w") if stem else subprocess.PIPE
    proc = subprocess.Popen([sys.executable, "-c", src], stdout=subprocess.PIPE, stderr=err,
                            text=True, env=env)
    try:
        out, errs = proc.communicate(timeout=timeout)
        lines = [l for l in out.splitlines() if l.endswith("ms")]
        tail = (errs or "").strip().splitlines()[-1:] if proc.returncode and errs else []
        return "; ".join(lines + tail)
    except subprocess.TimeoutExpired:
        state = where_stalled(proc, stem) if stem else ""
        proc.kill()
        out, _ = proc.communicate()
        done = [l for l in (out or "").splitlines() if l.endswith("ms")]
        return "STALL after %.0f s (%s)%s" % (time.perf_counter() - t, "; ".join(done) or "in call 1",
                                             ": " + state if state else "")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inputs_dir", required=True)
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--no_texpr", action="store_true",
                    help="also run each archive with the TensorExpr (CUDA) fuser off")
    ap.add_argument("--diagnose", metavar="OUTDIR",
                    help="executor logs per child, and where a stalled child is (see above)")
    ap.add_argument("--forward_only", action="store_true", help="only the no_grad forwards")
    ap.add_argument("archives", nargs="+")
    args = ap.parse_args()
    if args.diagnose:
        os.makedirs(args.diagnose, exist_ok=True)
    for a in args.archives:
        name = os.path.basename(os.path.dirname(a))
        inputs = os.path.join(args.inputs_dir, name, "inputs.pt")
        for no_texpr in ((False, True) if args.no_texpr else (False,)):
            for train in ((False,) if args.forward_only else (False, True)):
                print("%s %s%s: %s" % (a, "training step" if train else "no_grad forward",
                                       " (TensorExpr fuser off)" if no_texpr else "",
                                       probe(a, inputs, train, args.timeout, no_texpr,
                                             args.diagnose)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
