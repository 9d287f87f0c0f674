#!/usr/bin/env python3
"""memory_study.py — peak memory of one training step for the batched forms Sentier's rules write.

The batched (stacked) forms of the towers and wide corpus models run 10-70x faster per training
step on CUDA but measured more peak memory than the originals. This script times and weighs
the candidate spellings of the same computation side by side, each scripted and run by the
TorchScript executor at its defaults after warm-up (as users run artifacts): train step =
forward, loss = mean of the output, backward; peak = the step's allocation beyond what was
allocated before it (parameters and inputs excluded, parameter gradients included).

Cases (G members, batch B, the input x [B, G*d] split into G pieces of d as in the corpus):
  wide   (Linear(d, o) -> silu per piece, concatenated):
    members      G separate linears (the original model's shape)
    stacked      baddbmm(b, movedim(unflatten(x)), W^T) -> silu -> movedim -> flatten
    stacked_t    the transposed product baddbmm(b^T, W, x^T) [G, o, B] -> silu -> permute -> flatten
  towers (Linear(d, h) -> tanh -> LayerNorm(h) -> Linear(h, h2) -> relu, concatenated):
    members      G separate towers
    stacked_addcmul  layer_norm without affine, addcmul(b, n, w), baddbmm (before the fold)
    stacked_fold     the affine step folded into the next baddbmm (fold_scale_shift_into_baddbmm)

    python3 tools/gpu/memory_study.py [--batch 4096] [--markdown F] [--json F]
        [--archive LABEL=PATH:WIDTH ...]

--archive adds rows for TorchScript archives as users load them (torch.jit.load, one input
x [batch, WIDTH]), e.g. a published artifact next to its original, to tell whether a difference
lies in the graph or in the harness.
"""

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch import Tensor

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(_ROOT, "bench"))
sys.path.insert(0, os.path.join(_ROOT, "testdata", "models"))
from compare_torch_compile import count_kernels, median_ms  # noqa: E402
from make_corpus import Towers, Wide  # noqa: E402  (the corpus models: the member forms)


class WideStacked(torch.nn.Module):
    def __init__(self, G: int, d: int, o: int):
        super().__init__()
        self.G, self.d = G, d
        self.weight = torch.nn.Parameter(torch.randn(G, o, d) * 0.3)
        self.bias = torch.nn.Parameter(torch.randn(G, o) * 0.1)

    def forward(self, x: Tensor) -> Tensor:
        X = torch.movedim(torch.unflatten(x, 1, [self.G, self.d]), 1, 0)
        r = torch.baddbmm(self.bias.unsqueeze(1), X, self.weight.transpose(1, 2))
        return torch.flatten(torch.movedim(F.silu(r), 0, 1), 1, 2)


class WideStackedT(WideStacked):
    def forward(self, x: Tensor) -> Tensor:
        Xt = torch.unflatten(x, 1, [self.G, self.d]).permute(1, 2, 0)  # [G, d, B]
        r = torch.baddbmm(self.bias.unsqueeze(2), self.weight, Xt)  # [G, o, B]
        return torch.flatten(F.silu(r).permute(2, 0, 1), 1, 2)


class TowersStacked(torch.nn.Module):
    def __init__(self, G: int, d: int, h: int, h2: int, fold: bool):
        super().__init__()
        self.G, self.d, self.h, self.fold = G, d, h, fold
        self.w1 = torch.nn.Parameter(torch.randn(G, h, d) * 0.3)
        self.b1 = torch.nn.Parameter(torch.randn(G, h) * 0.1)
        self.lw = torch.nn.Parameter(1 + 0.1 * torch.randn(G, h))
        self.lb = torch.nn.Parameter(0.1 * torch.randn(G, h))
        self.w2 = torch.nn.Parameter(torch.randn(G, h2, h) * 0.3)
        self.b2 = torch.nn.Parameter(torch.randn(G, h2) * 0.1)

    def forward(self, x: Tensor) -> Tensor:
        X = torch.movedim(torch.unflatten(x, 1, [self.G, self.d]), 1, 0)
        t = torch.tanh(torch.baddbmm(self.b1.unsqueeze(1), X, self.w1.transpose(1, 2)))
        n = F.layer_norm(t, [self.h])
        w2t = self.w2.transpose(1, 2)
        if self.fold:
            ws = w2t * self.lw.unsqueeze(1).transpose(1, 2)
            c = torch.baddbmm(self.b2.unsqueeze(1), self.lb.unsqueeze(1), w2t)
            r = torch.baddbmm(c, n, ws)
        else:
            a = torch.addcmul(self.lb.unsqueeze(1), n, self.lw.unsqueeze(1))
            r = torch.baddbmm(self.b2.unsqueeze(1), a, w2t)
        return torch.flatten(torch.movedim(torch.relu(r), 0, 1), 1, 2)


class WideStackedAddBias(WideStacked):
    """bmm, then the bias added by a separate broadcasting add (its gradient: sum_to_size)."""

    def forward(self, x: Tensor) -> Tensor:
        X = torch.movedim(torch.unflatten(x, 1, [self.G, self.d]), 1, 0)
        r = torch.bmm(X, self.weight.transpose(1, 2)) + self.bias.unsqueeze(1)
        return torch.flatten(torch.movedim(F.silu(r), 0, 1), 1, 2)


class WideStackedFlatBias(WideStacked):
    """bmm, moved back to the output layout [B, G*o] first; bias added there (its gradient: a
    column sum of a contiguous [B, G*o] gradient), silu on the output layout."""

    def forward(self, x: Tensor) -> Tensor:
        X = torch.movedim(torch.unflatten(x, 1, [self.G, self.d]), 1, 0)
        r = torch.flatten(torch.movedim(torch.bmm(X, self.weight.transpose(1, 2)), 0, 1), 1, 2)
        return F.silu(r + torch.flatten(self.bias))


class WideStackedNoBias(WideStacked):
    """Diagnostic: no bias at all (a lower bound for the bias' share of the peak)."""

    def forward(self, x: Tensor) -> Tensor:
        X = torch.movedim(torch.unflatten(x, 1, [self.G, self.d]), 1, 0)
        r = torch.bmm(X, self.weight.transpose(1, 2))
        return torch.flatten(torch.movedim(F.silu(r), 0, 1), 1, 2)


class TowersStackedVariant(TowersStacked):
    """The folded towers chain with the biases spelled differently, or run in chunks of members:
    bias = "baddbmm" (as the rules write it), "add" (bmm + broadcasting add), "flat" (layer 2's
    bias and relu on the output layout [B, G*h2]), "none" (diagnostic); chunks > 1 runs the chain
    on that many groups of members one after the other."""

    def __init__(self, G: int, d: int, h: int, h2: int, bias: str, chunks: int):
        super().__init__(G, d, h, h2, True)
        self.bias, self.chunks = bias, chunks

    def chain(self, X: Tensor, w1, b1, lw, lb, w2, b2) -> Tensor:
        w1t = w1.transpose(1, 2)
        if self.bias == "baddbmm":
            p = torch.baddbmm(b1.unsqueeze(1), X, w1t)
        elif self.bias == "none":
            p = torch.bmm(X, w1t)
        else:
            p = torch.bmm(X, w1t) + b1.unsqueeze(1)
        n = F.layer_norm(torch.tanh(p), [self.h])
        w2t = w2.transpose(1, 2)
        ws = w2t * lw.unsqueeze(1).transpose(1, 2)
        if self.bias == "none":
            return torch.flatten(torch.movedim(torch.relu(torch.bmm(n, ws)), 0, 1), 1, 2)
        c = torch.baddbmm(b2.unsqueeze(1), lb.unsqueeze(1), w2t)  # [G, 1, h2]
        if self.bias == "baddbmm":
            r = torch.baddbmm(c, n, ws)
        elif self.bias == "add":
            r = torch.bmm(n, ws) + c
        else:
            q = torch.flatten(torch.movedim(torch.bmm(n, ws), 0, 1), 1, 2)
            return torch.relu(q + torch.flatten(c))
        return torch.flatten(torch.movedim(torch.relu(r), 0, 1), 1, 2)

    def forward(self, x: Tensor) -> Tensor:
        X = torch.movedim(torch.unflatten(x, 1, [self.G, self.d]), 1, 0)
        if self.chunks == 1:
            return self.chain(X, self.w1, self.b1, self.lw, self.lb, self.w2, self.b2)
        k = self.G // self.chunks
        outs = []
        for i in range(self.chunks):
            outs.append(self.chain(X.narrow(0, i * k, k), self.w1.narrow(0, i * k, k),
                                   self.b1.narrow(0, i * k, k), self.lw.narrow(0, i * k, k),
                                   self.lb.narrow(0, i * k, k), self.w2.narrow(0, i * k, k),
                                   self.b2.narrow(0, i * k, k)))
        return torch.cat(outs, 1)


def measure(module, x, steps=20, loss="mean", keep_grads=False):
    """keep_grads: gradients accumulate into the .grad the previous steps left (as sentierd's
    checker steps do) instead of being reset to None (optimizer.zero_grad()'s default)."""
    m = module if isinstance(module, torch.jit.ScriptModule) else torch.jit.script(module.cuda())
    params = list(m.parameters())

    def step():
        out = m(x)
        (out.mean() if loss == "mean" else out.sum()).backward()
        if not keep_grads:
            for p in params:
                p.grad = None

    train_ms = median_ms(step, steps, torch)
    kernels = count_kernels(step, torch)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - before) / 2**20
    return {"train_ms": train_ms, "kernels_train": kernels, "peak_train_mib": peak}


def trace_peak(module, x, top=12):
    """Runs one training step with the allocator's history recorded and prints the blocks live
    at the step's peak, largest first, each with the C++/Python frames that allocated it."""
    m = module if isinstance(module, torch.jit.ScriptModule) else torch.jit.script(module.cuda())
    params = list(m.parameters())

    def step():
        m(x).mean().backward()
        for p in params:
            p.grad = None

    for _ in range(6):
        step()
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="all",
                                             max_entries=200000)
    step()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    live, cur, peak, peak_live = {}, 0, 0, {}
    for ev in snap["device_traces"][0]:
        if ev["action"] == "alloc":
            live[ev["addr"]] = ev
            cur += ev["size"]
            if cur > peak:
                peak, peak_live = cur, dict(live)
        elif ev["action"] == "free_completed" and ev["addr"] in live:
            cur -= live.pop(ev["addr"])["size"]
    print("TRACE peak of the step's own allocations: %.1f MiB in %d blocks" % (
        peak / 2**20, len(peak_live)))
    for ev in sorted(peak_live.values(), key=lambda e: -e["size"])[:top]:
        names = [f["name"] for f in ev.get("frames", [])]
        keep = [n for n in names if any(k in n for k in (
            "at::native", "at::_ops", "autograd::generated", "autograd::Engine", "validate_outputs",
            "sum_to", "torch::jit", "at::cuda", "reduce"))]
        print("TRACE %8.2f MiB  %s" % (ev["size"] / 2**20, " <- ".join(
            dict.fromkeys(n[:70] for n in keep[:12]))))


def make_cases():
    return [
        ("wide", "members", lambda: Wide(256, 4, 4), 1024),
        ("wide", "stacked", lambda: WideStacked(256, 4, 4), 1024),
        ("wide", "stacked_t", lambda: WideStackedT(256, 4, 4), 1024),
        ("wide", "stacked_addbias", lambda: WideStackedAddBias(256, 4, 4), 1024),
        ("wide", "stacked_flatbias", lambda: WideStackedFlatBias(256, 4, 4), 1024),
        ("wide", "stacked_nobias", lambda: WideStackedNoBias(256, 4, 4), 1024),
        ("towers", "members", lambda: Towers(64, 8, 16, 8), 512),
        ("towers", "stacked_addcmul", lambda: TowersStacked(64, 8, 16, 8, False), 512),
        ("towers", "stacked_fold", lambda: TowersStacked(64, 8, 16, 8, True), 512),
        ("towers", "fold_addbias", lambda: TowersStackedVariant(64, 8, 16, 8, "add", 1), 512),
        ("towers", "fold_flatbias", lambda: TowersStackedVariant(64, 8, 16, 8, "flat", 1), 512),
        ("towers", "fold_nobias", lambda: TowersStackedVariant(64, 8, 16, 8, "none", 1), 512),
        ("towers", "fold_chunks2", lambda: TowersStackedVariant(64, 8, 16, 8, "baddbmm", 2), 512),
        ("towers", "fold_chunks4", lambda: TowersStackedVariant(64, 8, 16, 8, "baddbmm", 4), 512),
        ("towers", "fold_flatbias_chunks2",
         lambda: TowersStackedVariant(64, 8, 16, 8, "flat", 2), 512),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--markdown", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--archive", action="append", default=[], help="LABEL=PATH:WIDTH")
    ap.add_argument("--only_archives", action="store_true")
    ap.add_argument("--variants", action="store_true",
                    help="archive rows also with loss = sum, kept gradients and an input that "
                         "requires grad")
    ap.add_argument("--inputs_pt", default="", help="archive rows: x from this inputs.pt")
    ap.add_argument("--only", default="", help="comma-separated model/form names to run")
    ap.add_argument("--fresh", action="store_true",
                    help="also weigh each form first in a fresh process (as sentierd's gate does)")
    ap.add_argument("--trace", default="",
                    help="comma-separated model/form names: print the blocks live at the peak")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    B = a.batch
    cases = [(m, f, make(), w) for m, f, make, w in make_cases()
             if not a.only or "%s/%s" % (m, f) in a.only.split(",")]
    for name in filter(None, a.trace.split(",")):
        for m, f, make, w in make_cases():
            if "%s/%s" % (m, f) == name:
                torch.manual_seed(0)
                print("TRACE %s" % name)
                trace_peak(make(), torch.randn(B, w, device="cuda"))
    if a.only_archives:
        cases = []
    for spec in a.archive:
        label, rest = spec.split("=", 1)
        path, width = rest.rsplit(":", 1)
        cases.append(("archive", label, torch.jit.load(path, map_location="cuda"), int(width)))
    rows = []
    for model, form, module, width in cases:
        x = torch.randn(B, width, device="cuda")
        if model == "archive" and a.inputs_pt:
            x = torch.load(a.inputs_pt, map_location="cuda")[0]
        variants = [("mean", False, False)]
        if model == "archive" and a.variants:
            variants += [("sum", False, False), ("mean", True, False), ("sum", True, False),
                         ("mean", False, True)]
        for loss, keep, xgrad in variants:
            label = form if (loss, keep, xgrad) == ("mean", False, False) else "%s (loss %s%s%s)" % (
                form, loss, ", grads kept" if keep else "", ", x requires grad" if xgrad else "")
            r = {"model": model, "form": label}
            try:
                r.update(measure(module, x.detach().requires_grad_(xgrad), loss=loss, keep_grads=keep))
            except Exception as e:  # noqa: BLE001 - a failing form is a row, not the end
                r["error"] = str(e).splitlines()[0][:200]
            rows.append(r)
            print("ROW " + json.dumps(r), flush=True)
    if a.fresh:
        import subprocess
        for r in rows:
            if r["model"] == "archive" or "error" in r:
                continue
            name = "%s/%s" % (r["model"], r["form"])
            res = subprocess.run([sys.executable, __file__, "--batch", str(B), "--only", name],
                                 capture_output=True, text=True)
            fresh = [json.loads(l[4:]) for l in res.stdout.splitlines() if l.startswith("ROW ")]
            r["peak_fresh_mib"] = fresh[0].get("peak_train_mib") if fresh else None
            print("FRESH %s %s" % (name, r["peak_fresh_mib"]), flush=True)
    lines = ["torch %s, %s, batch %d, fp32; TorchScript executor at its defaults" % (
        torch.__version__, torch.cuda.get_device_name(), B), "",
        "| model | form | train ms | CUDA kernels / train step | peak MiB / train step |"
        " peak MiB, first in a fresh process |",
        "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append("| %s | %s | error: %s | | | |" % (r["model"], r["form"], r["error"]))
        else:
            fresh = r.get("peak_fresh_mib")
            lines.append("| %s | %s | %.3f | %d | %.1f | %s |" % (
                r["model"], r["form"], r["train_ms"], r["kernels_train"], r["peak_train_mib"],
                "%.1f" % fresh if fresh is not None else ""))
    text = "\n".join(lines) + "\n"
    print(text)
    if a.markdown:
        open(a.markdown, "w").write(text)
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
