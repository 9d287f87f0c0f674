#!/usr/bin/env python3
"""ab_time.py — an original archive and its optimized artifact timed A/B alternated in one process.

On launch-bound models two timings of one graph taken minutes apart can differ by 1.3x, so a
verdict needs both models timed under the same conditions: both are loaded with torch.jit.load
(the TorchScript executor at its defaults, as users run archives), warmed up, then timed in
alternating rounds (A, B, B, A, A, B, ...), each round the synchronized median of --steps
training steps (forward, loss = sum of the mean of every float output, backward, gradients
reset to None). Prints the per-round ratios and their median.

    python3 tools/gpu/ab_time.py --a ORIGINAL.pt --b OPTIMIZED.pt --inputs inputs.pt
        [--rounds 10] [--steps 20] [--label NAME] [--infer] [--optimizer none|sgd|adam]
        [--b_compile_optimus CORPUS_MODEL] [--device cuda|cpu]

--optimizer: the training step also runs torch.optim.SGD (momentum 0.9) or Adam's step() and
zero_grad() (their defaults: the multi-tensor implementation on CUDA), as a training loop does;
none (the default): gradients reset to None.
--b_compile_optimus NAME: B is not an archive but the corpus model NAME as written in Python
(testdata/models/make_corpus.py) with the parameters of the --b archive (give an original
archive: a stacked artifact's parameter names differ), under torch.compile with Optimus' fusions
(bench/compare_torch_compile.py's set); its compile happens in the warm-up.
"""

import argparse
import json
import os
import sys
import statistics
import time

import torch

from train_client import float_tensors, to_device


def load_inputs(path, device):
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - older formats
        obj = torch.load(path, map_location="cpu", weights_only=False)
    return to_device(obj if isinstance(obj, tuple) else (obj,), device)


def compiled_optimus(name, archive):
    """The corpus model `name` in Python with `archive`'s state, under torch.compile + Optimus."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    sys.path.insert(0, os.path.join(root, "testdata", "models"))
    sys.path.insert(0, os.path.join(root, "bench"))
    import make_corpus  # noqa: E402
    from compare_torch_compile import enable_optimus  # noqa: E402
    import torch._dynamo
    module, _, _ = make_corpus.REGISTRY[name](1)
    ts = torch.jit.load(archive, map_location="cpu")
    module.load_state_dict({k: v.detach().clone() for k, v in ts.state_dict().items()}, strict=True)
    module = module.cuda()
    enable_optimus()
    torch._dynamo.reset()
    return torch.compile(module), module.parameters()


def make_step(path, inputs, infer, optimizer="none", compile_name="", device="cuda"):
    if compile_name:
        m, params = compiled_optimus(compile_name, path)
    else:
        m = torch.jit.load(path, map_location=device)
        params = m.parameters()
    params = [p for p in params if p.is_floating_point()]
    for p in params:
        p.requires_grad_(True)  # archives built in C++ may register parameters without it
    opt = None
    if optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=1e-4, momentum=0.9)
    elif optimizer == "adam":
        opt = torch.optim.Adam(params, lr=1e-5)

    def step():
        if infer:
            with torch.no_grad():
                m(*inputs)
            return
        outs = float_tensors(m(*inputs))
        loss = outs[0].mean()
        for o in outs[1:]:
            loss = loss + o.mean()
        loss.backward()
        if opt is not None:
            opt.step()
            opt.zero_grad()
            return
        for p in params:
            p.grad = None

    return step


def round_ms(step, steps, device):
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    for _ in range(steps):
        sync()
        t = time.perf_counter()
        step()
        sync()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--label", default="")
    ap.add_argument("--infer", action="store_true")
    ap.add_argument("--optimizer", default="none", choices=["none", "sgd", "adam"])
    ap.add_argument("--b_compile_optimus", default="", help="corpus model name (B = torch.compile)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="where both models run (cpu: e.g. Debian's torch 1.13, no GPU)")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if a.b_compile_optimus and a.device != "cuda":
        ap.error("--b_compile_optimus runs on cuda only")
    inputs = load_inputs(a.inputs, a.device)
    sa = make_step(a.a, inputs, a.infer, a.optimizer, device=a.device)
    sb = make_step(a.b, inputs, a.infer, a.optimizer, a.b_compile_optimus, a.device)
    for _ in range(6):
        sa()
        sb()
    ra, rb = [], []
    for r in range(a.rounds):
        order = (sa, sb) if r % 2 == 0 else (sb, sa)
        for s in order:
            (ra if s is sa else rb).append(round_ms(s, a.steps, a.device))
    ratios = [x / y for x, y in zip(ra, rb)]
    res = {"label": a.label, "device": a.device, "step": "inference" if a.infer else "training",
           "optimizer": a.optimizer, "b": "compile_optimus" if a.b_compile_optimus else a.b,
           "a_ms": statistics.median(ra), "b_ms": statistics.median(rb),
           "speedup_median": statistics.median(ratios), "speedup_min": min(ratios),
           "speedup_max": max(ratios), "rounds": a.rounds, "steps": a.steps}
    print("AB " + json.dumps(res))


if __name__ == "__main__":
    main()
