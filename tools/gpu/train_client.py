#!/usr/bin/env python3
"""train_client.py — a plain PyTorch user of sentierd's published artifacts.

For every version sentierd published (OUT/<model>/<version>/{model.pt,report.json}), this loads
the original (REG/<model>/<version>/model.pt) and the published artifact with torch.jit.load, as
any Python client would, on --device; an exported program (model.pt2 in both places) with
torch.export.load, moved with torch.export.passes.move_to_device_pass and run as its
ExportedProgram.module() (the graph module users train), on the original archive's sample
inputs (there is no inputs.pt); and:
  * trains both 20 steps (--optimizer: SGD with momentum 0.9 by default, Adagrad, or SparseAdam
    for sparse gradients with Adam for the rest; lr 0.01, loss = mean of the squared float outputs)
    from the same initial state on the same inputs, and requires the same losses within
    tolerance (|a - b| <= 1e-4 + 2e-3 |a|; TF32 off);
  * times a forward and a training step of each, A/B alternated over --rounds rounds after
    warm-up, with the TorchScript executor at its defaults (its CUDA fuser on), median ms;
  * counts CUDA kernels per forward and per training step (torch.profiler, memcpy/memset left
    out).
Writes a JSON file and a markdown table (one row per version: status, aten ops per forward from
the report, kernels, forward and training-step ms, original vs published, losses).

Each version runs in its own process, under --version_timeout seconds: one model that does not
return costs its own time limit, not the rest of the run. The row names the phase it stopped in.
An original that stalls under the executor (torch 2.11's CUDA fuser does not finish compiling
the forward of list_input or of the traced CTR models under no_grad, bench/RESULTS.md): when a
phase on the original makes no progress for --stall_s seconds, the version runs again with the
original in the TorchScript interpreter (`torch.jit.optimized_execution(False)`, what sentierd's
gate does in that case) and the published artifact still under the executor's defaults; the row
says so (`original_timing`), and the speed-up is then against the interpreter.

    python3 tools/gpu/train_client.py --registry REG --output OUT [--device cuda]
        [--steps 20] [--optimizer sgd|adagrad|sparse_adam] [--rounds 7] [--version_timeout 240]
        [--stall_s 20] [--json F] [--markdown F]
Exit 1 when a published artifact does not load, does not train, trains to other losses, or does
not finish in time where the original did.
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import torch


def to_device(v, device):
    if isinstance(v, torch.Tensor):
        return v.to(device)
    if isinstance(v, (list, tuple)):
        out = [to_device(x, device) for x in v]
        return out if isinstance(v, list) else tuple(out)
    if isinstance(v, dict):
        return {k: to_device(x, device) for k, x in v.items()}
    return v


def float_tensors(v):
    if isinstance(v, torch.Tensor):
        return [v] if v.is_floating_point() else []
    if isinstance(v, (list, tuple)):
        return [t for x in v for t in float_tensors(x)]
    if isinstance(v, dict):
        return [t for k in sorted(v) for t in float_tensors(v[k])]
    return []


def loss_of(out):
    ts = float_tensors(out)
    return sum(((t.float() ** 2).mean() for t in ts), torch.zeros(()))


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def make_optimizers(kind, model, args):
    """--optimizer: sgd (momentum 0.9), adagrad, or sparse_adam (torch.optim.SparseAdam for the
    parameters whose gradients are sparse, Adam for the others, as DLRM-style trainers do)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:  # a module without parameters (conformance cases): the losses of its forward
        return []
    if kind == "sgd":
        return [torch.optim.SGD(params, lr=0.01, momentum=0.9)]
    if kind == "adagrad":
        return [torch.optim.Adagrad(params, lr=0.01)]
    loss_of(model(*args)).backward()
    sparse_ids = {id(p) for p in params if p.grad is not None and p.grad.is_sparse}
    for p in params:
        p.grad = None
    sparse = [p for p in params if id(p) in sparse_ids]
    dense = [p for p in params if id(p) not in sparse_ids]
    opts = [torch.optim.SparseAdam(sparse, lr=0.01)] if sparse else []
    return opts + ([torch.optim.Adam(dense, lr=0.01)] if dense else [])


def train(model, args, steps, optimizer="sgd"):
    opts = make_optimizers(optimizer, model, args)
    losses = []
    for _ in range(steps):
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        loss = loss_of(model(*args))
        if loss.requires_grad:
            loss.backward()
        for opt in opts:
            opt.step()
        losses.append(float(loss.detach()))
    return losses


def step_fns(model, args):
    params = [p for p in model.parameters() if p.requires_grad]

    def forward():
        with torch.no_grad():
            model(*args)

    def train_step():
        for p in params:
            p.grad = None
        loss = loss_of(model(*args))
        if loss.requires_grad:
            loss.backward()
        with torch.no_grad():
            for p in params:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-1e-6)

    return forward, train_step


def time_ms(fn, device, iters):
    sync(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync(device)
    return (time.perf_counter() - t0) * 1000.0 / iters


def kernels(fn, device):
    if not device.startswith("cuda"):
        return None
    from torch.profiler import ProfilerActivity, profile
    fn()
    sync(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        sync(device)
    n = 0
    for e in prof.events():
        if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA:
            name = e.name.lower()
            if "memcpy" in name or "memset" in name:
                continue
            n += 1
    return n


CURRENT_PHASE = ["start"]


def phase(name):
    """Progress on stderr: when a version runs past --version_timeout, the parent names the
    phase it stopped in."""
    CURRENT_PHASE[0] = name
    print("phase: " + name, file=sys.stderr, flush=True)


def load_version(a, rel, where):
    """(model, args) of one side of a version: where is a.registry (the original) or a.output
    (the published artifact). TorchScript archives come with REG/<rel>/inputs.pt; an exported
    program carries its sample inputs, the original's are used for both sides."""
    dev = a.device
    pt2 = os.path.join(where, rel, "model.pt2")
    if os.path.exists(pt2):
        from torch.export.passes import move_to_device_pass
        ep = torch.export.load(pt2)
        orig_ep = ep if where == a.registry else torch.export.load(
            os.path.join(a.registry, rel, "model.pt2"))
        ex_args, _ = orig_ep.example_inputs
        return move_to_device_pass(ep, dev).module(), to_device(tuple(ex_args), dev)
    inputs = to_device(torch.load(os.path.join(a.registry, rel, "inputs.pt")), dev)
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    return torch.jit.load(os.path.join(where, rel, "model.pt"), map_location=dev), args


def in_interpreter(fn):
    """fn run with the TorchScript executor's optimizations off (the interpreter)."""
    def run(*args, **kwargs):
        with torch.jit.optimized_execution(False):
            return fn(*args, **kwargs)
    return run


def measure_version(a, rel, rep):
    """Loads, trains, times one version; returns (row fields, failed). With
    --original_interpreter, every call of the original runs in the interpreter."""
    dev = a.device
    row, failed = {}, False
    orig_mode = in_interpreter if a.original_interpreter else (lambda fn: fn)
    try:
        phase("load original")
        orig, args = load_version(a, rel, a.registry)
        phase("load published")
        pub, _ = load_version(a, rel, a.output)
        row["format"] = "pt2" if os.path.exists(os.path.join(a.output, rel, "model.pt2")) else "pt"
        so = {k: v for k, v in orig.state_dict().items()}
        sp = {k: v for k, v in pub.state_dict().items()}
        row["same_state_dict"] = so.keys() == sp.keys() and all(torch.equal(so[k], sp[k]) for k in so)
        stacked = hasattr(pub, "original_state_dict")
        if stacked:
            # Stacked parameters: the original names come from the artifact's own method.
            sp = pub.original_state_dict()
            row["same_state_dict"] = sorted(sp) == sorted(so) and all(torch.equal(so[k], sp[k]) for k in so)
        phase("train original")
        lo = orig_mode(train)(orig, args, a.steps, a.optimizer)
        phase("train published")
        lp = train(pub, args, a.steps, a.optimizer)
        ok = all(abs(x - y) <= 1e-4 + 2e-3 * abs(x) for x, y in zip(lo, lp))
        row["losses"] = {"original": [lo[0], lo[-1]], "published": [lp[0], lp[-1]], "match": ok}
        if stacked:
            # After training, the original's parameters and the artifact's views of its
            # stacked ones must agree; and a checkpoint of the original loads into it.
            sp = pub.original_state_dict()
            worst = max(float((sp[k].float() - v.detach().float()).abs().max())
                        for k, v in orig.state_dict().items())
            row["trained_state_max_diff"] = worst
            pub.load_original_state_dict(dict(orig.state_dict()))
            ok = ok and worst <= 1e-3
        failed = not ok
        # Fresh copies for timing (training moved the weights).
        orig, _ = load_version(a, rel, a.registry)
        pub, _ = load_version(a, rel, a.output)
        fo, to = (orig_mode(f) for f in step_fns(orig, args))
        fp, tp = step_fns(pub, args)
        # Warm-up: profiling runs, then the optimized plan.
        for name, fn in (("original forward", fo), ("published forward", fp),
                         ("original training step", to), ("published training step", tp)):
            phase("warm-up: " + name)
            for _ in range(4):
                fn()
        phase("timing")
        times = {"fo": [], "fp": [], "to": [], "tp": []}
        for _ in range(a.rounds):  # A/B alternated
            times["fo"].append(time_ms(fo, dev, a.iters))
            times["fp"].append(time_ms(fp, dev, a.iters))
            times["to"].append(time_ms(to, dev, a.iters))
            times["tp"].append(time_ms(tp, dev, a.iters))
        med = {k: statistics.median(v) for k, v in times.items()}
        row["forward_ms"] = [med["fo"], med["fp"]]
        row["train_ms"] = [med["to"], med["tp"]]
        phase("kernel counts")
        row["kernels_forward"] = [kernels(fo, dev), kernels(fp, dev)]
        row["kernels_train"] = [kernels(to, dev), kernels(tp, dev)]
        if a.original_interpreter:
            row["original_timing"] = "interpreter"
    except Exception as e:  # a client that cannot use the artifact: a failure
        row["error"] = "%s: %s (in: %s)" % (type(e).__name__, str(e).strip().splitlines()[-1][:300],
                                            CURRENT_PHASE[0])
        # The original itself does not run here (an exported program specialized to the CPU's
        # strides, say): no artifact can be blamed for that; the row says so.
        row["original_fails"] = "original" in CURRENT_PHASE[0]
        failed = not row["original_fails"]
    return row, failed


def run_child(a, rel, original_interpreter):
    """One version in a child process. Returns (result or None, why it was stopped or "",
    the last phase). The child is stopped when the whole version passes --version_timeout, or
    when a phase on the original makes no progress for --stall_s seconds."""
    cmd = [sys.executable, os.path.abspath(__file__), "--registry", a.registry, "--output", a.output,
           "--device", a.device, "--steps", str(a.steps), "--rounds", str(a.rounds),
           "--iters", str(a.iters), "--optimizer", a.optimizer, "--single", rel]
    if original_interpreter:
        cmd.append("--original_interpreter")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    state = {"phase": "start", "since": time.monotonic(), "stderr": []}

    def read_stderr():
        for line in p.stderr:
            state["stderr"].append(line)
            if line.startswith("phase: "):
                state["phase"], state["since"] = line[len("phase: "):].strip(), time.monotonic()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    out = []
    out_reader = threading.Thread(target=lambda: out.extend(p.stdout), daemon=True)
    out_reader.start()
    start, stopped = time.monotonic(), ""
    while p.poll() is None:
        time.sleep(0.2)
        now = time.monotonic()
        if now - start > a.version_timeout:
            stopped = "did not finish in %d s" % a.version_timeout
        elif "original" in state["phase"] and a.stall_s and now - state["since"] > a.stall_s:
            stopped = "no progress for %d s" % a.stall_s
        if stopped:
            p.kill()
            p.wait()
    reader.join(5)
    out_reader.join(5)
    if stopped:
        return None, stopped, state["phase"]
    for line in reversed(out):
        if line.startswith("{"):
            return json.loads(line), "", state["phase"]
    tail = ("".join(state["stderr"]).strip().splitlines() or ["no output"])[-1][:300]
    return {"row": {"error": "client process exited %d: %s" % (p.returncode, tail)},
            "failed": True}, "", state["phase"]


def run_isolated(a, rel):
    """Runs one version in a child process. An original that stalls under the executor is run
    again in the interpreter (the row's `original_timing` says why). A version that does not
    finish is a failure, unless it stopped in a phase on the original model: then the original
    itself does not run in this torch (the row says so), which no artifact can be blamed for."""
    res, stopped, last = run_child(a, rel, original_interpreter=False)
    note = ""
    if stopped and "original" in last:
        note = "interpreter: under the executor, %s in '%s'" % (stopped, last)
        res, stopped, last = run_child(a, rel, original_interpreter=True)
    if stopped:
        row = {"error": "%s (stopped in: %s)" % (stopped, last)}
        original_hangs = "original" in last
        row["original_does_not_finish"] = original_hangs
        return row, not original_hangs
    row, failed = res["row"], res["failed"]
    if note:
        row["original_timing"] = note
    return row, failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--registry", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adagrad", "sparse_adam"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--version_timeout", type=int, default=240,
                    help="seconds per version, each in its own process (0: all in this process)")
    ap.add_argument("--stall_s", type=int, default=20,
                    help="seconds a phase on the original may go without progress before the "
                         "version runs again with the original in the interpreter (0: never)")
    ap.add_argument("--single", default="", help=argparse.SUPPRESS)  # child: one version, JSON out
    ap.add_argument("--original_interpreter", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json", default="")
    ap.add_argument("--markdown", default="")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if a.single:
        with open(os.path.join(a.output, a.single, "report.json")) as f:
            rep = json.load(f)
        row, failed = measure_version(a, a.single, rep)
        print(json.dumps({"row": row, "failed": failed}), flush=True)
        return 0
    dev = a.device
    rows, bad = [], 0
    for rep_path in sorted(glob.glob(os.path.join(a.output, "*", "*", "report.json"))):
        rel = os.path.relpath(os.path.dirname(rep_path), a.output)
        if a.only and rel.split(os.sep)[0] not in a.only.split(","):
            continue
        with open(rep_path) as f:
            rep = json.load(f)
        row = {"version": rel, "status": rep.get("status"), "reason": rep.get("reason", ""),
               "aten_ops": [rep.get("aten_ops_per_forward_before"), rep.get("aten_ops_per_forward_after")]}
        rows.append(row)
        t_start = time.perf_counter()
        if rep.get("status") == "rejected":
            bad += 1
            row["error"] = "rejected: " + rep.get("reason", "")
        else:
            fields, failed = (run_isolated(a, rel) if a.version_timeout > 0
                              else measure_version(a, rel, rep))
            row.update(fields)
            bad += int(failed)
        row["client_s"] = round(time.perf_counter() - t_start, 1)
        print(json.dumps(row), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": dev, "rows": rows}, f, indent=1)
    if a.markdown:
        def pair(v, spec="%.3f"):
            if not v or v[0] is None:
                return "-"
            return (spec % v[0]) + " -> " + (spec % v[1]) if v[1] is not None else spec % v[0]

        lines = ["| version | status | aten ops/fwd | CUDA kernels fwd | CUDA kernels train | fwd ms | train ms | train speed-up | 20-step losses |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            sp = "-"
            if r.get("train_ms"):
                sp = "%.2fx" % (r["train_ms"][0] / r["train_ms"][1])
                if r.get("original_timing"):
                    sp += " (original in the interpreter: its executor stalls)"
            losses = r.get("losses", {})
            lm = ("match (%.4g -> %.4g)" % tuple(losses["published"])) if losses.get("match") else (
                "DIFFER" if losses else r.get("error", "-"))
            lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["version"], r["status"], pair(r["aten_ops"], "%d"), pair(r.get("kernels_forward"), "%d"),
                pair(r.get("kernels_train"), "%d"), pair(r.get("forward_ms")), pair(r.get("train_ms")), sp, lm))
        with open(a.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")
    print("train_client: %d versions, %d failures" % (len(rows), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
