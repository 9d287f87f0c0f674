#!/usr/bin/env python3
"""step_profile.py — where one training step of a TorchScript archive spends its time (CPU side).

On launch-bound models a step's time is mostly host work: the interpreter, autograd's nodes
(one AccumulateGrad per parameter), kernel launches. This script loads an archive as users do
(torch.jit.load, the executor at its defaults), warms it up, profiles a few training steps with
torch.profiler (CPU and CUDA) and prints the operators with the most self CPU time, plus the
number of calls of each, so that e.g. per-parameter autograd work shows as the count it is.

    python3 tools/gpu/step_profile.py --archive A.pt --inputs inputs.pt [--steps 5] [--top 15]
                                      [--kernels]

--kernels: instead, the CUDA kernels (and copies) of a step counted per top-level operator (the
outermost aten op in the forward; the autograd node in the backward), so that e.g. what each
batched lookup costs shows as the kernels of its ops.
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
    ap.add_argument("--kernels", action="store_true")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    step = make_step(a.archive, load_inputs(a.inputs, "cuda"), infer=False)
    for _ in range(8):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
    if a.kernels:
        print_kernels(prof, a)
        return
    avg = prof.key_averages()
    total_cpu = sum(e.self_cpu_time_total for e in avg)
    print("%s: %d steps, self CPU %.3f ms per step" % (a.archive, a.steps, total_cpu / 1e3 / a.steps))
    print("| operator | calls / step | self CPU ms / step | share |")
    print("|---|---|---|---|")
    for e in sorted(avg, key=lambda e: -e.self_cpu_time_total)[:a.top]:
        print("| %s | %d | %.3f | %.0f%% |" % (e.key[:60], e.count // a.steps,
                                               e.self_cpu_time_total / 1e3 / a.steps,
                                               100.0 * e.self_cpu_time_total / max(total_cpu, 1)))


def top_level(ev):
    """The outermost aten op or autograd node above a profiler event."""
    chain = []
    while ev is not None:
        chain.append(ev.name)
        ev = ev.cpu_parent
    for name in reversed(chain):
        if name.startswith("autograd::engine::evaluate_function") or name.startswith("aten::"):
            return name.replace("autograd::engine::evaluate_function: ", "backward: ")
    return chain[0]


def print_kernels(prof, a):
    counts = {}
    for ev in prof.events():
        if ev.kernels:
            k = top_level(ev)
            counts[k] = counts.get(k, 0) + len(ev.kernels)
    total = sum(counts.values())
    print("%s: %.1f CUDA kernels and copies per step" % (a.archive, total / a.steps))
    print("| top-level operator | kernels / step |")
    print("|---|---|")
    for k, n in sorted(counts.items(), key=lambda kv: -kv[1])[:a.top]:
        print("| %s | %.1f |" % (k[:70], n / a.steps))


if __name__ == "__main__":
    main()
