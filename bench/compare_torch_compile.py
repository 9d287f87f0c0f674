#!/usr/bin/env python3
"""compare_torch_compile.py — the bench models under eager PyTorch, TorchScript (original and
Sentier-optimized) and torch.compile (inductor, without and with Optimus fusions), on one GPU.

Runs on the GPU machine only (needs torch with CUDA). Input: the directory that
`model_bench --export_dir=DIR` wrote, one folder per model:
    DIR/<model>/original.pt   TorchScript archive (parameters, seeded)
    DIR/<model>/optimized.pt  Sentier's artifact
    DIR/<model>/inputs.pt     tuple of input tensors at the GPU batch (torch::pickle_save)
    DIR/<model>/forward.py    the forward's TorchScript source (also Python, see bench/models.h)
Python models are rebuilt from forward.py (an nn.Module subclass whose parameters are the
archive's, same names and values), so every mode runs the same weights on the same inputs.

Modes (each model: one subprocess for the three uncompiled modes, one per compiled mode; every
subprocess has a time limit, --timeout, default 240 s: past it the row reads "did not finish"):
    eager            the Python module
    ts_original      torch.jit.load(original.pt)  (graph executor optimizations off, as model_bench)
    ts_sentier       torch.jit.load(optimized.pt)
    compile          torch.compile(module) (inductor, default options)
    compile_optimus  torch.compile(module) with Optimus' pre-/post-grad fusions enabled (the
                     names that exist in this torch are discovered at run time and printed)
fp32, TF32 off. Measured per mode: first-step time (compile time for the compiled modes:
first training step + first inference call), training step ms (forward + backward + SGD step
p -= lr * p.grad under no_grad; median of --steps, synchronized), inference ms, CUDA kernels per
training step and per inference (torch.profiler, memcpy/memset excluded), peak MiB of one
training step beyond what was allocated before it.

    python3 bench/compare_torch_compile.py --export_dir=$OUT/models [--models=dlrm,mmoe]
        [--modes=eager,ts_original,ts_sentier,compile,compile_optimus] [--timeout=240]
        [--steps=20] [--markdown=$OUT/compare.md] [--json=$OUT/compare.json]
        [--ts_executor=default|no_optimize] [--corpus_dir=testdata/models]

TorchScript modes run with the executor's defaults (its CUDA fuser on), as users run archives;
--ts_executor=no_optimize turns the graph executor's optimizations off (the setting of the
first recorded runs). Mode ts_sentier_stacked loads optimized_stacked.pt (an artifact written
with --param_layout=stacked).

Exported programs (the export dir holds original.pt2, torch.export.save of the module, and
optimized.pt2, Sentier's artifact of it): pt2_original and pt2_sentier run
torch.export.load(...).module() (the graph module users train, moved to the GPU with
torch.export.passes.move_to_device_pass); compile_pt2 and compile_pt2_optimus run
torch.compile of original.pt2's module, without and with Optimus. Their inputs are the
original.pt2's own sample inputs.

Corpus models (--corpus_dir): the export dir then holds, per model of testdata/models,
original.pt (the Python-scripted archive), optimized.pt / optimized_stacked.pt (sentier_opt
artifacts) and inputs.pt (any structure: tuples, lists, dicts of tensors); the Python module for
eager and compiled modes is built from testdata/models/make_corpus.py and loaded with the
archive's state dict (see tools/gpu/corpus_targets.sh).
"""

import argparse
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ALL_MODES = ["eager", "ts_original", "ts_sentier", "compile", "compile_optimus"]
PT2_MODES = ["pt2_original", "pt2_sentier", "compile_pt2", "compile_pt2_optimus"]
KNOWN_MODES = ALL_MODES + ["ts_sentier_stacked"] + PT2_MODES
UNCOMPILED = ["eager", "ts_original", "ts_sentier", "ts_sentier_stacked", "pt2_original",
              "pt2_sentier"]
TS_ARCHIVE = {"ts_original": "original.pt", "ts_sentier": "optimized.pt",
              "ts_sentier_stacked": "optimized_stacked.pt"}
PT2_ARCHIVE = {"pt2_original": "original.pt2", "pt2_sentier": "optimized.pt2",
               "compile_pt2": "original.pt2", "compile_pt2_optimus": "original.pt2"}
LR = 1e-3

# Optimus fusions wanted (Optimus' own names); only those this torch knows are enabled.
WANTED_PRE = [
    "batch_linear", "batch_linear_lhs", "batch_layernorm", "batch_relu", "batch_tanh",
    "batch_sigmoid", "batch_detach", "batch_nan_to_num", "batch_clamp", "batch_dropout",
    "normalization_pass", "remove_split_with_size_one_pass", "merge_getitem_cat_pass",
    "merge_splits_pass", "mutate_cat_pass", "split_cat_pass", "unbind_stack_pass",
    "merge_stack_tahn_unbind_pass", "merge_unbind_stack_pass", "split_cat_to_slices_pass",
    "unbind_cat_to_view_pass", "split_stack_to_cats_pass", "unbind_stack_to_slices_pass",
    "move_reshape_out_of_split_stack_pass",
]
WANTED_POST = [
    "batch_aten_add", "batch_aten_sub", "batch_aten_mul", "batch_aten_div",
    "batch_aten_relu", "batch_aten_sigmoid", "batch_aten_tanh", "batch_linear_post_grad",
    "normalization_aten_pass", "unbind_stack_aten_pass", "split_cat_aten_pass",
    "select_cat_aten_pass",
]


# ----------------------------------------------------------------------------------------------
# Worker side (one subprocess).

def discover_optimus_names():
    """Names of pre-/post-grad fusions and pattern passes this torch defines."""
    pre, post = set(), set()
    try:
        from torch._inductor.fx_passes import group_batch_fusion as g
        pre |= set(getattr(g, "PRE_GRAD_FUSIONS", {}) or {})
        post |= set(getattr(g, "POST_GRAD_FUSIONS", {}) or {})
    except Exception:  # noqa: BLE001 - any import problem means "unknown"
        pass
    for modname in ("split_cat", "pre_grad", "post_grad"):
        try:
            mod = importlib.import_module("torch._inductor.fx_passes." + modname)
        except Exception:  # noqa: BLE001
            continue
        for attr in ("PRE_GRAD_PATTERNS", "pre_grad_pass_names"):
            pre |= set(getattr(mod, attr, {}) or {})
        for attr in ("POST_GRAD_PATTERNS", "post_grad_pass_names"):
            post |= set(getattr(mod, attr, {}) or {})
    return pre, post


def enable_optimus():
    import torch._inductor.config as cfg
    known_pre, known_post = discover_optimus_names()
    if known_pre or known_post:
        pre = [n for n in WANTED_PRE if n in known_pre]
        post = [n for n in WANTED_POST if n in known_post]
        missing = [n for n in WANTED_PRE + WANTED_POST if n not in known_pre | known_post]
    else:  # discovery failed: try the wanted names as they are
        pre, post, missing = list(WANTED_PRE), list(WANTED_POST), []
    cfg.pre_grad_fusion_options = {n: {} for n in pre}
    cfg.post_grad_fusion_options = {n: {} for n in post}
    return {"pre_grad": pre, "post_grad": post, "not_in_this_torch": missing,
            "known_pre": sorted(known_pre), "known_post": sorted(known_post)}


def _tree_helpers():
    """to_device / float_tensors over tensors in tuples, lists and dicts: the Python client's
    (tools/gpu/train_client.py), one definition for both scripts."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "tools", "gpu"))
    import train_client  # noqa: E402
    return train_client.to_device, train_client.float_tensors


to_device, float_tensors = _tree_helpers()


def load_inputs(path, device):
    import torch
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - older formats / weights_only refusals
        obj = torch.load(path, map_location="cpu", weights_only=False)
    if not isinstance(obj, tuple):
        obj = (obj,)
    return to_device(obj, device)


def corpus_module(corpus_dir, model_dir, name, device):
    """The corpus model as written in Python (testdata/models/make_corpus.py), with the
    archive's parameters and buffers (strict)."""
    import torch
    sys.path.insert(0, os.path.abspath(corpus_dir))
    import make_corpus  # noqa: E402 - the corpus's own module
    module, _, _ = make_corpus.REGISTRY[name](1)
    ts = torch.jit.load(os.path.join(model_dir, "original.pt"), map_location="cpu")
    module.load_state_dict({k: v.detach().clone() for k, v in ts.state_dict().items()}, strict=True)
    return module.to(device)


def python_module(model_dir, name, device):
    """nn.Module from forward.py with the archive's parameters."""
    import torch
    src = open(os.path.join(model_dir, "forward.py")).read()
    # torch.linear exists only in TorchScript; Python spells it torch.nn.functional.linear.
    src = src.replace("torch.linear(", "torch.nn.functional.linear(")
    tmp = tempfile.mkdtemp(prefix="bench_src_")
    path = os.path.join(tmp, "bench_%s.py" % name)
    with open(path, "w") as f:
        f.write("import torch\n\n\n" + src)
    spec = importlib.util.spec_from_file_location("bench_%s" % name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cls = type("Bench_%s" % name, (torch.nn.Module,), {"forward": mod.forward})
    m = cls()
    ts = torch.jit.load(os.path.join(model_dir, "original.pt"), map_location="cpu")
    for pname, p in ts.named_parameters():
        m.register_parameter(pname, torch.nn.Parameter(p.detach().clone().to(device)))
    return m


def count_kernels(step, torch):
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    n = 0
    for e in prof.events():
        dev = getattr(e, "device_type", None)
        if dev is None or "CUDA" not in str(dev):
            continue
        if e.name.startswith(("Memcpy", "Memset", "cudaMemcpy", "cudaMemset")):
            continue
        n += 1
    return n


def median_ms(step, steps, torch):
    for _ in range(5):  # TorchScript's profiling runs, then its optimized plan
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - t))
    return statistics.median(times)


def run_mode(model_dir, name, mode, steps, ts_executor="default", corpus_dir=""):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    res = {"model": name, "mode": mode}
    pt2 = PT2_ARCHIVE.get(mode)
    if pt2:
        from torch.export.passes import move_to_device_pass
        ep = torch.export.load(os.path.join(model_dir, pt2))
        ex_args, _ = torch.export.load(os.path.join(model_dir, "original.pt2")).example_inputs
        inputs = to_device(tuple(ex_args), dev)
    else:
        inputs = load_inputs(os.path.join(model_dir, "inputs.pt"), dev)
    first = float_tensors(inputs) or [t for t in [inputs[0]] if isinstance(t, torch.Tensor)]
    res["batch"] = int(first[0].shape[0]) if first else None
    if mode.startswith("ts_"):
        if ts_executor == "no_optimize":
            torch._C._set_graph_executor_optimize(False)
        res["ts_executor"] = ts_executor
        model = torch.jit.load(os.path.join(model_dir, TS_ARCHIVE[mode]), map_location=dev)
        params = [p for p in model.parameters() if p.is_floating_point()]
    else:
        if pt2:
            module = move_to_device_pass(ep, dev).module()
        elif corpus_dir:
            module = corpus_module(corpus_dir, model_dir, name, dev)
        else:
            module = python_module(model_dir, name, dev)
        params = [p for p in module.parameters() if p.is_floating_point()]
        model = module
        if mode.startswith("compile"):
            import torch._dynamo
            import torch._inductor.config as cfg
            if hasattr(cfg, "fx_graph_cache"):
                cfg.fx_graph_cache = False  # cold compile: the time is the real compile time
            if mode in ("compile_optimus", "compile_pt2_optimus"):
                res["optimus"] = enable_optimus()
            torch._dynamo.reset()
            model = torch.compile(module)
    for p in params:
        p.requires_grad_(True)

    def train_step():
        outs = float_tensors(model(*inputs))
        loss = outs[0].mean()
        for o in outs[1:]:
            loss = loss + o.mean()
        loss.backward()
        with torch.no_grad():
            for p in params:  # p -= lr * p.grad; p.grad = None
                if p.grad is not None:
                    p.add_(p.grad, alpha=-LR)
                    p.grad = None

    def infer_step():
        with torch.no_grad():
            model(*inputs)

    torch.cuda.synchronize()
    t = time.perf_counter()
    train_step()
    torch.cuda.synchronize()
    res["first_train_s"] = time.perf_counter() - t
    t = time.perf_counter()
    infer_step()
    torch.cuda.synchronize()
    res["first_infer_s"] = time.perf_counter() - t
    res["train_ms"] = median_ms(train_step, steps, torch)
    res["infer_ms"] = median_ms(infer_step, steps, torch)
    res["kernels_train"] = count_kernels(train_step, torch)
    res["kernels_infer"] = count_kernels(infer_step, torch)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    train_step()
    torch.cuda.synchronize()
    res["peak_train_mib"] = (torch.cuda.max_memory_allocated() - before) / 2**20
    if mode.startswith("compile"):
        try:
            from torch._dynamo.utils import counters
            res["inductor_counters"] = {k: v for k, v in counters["inductor"].items()
                                        if any(s in k for s in ("batch", "split", "cat", "stack",
                                                                "unbind", "normaliz", "fusion",
                                                                "pass"))}
        except Exception:  # noqa: BLE001
            pass
    res["torch"] = torch.__version__
    res["device_name"] = torch.cuda.get_device_name(0)
    return res


def worker_main(args):
    model_dir = os.path.join(args.export_dir, args.worker)
    for mode in args.modes.split(","):
        try:
            res = run_mode(model_dir, args.worker, mode, args.steps, args.ts_executor,
                           args.corpus_dir)
        except Exception as e:  # noqa: BLE001 - reported as a failed row
            msg = str(e).strip().splitlines()
            res = {"model": args.worker, "mode": mode,
                   "error": "%s: %s" % (type(e).__name__, msg[0][:300] if msg else "")}
        print("RESULT " + json.dumps(res), flush=True)


# ----------------------------------------------------------------------------------------------
# Driver side.

def run_worker(args, model, modes):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", model, "--modes", ",".join(modes),
           "--export_dir", args.export_dir, "--steps", str(args.steps),
           "--ts_executor", args.ts_executor, "--corpus_dir", args.corpus_dir]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)  # the worker and its compile workers
        out, err = proc.communicate()
    wall = time.perf_counter() - t
    results = {}
    for line in out.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[len("RESULT "):])
            results[r["mode"]] = r
    for mode in modes:
        if mode in results:
            continue
        if timed_out:
            results[mode] = {"model": model, "mode": mode,
                             "error": "did not finish (timeout %d s)" % args.timeout}
        else:
            tail = [l for l in err.strip().splitlines() if l.strip()][-1:] or ["no output"]
            results[mode] = {"model": model, "mode": mode,
                             "error": "failed (exit %s): %s" % (proc.returncode, tail[0][:300])}
    if err.strip() and args.verbose:
        sys.stderr.write(err)
    print("  %s [%s]: %.1f s%s" % (model, ",".join(modes), wall, " (TIMEOUT)" if timed_out else ""),
          file=sys.stderr, flush=True)
    for m in modes:  # each row as soon as it exists: a run cut short keeps what it measured
        print("ROW " + json.dumps(results[m]), file=sys.stderr, flush=True)
    return [results[m] for m in modes]


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def markdown(rows):
    lines = [
        "| model | mode | first step s (compile) | train step ms | vs eager | vs TorchScript | infer ms | "
        "vs eager | CUDA kernels / train step | CUDA kernels / infer | peak MiB / train step |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    eager = {r["model"]: r for r in rows if r["mode"] == "eager" and "error" not in r}
    ts = {r["model"]: r for r in rows if r["mode"] == "ts_original" and "error" not in r}
    for r in rows:
        if "error" in r:
            lines.append("| %s | %s | %s | | | | | | | | |" % (r["model"], r["mode"], r["error"]))
            continue
        e = eager.get(r["model"])
        o = ts.get(r["model"])
        vs_t = "%.2fx" % (e["train_ms"] / r["train_ms"]) if e else "-"
        vs_o = "%.2fx" % (o["train_ms"] / r["train_ms"]) if o else "-"
        vs_i = "%.2fx" % (e["infer_ms"] / r["infer_ms"]) if e else "-"
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %d | %d | %s |" % (
            r["model"], r["mode"], fmt(r["first_train_s"] + r["first_infer_s"], ".2f"),
            fmt(r["train_ms"], ".3f"), vs_t, vs_o, fmt(r["infer_ms"], ".3f"), vs_i,
            r["kernels_train"], r["kernels_infer"], fmt(r["peak_train_mib"], ".0f")))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--export_dir", required=True, help="what model_bench --export_dir wrote")
    ap.add_argument("--models", default="", help="comma-separated subset (default: all exported)")
    ap.add_argument("--modes", default=",".join(ALL_MODES))
    ap.add_argument("--timeout", type=int, default=240, help="seconds per subprocess")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--markdown", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--verbose", action="store_true", help="echo the workers' stderr")
    ap.add_argument("--ts_executor", default="default", choices=["default", "no_optimize"],
                    help="TorchScript modes: the executor's defaults, or its optimizations off")
    ap.add_argument("--corpus_dir", default="",
                    help="testdata/models: Python modules from make_corpus.py (corpus exports)")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker_main(args)
        return 0
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in KNOWN_MODES]
    if bad:
        ap.error("unknown modes %s (known: %s)" % (bad, ",".join(KNOWN_MODES)))
    if args.models:
        models = [m for m in args.models.split(",") if m]
    else:
        marker = "original.pt" if args.corpus_dir else "forward.py"
        models = sorted(d for d in os.listdir(args.export_dir)
                        if os.path.exists(os.path.join(args.export_dir, d, marker)))
    if not models:
        ap.error("no exported models under %s (run model_bench --export_dir first)" % args.export_dir)
    rows = []
    for model in models:
        groups = []
        plain = [m for m in modes if m in UNCOMPILED]
        if plain:
            groups.append(plain)
        groups += [[m] for m in modes if m not in UNCOMPILED]
        for g in groups:
            rows += run_worker(args, model, g)
    table = markdown(rows)
    header = ""
    ok = [r for r in rows if "error" not in r]
    if ok:
        header = "torch %s on %s, fp32, TF32 off, per-step synchronized medians of %d steps\n\n" % (
            ok[0]["torch"], ok[0]["device_name"], args.steps)
    optimus = next((r["optimus"] for r in rows if "optimus" in r), None)
    footer = ""
    if optimus:
        footer = ("\nOptimus enabled: pre_grad_fusion_options=%s post_grad_fusion_options=%s; "
                  "wanted but not in this torch: %s\n" % (optimus["pre_grad"], optimus["post_grad"],
                                                        optimus["not_in_this_torch"]))
    counters = ["- %s/%s inductor counters: %s" % (r["model"], r["mode"], r["inductor_counters"])
                for r in rows if r.get("inductor_counters")]
    text = header + table + "\n" + footer + ("\n" + "\n".join(counters) + "\n" if counters else "")
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
