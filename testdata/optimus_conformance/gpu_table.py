#!/usr/bin/env python3
"""CUDA kernels and step times of the Optimus conformance set: TorchScript as saved, Sentier's
artifact, and the same module under torch.compile with Optimus's fusions, side by side.

For every module of DIR (written by make_conformance.py at the wanted batch) and every archive
kind there (scripted, traced), with Sentier's artifact next to it as <kind>.opt.pt (written by
sentier_opt beforehand; tools/gpu/conformance_on_gpu.sh does both), one worker process per
module measures on CUDA, TF32 off:

  ts_original   torch.jit.load(<kind>.pt): the executor at its defaults, as users run archives
  ts_sentier    torch.jit.load(<kind>.opt.pt), the same way
  compile_optimus  the module as make_conformance.py writes it, with the scripted archive's
                parameters, under torch.compile with Optimus's pre- and post-grad fusions
                (bench/compare_torch_compile.py's set); once per module, not per kind

and per mode: CUDA kernels per training step (forward, loss = sum of the means of the float
outputs, backward to the parameters and the float inputs; memcpy/memset not counted) and per
no-grad forward, and the median milliseconds of 20 training steps after 5 warm-up steps.
Kernels are exact; with --workers > 1 the workers share the GPU and the host, so the times are
indicative (sentierd's reports carry the alternated timings its gate judged by).

  python3 testdata/optimus_conformance/gpu_table.py --dir DIR [--modules a,b] [--workers 6]
          [--json OUT.json] [--markdown OUT.md] [--timeout 240]
  python3 testdata/optimus_conformance/gpu_table.py --sentierd_reports OUTPUT_DIR [--markdown F]

--sentierd_reports summarizes what sentierd published for a registry of the set (one version per
module): status and decision, memory clause, the gate's alternated training-step timing and CUDA
kernels of the validated artifact, job time and the rules applied.
"""

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import time

DEVICE = "cuda"  # --device cpu: a smoke test of the script without kernel counts
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")


def _error(e):
    msg = str(e).strip()
    return "%s: %s" % (type(e).__name__, msg.splitlines()[0][:200] if msg else "")


def _inputs_with_grad(model_dir, dev):
    """The sample inputs on `dev`, the floating ones requiring grad (the step differentiates to
    them too)."""
    from compare_torch_compile import float_tensors, load_inputs
    inputs = load_inputs(os.path.join(model_dir, "inputs.pt"), dev)
    for t in float_tensors(inputs):
        t.requires_grad_(True)
    return inputs


def _float_params(module):
    params = [p for p in module.parameters() if p.is_floating_point()]
    for p in params:
        p.requires_grad_(True)
    return params


def _steps(torch, model, inputs, params):
    from compare_torch_compile import float_tensors
    leaves = [t for t in float_tensors(inputs)] + list(params)

    def train():
        for t in leaves:
            t.grad = None
        outs = [o for o in float_tensors(model(*inputs)) if o.requires_grad]
        if not outs:  # nothing to differentiate (detached outputs): the step is the forward
            return
        loss = outs[0].mean()
        for o in outs[1:]:
            loss = loss + o.mean()
        loss.backward()

    def forward():
        with torch.no_grad():
            model(*inputs)

    return train, forward


def _measure(torch, train, forward):
    from compare_torch_compile import count_kernels
    cuda = DEVICE == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    t0 = time.perf_counter()
    train()
    sync()
    first_s = time.perf_counter() - t0
    for _ in range(5):
        train()
    sync()
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        train()
        sync()
        times.append(1e3 * (time.perf_counter() - t0))
    forward()
    forward()
    if not cuda:
        return {"train_ms": statistics.median(times), "first_step_s": first_s}
    return {"kernels_train": count_kernels(train, torch), "kernels_forward": count_kernels(forward, torch),
            "train_ms": statistics.median(times), "first_step_s": first_s}


def measure_archives(torch, model_dir, name, dev):
    """ts_original and ts_sentier rows for each archive kind of the module."""
    rows = []
    for kind in ("scripted", "traced"):
        path = os.path.join(model_dir, kind + ".pt")
        if not os.path.exists(path):
            continue
        for mode, archive in (("ts_original", path), ("ts_sentier", path[:-3] + ".opt.pt")):
            row = {"module": name, "kind": kind, "mode": mode}
            try:
                if not os.path.exists(archive):
                    raise RuntimeError("no artifact (sentier_opt failed or left the model unchanged)")
                model = torch.jit.load(archive, map_location=dev)
                inputs = _inputs_with_grad(model_dir, dev)
                row.update(_measure(torch, *_steps(torch, model, inputs, _float_params(model))))
            except Exception as e:  # noqa: BLE001 - a failed row says why
                row["error"] = _error(e)
            rows.append(row)
    return rows


def measure_compiled(torch, model_dir, name, dev):
    """The compile_optimus row: the module as make_conformance.py writes it, with the scripted
    archive's parameters, under torch.compile with Optimus's fusions; the Optimus counters that
    moved."""
    row = {"module": name, "kind": "module", "mode": "compile_optimus"}
    try:
        import make_conformance
        from compare_torch_compile import enable_optimus
        import torch._dynamo
        import torch._inductor.config as cfg
        from torch._dynamo.utils import counters
        if hasattr(cfg, "fx_graph_cache"):
            cfg.fx_graph_cache = False
        case = make_conformance.CASES[name]
        module = case.make_module()
        if case.eval_mode:
            module.eval()
        ts = torch.jit.load(os.path.join(model_dir, "scripted.pt"), map_location="cpu")
        module.load_state_dict({k: v.detach().clone() for k, v in ts.state_dict().items()}, strict=True)
        module = module.to(dev)
        enable_optimus()
        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(module)
        inputs = _inputs_with_grad(model_dir, dev)
        row.update(_measure(torch, *_steps(torch, compiled, inputs, _float_params(module))))
        row["inductor_counters"] = {k: v for k, v in counters["inductor"].items()
                                    if any(s in k for s in ("batch", "split", "cat", "stack", "unbind",
                                                            "normaliz", "fusion", "getitem", "squeeze",
                                                            "reshape", "select"))}
    except Exception as e:  # noqa: BLE001
        row["error"] = _error(e)
    return row


def worker(model_dir, name):
    import torch
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    sys.path.insert(0, HERE)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(DEVICE)
    return measure_archives(torch, model_dir, name, dev) + [measure_compiled(torch, model_dir, name, dev)]


def run_worker(args, name):
    cmd = [sys.executable, os.path.abspath(__file__), "--dir", args.dir, "--worker", name,
           "--device", args.device]
    try:
        run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return [{"module": name, "kind": "-", "mode": "-", "error": "timed out after %d s" % args.timeout}]
    rows = [json.loads(l[7:]) for l in run.stdout.splitlines() if l.startswith("RESULT ")]
    if not rows:
        tail = (run.stderr.strip().splitlines() or ["(no output)"])[-1]
        rows = [{"module": name, "kind": "-", "mode": "-", "error": "worker exit %d: %s" % (run.returncode, tail[:200])}]
    return rows


def cell(rows, module, kind, mode, key, spec="%d"):
    for r in rows:
        if r["module"] == module and r["kind"] == kind and r["mode"] == mode:
            if "error" in r:
                return "n/a"
            return spec % r[key] if key in r else ""
    return ""


def markdown(rows, names):
    out = ["| module | archive | CUDA kernels per training step: TorchScript -> Sentier | "
           "per forward | torch.compile + Optimus (per step / forward) | step ms: TorchScript / "
           "Sentier / compile+Optimus | Optimus counters |",
           "|---|---|---|---|---|---|---|"]
    for name in names:
        comp = [r for r in rows if r["module"] == name and r["mode"] == "compile_optimus"]
        counters = ""
        if comp and "inductor_counters" in comp[0]:
            counters = ", ".join("%s %s" % (k, v) for k, v in sorted(comp[0]["inductor_counters"].items()))
        elif comp and "error" in comp[0]:
            counters = "compile failed: " + comp[0]["error"][:80]
        for kind in ("scripted", "traced"):
            if not any(r["module"] == name and r["kind"] == kind for r in rows):
                continue
            out.append("| %s | %s | %s -> %s | %s -> %s | %s / %s | %s / %s / %s | %s |" % (
                name, kind,
                cell(rows, name, kind, "ts_original", "kernels_train"),
                cell(rows, name, kind, "ts_sentier", "kernels_train"),
                cell(rows, name, kind, "ts_original", "kernels_forward"),
                cell(rows, name, kind, "ts_sentier", "kernels_forward"),
                cell(rows, name, "module", "compile_optimus", "kernels_train"),
                cell(rows, name, "module", "compile_optimus", "kernels_forward"),
                cell(rows, name, kind, "ts_original", "train_ms", "%.3f"),
                cell(rows, name, kind, "ts_sentier", "train_ms", "%.3f"),
                cell(rows, name, "module", "compile_optimus", "train_ms", "%.3f"),
                counters if kind == "scripted" else ""))
    return "\n".join(out) + "\n"


def sentierd_markdown(out_dir, names):
    """One row per model of sentierd's reports under OUT_DIR/<model>/1/report.json."""
    lines = ["| module | status (decision) | memory clause | training step ms (gate's alternated "
             "timing) | CUDA kernels per step | job s | rules |", "|---|---|---|---|---|---|---|"]
    counts = {}
    for name in names:
        path = os.path.join(out_dir, name, "1", "report.json")
        if not os.path.exists(path):
            counts["no report (not reached)"] = counts.get("no report (not reached)", 0) + 1
            lines.append("| %s | no report (not reached) | | | | | |" % name)
            continue
        with open(path) as f:
            r = json.load(f)
        status = r.get("status", "?")
        counts[status] = counts.get(status, 0) + 1
        val = r.get("validation", {})
        ms = val.get("training_step_ms") or val.get("forward_ms") or {}
        kern = val.get("cuda_kernels_per_training_step", {})
        timing = ""
        if ms.get("reference") and ms.get("candidate"):
            timing = "%.3f -> %.3f (%.2fx)" % (ms["reference"], ms["candidate"],
                                                ms["reference"] / ms["candidate"])
        elif r.get("selection", {}).get("all_rules_ms"):
            timing = "gate: all rules %s" % r["selection"]["all_rules_ms"]
        kernels = "%s -> %s" % (kern["reference"], kern["candidate"]) if kern else ""
        rules = ", ".join("%s x%d" % (k, v) for k, v in sorted(r.get("rule_counts", {}).items()) if v)
        lines.append("| %s | %s (%s) | %s | %s | %s | %.1f | %s |" % (
            name, status, r.get("decision", ""), r.get("memory_policy", {}).get("clause", ""),
            timing, kernels, r.get("timings_ms", {}).get("job_total", 0) / 1e3, rules))
    summary = "; ".join("%s %d" % kv for kv in sorted(counts.items()))
    return "\n".join(lines) + "\n\n" + summary + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="")
    ap.add_argument("--modules", default="")
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--timeout", type=int, default=240, help="seconds per module")
    ap.add_argument("--json", default="")
    ap.add_argument("--markdown", default="")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--sentierd_reports", default="",
                    help="summarize sentierd's reports under this output dir instead")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device
    if args.worker:
        for row in worker(os.path.join(args.dir, args.worker), args.worker):
            print("RESULT " + json.dumps(row), flush=True)
        return 0
    if args.sentierd_reports:
        names = [n for n in args.modules.split(",") if n] or sorted(
            d for d in os.listdir(args.sentierd_reports) if not d.startswith(".") and
            os.path.isdir(os.path.join(args.sentierd_reports, d)))
        md = sentierd_markdown(args.sentierd_reports, names)
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write(md)
        print(md)
        return 0
    names = [n for n in args.modules.split(",") if n] or sorted(
        d for d in os.listdir(args.dir) if os.path.isdir(os.path.join(args.dir, d)))
    rows = []

    def write(final):  # after every module: a run stopped early keeps what it measured
        done = [n for n in names if any(r["module"] == n for r in rows)]
        md = markdown(rows, done)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write(md)
        if final:
            print(md)

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.workers) as pool:
        for got in pool.map(lambda n: run_worker(args, n), names):
            rows.extend(got)
            print("%s: %d rows%s" % (got[0]["module"], len(got),
                                      "".join("; %s %s: %s" % (r["kind"], r["mode"], r["error"])
                                              for r in got if "error" in r)), flush=True)
            write(False)
    write(True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
