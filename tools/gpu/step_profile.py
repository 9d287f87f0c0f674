#!/usr/bin/env python3
"""step_profile.py — where one training step of a TorchScript archive spends its time (CPU side).

On launch-bound models a step's time is mostly host work: the interpreter, autograd's nodes
(one AccumulateGrad per parameter), kernel launches. This script loads an archive as users do
(torch.jit.load, the executor at its defaults), warms it up, profiles a few training steps with
torch.profiler (CPU and CUDA) and prints the operators with the most self CPU time, plus the
number of calls of each, so that e.g. per-parameter autograd work shows as the count it is.

    python3 tools/gpu/step_profile.py --archive A.pt --inputs inputs.pt [--steps 5] [--top 15]
"""

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from ab_time import load_inputs, make_step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--archive", required=True)
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    step = make_step(a.archive, load_inputs(a.inputs), infer=False)
    for _ in range(8):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
    avg = prof.key_averages()
    total_cpu = sum(e.self_cpu_time_total for e in avg)
    print("%s: %d steps, self CPU %.3f ms per step" % (a.archive, a.steps, total_cpu / 1e3 / a.steps))
    print("| operator | calls / step | self CPU ms / step | share |")
    print("|---|---|---|---|")
    for e in sorted(avg, key=lambda e: -e.self_cpu_time_total)[:a.top]:
        print("| %s | %d | %.3f | %.0f%% |" % (e.key[:60], e.count // a.steps,
                                               e.self_cpu_time_total / 1e3 / a.steps,
                                               100.0 * e.self_cpu_time_total / max(total_cpu, 1)))


if __name__ == "__main__":
    main()
