#!/usr/bin/env python3
"""fuser_study.py — which graph shapes the TorchScript profiling executor fuses, at its defaults.

Each case is a small TorchScript function in one of the shapes Sentier's rules produce or
leave behind (a pointwise chain on one tensor, the same chain on a stacked [G, B, H] tensor,
G separate member chains, a batched op followed by unbind and per-member ops, fused forms such
as lerp/addcmul, chains broken by layer_norm, views or cat). The script runs each case after
warm-up (the profiling runs, then the optimized plan) with the executor at its defaults and
reports, from torch.jit.last_executed_optimized_graph():
  * fusion groups (prim::TensorExprGroup, prim::FusionGroup, prim::CudaFusionGroup), the aten
    ops inside them and the aten ops left outside (fallback graphs are not counted);
  * on CUDA: kernels per forward and per training step (forward + backward, inputs requiring
    grad), counted with torch.profiler (memcpy/memset left out).

    python3 tools/gpu/fuser_study.py [--device cuda|cpu] [--batch 4096] [--members 64]
        [--markdown F] [--json F]

Prints a markdown table. The findings are summarized in patterns/README.md ("Working with the
executor's fuser").
"""

import argparse
import json
import os
import sys
import time

import torch

FUSION_KINDS = ("prim::TensorExprGroup", "prim::FusionGroup", "prim::CudaFusionGroup",
                "prim::StaticSubgraph")


def _members(n, body, ret):
    """Unrolled source: `body` and `ret` are format strings over the member index {i}."""
    return "\n".join("    " + body.format(i=i) for i in range(n)) + "\n    return " + ret(n)


def cases(G):
    cat = lambda n: "torch.cat([%s], 1)" % ", ".join("y%d" % i for i in range(n))  # noqa: E731
    stack = lambda n: "torch.stack([%s], 0)" % ", ".join("y%d" % i for i in range(n))  # noqa: E731
    out = []
    # (name, source of `def f(...)`, input builder(B, H, G) -> list of tensors)
    out.append(("chain on one tensor [B,H]: relu(x*w+b), sigmoid, mul",
                "def f(x, w, b):\n    y = torch.relu(x * w + b)\n    return torch.sigmoid(y) * x",
                lambda B, H, G: [(B, H), (H,), (H,)]))
    out.append(("same chain on stacked [G,B,H], params [G,1,H]",
                "def f(x, w, b):\n    y = torch.relu(x * w + b)\n    return torch.sigmoid(y) * x",
                lambda B, H, G: [(G, B, H), (G, 1, H), (G, 1, H)]))
    out.append(("G member chains, unrolled, results cat'ed",
                "def f(xs: List[torch.Tensor], w, b):\n" +
                _members(G, "y{i} = torch.sigmoid(torch.relu(xs[{i}] * w + b)) * xs[{i}]", cat),
                lambda B, H, G: [[(B, H)] * G, (H,), (H,)]))
    out.append(("G member chains, unrolled, results stacked",
                "def f(xs: List[torch.Tensor], w, b):\n" +
                _members(G, "y{i} = torch.sigmoid(torch.relu(xs[{i}] * w + b)) * xs[{i}]", stack),
                lambda B, H, G: [[(B, H)] * G, (H,), (H,)]))
    out.append(("stacked op, then unbind, then per-member pointwise (half-batched chain)",
                "def f(x, w, b):\n    t = torch.relu(x * w + b).unbind(0)\n" +
                _members(G, "y{i} = torch.sigmoid(t[{i}]) * t[{i}]", stack),
                lambda B, H, G: [(G, B, H), (G, 1, H), (G, 1, H)]))
    out.append(("baddbmm, then tanh (batched linear + activation)",
                "def f(x, w, b):\n    return torch.tanh(torch.baddbmm(b, x, w))",
                lambda B, H, G: [(G, B, H), (G, H, H), (G, 1, H)]))
    out.append(("baddbmm, then a pointwise chain (tanh, mul, add)",
                "def f(x, w, b):\n    y = torch.tanh(torch.baddbmm(b, x, w))\n    return y * b + x",
                lambda B, H, G: [(G, B, H), (G, H, H), (G, 1, H)]))
    out.append(("highway gate as mul/rsub/mul/add: t*h + (1-t)*x",
                "def f(g, h, x):\n    t = torch.sigmoid(g)\n    h2 = torch.relu(h)\n"
                "    return t * h2 + (1 - t) * x",
                lambda B, H, G: [(B, H), (B, H), (B, H)]))
    out.append(("highway gate as lerp: lerp(x, h, t)",
                "def f(g, h, x):\n    t = torch.sigmoid(g)\n    h2 = torch.relu(h)\n"
                "    return torch.lerp(x, h2, t)",
                lambda B, H, G: [(B, H), (B, H), (B, H)]))
    out.append(("addcmul in a chain: relu(addcmul(b, x, w))",
                "def f(x, w, b):\n    return torch.relu(torch.addcmul(b, x, w)) * x",
                lambda B, H, G: [(G, B, H), (G, 1, H), (G, 1, H)]))
    out.append(("layer_norm between pointwise ops",
                "def f(x, w, b):\n    y = torch.tanh(x * w)\n"
                "    z = torch.layer_norm(y, [y.size(-1)])\n    return torch.relu(z * w + b)",
                lambda B, H, G: [(G, B, H), (G, 1, H), (G, 1, H)]))
    out.append(("views between pointwise ops (movedim, flatten)",
                "def f(x, w, b):\n    y = torch.relu(x * w + b)\n"
                "    z = torch.movedim(y, 0, 1).flatten(1)\n    return torch.sigmoid(z) * 2.0",
                lambda B, H, G: [(G, B, H), (G, 1, H), (G, 1, H)]))
    out.append(("cat of pointwise results, then pointwise",
                "def f(a, b, c):\n    y = torch.cat([torch.relu(a), torch.sigmoid(b), torch.tanh(c)], 1)\n"
                "    return y * 2.0 + 1.0",
                lambda B, H, G: [(B, H), (B, H), (B, H)]))
    out.append(("silu and gelu chain",
                "def f(x, w, b):\n    return torch.nn.functional.gelu(torch.nn.functional.silu(x * w) + b)",
                lambda B, H, G: [(G, B, H), (G, 1, H), (G, 1, H)]))
    # A highway layer's gate mix as users write it, and the forms Sentier's rules give it: the
    # fused forms (addcmul, rsub, lerp) against the spelled-out chain.
    lin = "    g = torch.sigmoid(torch.nn.functional.linear(x, w, b))\n"
    hw = lambda B, H, G: [(B, H), (H, H), (H,)]  # noqa: E731
    out.append(("highway mix, as written", "def f(x, w, b):\n" + lin +
                "    return g * x + (1 - g) * x * 0.5", hw))
    out.append(("highway mix, rsub", "def f(x, w, b):\n" + lin +
                "    return g * x + torch.rsub(g, 1) * x * 0.5", hw))
    out.append(("highway mix, addcmul", "def f(x, w, b):\n" + lin +
                "    return torch.addcmul((1 - g) * x * 0.5, g, x)", hw))
    out.append(("highway mix, addcmul of rsub", "def f(x, w, b):\n" + lin +
                "    return torch.addcmul(torch.rsub(g, 1) * x * 0.5, g, x)", hw))
    out.append(("highway mix, lerp", "def f(x, w, b):\n" + lin +
                "    return torch.lerp(x * 0.5, x, g)", hw))
    return out


def make_inputs(spec, device, grad):
    if isinstance(spec, list):
        return [make_inputs(s, device, grad) for s in spec]
    return torch.randn(*spec, device=device, requires_grad=grad)


def flat(v):
    if isinstance(v, (list, tuple)):
        return [t for x in v for t in flat(x)]
    return [v]


def walk(nodes, acc):
    """Counts fusion groups and aten ops; descends into subgraphs (DifferentiableGraph) and
    blocks, but not into fallback graphs nor the else branch of a guard's prim::If."""
    for n in nodes:
        k = n.kind()
        if k == "prim::FallbackGraph":
            continue
        if k in FUSION_KINDS:
            acc["groups"] += 1
            acc["fused"].extend(m.kind() for m in n.g("Subgraph").nodes() if m.kind().startswith("aten::"))
            continue
        if k.startswith("aten::"):
            acc["outside"].append(k)
        if n.hasAttribute("Subgraph") and n.kindOf("Subgraph") == "g":
            walk(n.g("Subgraph").nodes(), acc)
        for b in n.blocks():
            walk(b.nodes(), acc)
            if k == "prim::If":
                break


def summarize(kinds):
    counts = {}
    for k in kinds:
        k = k.replace("aten::", "")
        counts[k] = counts.get(k, 0) + 1
    return ", ".join("%s%s" % (k, "" if c == 1 else " x%d" % c) for k, c in sorted(counts.items()))


def kernels(fn, device):
    """CUDA kernels of one call of fn (bench/compare_torch_compile.py's count)."""
    if device != "cuda":
        return None
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
    import compare_torch_compile  # noqa: E402
    return compare_torch_compile.count_kernels(fn, torch)


def run_case(name, src, shapes, args):
    B, H, G, dev = args.batch, args.hidden, args.members, args.device
    f = torch.jit.CompilationUnit(src + "\n").f
    row = {"case": name}
    for mode in ("inference", "training"):
        grad = mode == "training"
        inputs = make_inputs(shapes(B, H, G), dev, grad)

        def step():
            if grad:
                out = f(*inputs)
                out.sum().backward()
            else:
                with torch.no_grad():
                    f(*inputs)

        for _ in range(args.warmup):
            step()
        if dev == "cuda":
            torch.cuda.synchronize()
        g = torch.jit.last_executed_optimized_graph()
        acc = {"groups": 0, "fused": [], "outside": []}
        walk(g.nodes(), acc)
        row[mode] = {"groups": acc["groups"], "fused": summarize(acc["fused"]),
                     "outside": summarize(acc["outside"]), "kernels": kernels(step, dev)}
        if dev == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(args.iters):
            step()
        if dev == "cuda":
            torch.cuda.synchronize()
        row[mode]["ms"] = (time.perf_counter() - t) * 1e3 / args.iters
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--members", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=6)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--markdown", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--cases", default="", help="only cases whose name contains this text")
    args = ap.parse_args()
    head = "torch %s, device %s%s, batch %d, hidden %d, %d members; executor defaults" % (
        torch.__version__, args.device,
        " (%s)" % torch.cuda.get_device_name(0) if args.device == "cuda" else "",
        args.batch, args.hidden, args.members)
    lines = [head, "",
             "| case | fusion groups fwd / train | fused aten ops (fwd) | aten ops outside groups (fwd) "
             "| kernels fwd / train step | ms fwd / train |",
             "|---|---|---|---|---|---|"]
    rows = []
    for name, src, shapes in cases(args.members):
        if args.cases and args.cases not in name:
            continue
        try:
            r = run_case(name, src, shapes, args)
        except Exception as e:  # noqa: BLE001 - a case this torch cannot run is a row, not a stop
            r = {"case": name, "error": "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0][:200])}
            lines.append("| %s | %s | | | | |" % (name, r["error"]))
            rows.append(r)
            continue
        rows.append(r)
        i, t = r["inference"], r["training"]
        k = "-" if i["kernels"] is None else "%d / %d" % (i["kernels"], t["kernels"])
        lines.append("| %s | %d / %d | %s | %s | %s | %.3f / %.3f |" % (
            name, i["groups"], t["groups"], i["fused"] or "-", i["outside"] or "-", k, i["ms"], t["ms"]))
        print(json.dumps(r), file=sys.stderr, flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        open(args.markdown, "w").write(text)
    if args.json:
        json.dump({"header": head, "rows": rows}, open(args.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
