#!/usr/bin/env python3
"""Exports the model corpus and the Optimus conformance set as exported programs (.pt2).

Every module of testdata/models/make_corpus.py (REGISTRY) and of
testdata/optimus_conformance/make_conformance.py (CASES) is built exactly as those scripts build
it (same seed, same weights, same sample inputs at the same batch: 16 for the corpus, 8 for the
conformance set), then

  torch.export.export(module, args, strict=False)      static shapes, no dynamic_shapes

in the mode its TorchScript archives are written in: training mode (BatchNorm reads batch
statistics and updates its buffers), but for the conformance modules the make_conformance.py
registry marks eval (batch_dropout_modules: its dropouts draw random numbers in training mode).
The program is saved with torch.export.save, which also stores the sample inputs
(ExportedProgram.example_inputs):

  testdata/models/pt2/<name>.pt2
  testdata/optimus_conformance/pt2/<name>.pt2

Each directory gets a MANIFEST.json: per module either
  {"exported": true, "torch": "2.11.0", "nodes": N, "aten_ops": N, "targets": [...], ...}
or
  {"exported": false, "torch": "2.11.0", "reason": "<first line of torch's message>"}.
"nodes" counts every node of the exported graph (placeholders and the output included),
"aten_ops" the call_function nodes other than operator.getitem, "targets" their sorted unique
targets as the archive's model.json spells them ("torch.ops.aten.linear.default"; getitem is not
a node there). The top-level "targets" is the union over both directories (what a reader of these
archives meets), "targets_this_set" the union over this one.

Before saving, each program is run (ExportedProgram.module()) on a copy of its sample inputs
and compared with the eager module, and its parameters, buffers and inputs are compared with
those of the torch 2.11 TorchScript archives next to it (torch2.11/<name>/), where they exist:
"same_as_torchscript" in the manifest says whether the weights and the inputs are bitwise equal.

Deterministic: the seeds are the generators'; the absolute paths in the nodes' stack traces are
rewritten relative to the repository (and to site-packages for torch's own files), so re-running
writes byte-identical archives on any checkout (same torch version).

Usage (torch 2.11, e.g. /tmp/venv211/bin/python):
  python testdata/models/make_pt2.py [--set corpus|conformance|all] [--only a,b] [--check]
  python testdata/models/make_pt2.py --batch 4096 --out DIR [--set ...] [--only a,b]

--only re-exports a subset and updates those entries of the manifests. --batch N --out DIR exports
at batch N into DIR/<name>.pt2 and writes no manifest (the GPU scripts' batch, tools/gpu/). --check writes nothing
and exits 1 if any archive or manifest would change.
"""

import argparse
import copy
import hashlib
import json
import operator
import os
import re
import sys
import tempfile
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.utils._pytree as pytree

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
CONFORMANCE = os.path.join(REPO, "testdata", "optimus_conformance")
sys.path.insert(0, HERE)
sys.path.insert(0, CONFORMANCE)

import make_corpus  # noqa: E402
import make_conformance  # noqa: E402
from make_corpus import run_with_pinned_hash_seed  # noqa: E402

TORCH_VERSION = torch.__version__.split("+")[0]

SETS = {
    # set name -> (directory holding torch2.11/ and pt2/, batch of the TorchScript inputs)
    "corpus": (HERE, 16),
    "conformance": (CONFORMANCE, 8),
}


# --------------------------------------------------------------------------------------------
# Building the modules exactly as the TorchScript generators do.


def build(set_name: str, name: str, batch: int) -> Tuple[torch.nn.Module, tuple, bool]:
    """(module, args, training) with the generator's seeds: weights after manual_seed(seed),
    inputs after manual_seed(seed + 1)."""
    if set_name == "corpus":
        module, args, _, _ = make_corpus.REGISTRY[name](batch)
        return module.train(), tuple(args), True
    case = make_conformance.CASES[name]
    torch.manual_seed(case.seed)
    module = case.make_module()
    torch.manual_seed(case.seed + 1)
    args = case.make_args(batch)
    if case.eval_mode:
        return module.eval(), tuple(args), False
    return module.train(), tuple(args), True


def names_of(set_name: str) -> List[str]:
    if set_name == "corpus":
        return list(make_corpus.REGISTRY)
    return list(make_conformance.CASES)


# --------------------------------------------------------------------------------------------
# Comparisons.


def _bitwise_equal(a: Any, b: Any) -> bool:
    la, sa = pytree.tree_flatten(a)
    lb, sb = pytree.tree_flatten(b)
    if sa != sb or len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor):
            if x.dtype != y.dtype or x.shape != y.shape or x.layout != y.layout:
                return False
            if x.layout == torch.strided and x.dtype.is_floating_point:
                # The bits, so that NaN equals NaN (batch_nan_to_num_list_slice's inputs).
                bits_x = x.contiguous().view(torch.uint8)
                if not torch.equal(bits_x, y.contiguous().view(torch.uint8)):
                    return False
            elif not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True


def _close(a: Any, b: Any) -> bool:
    la, sa = pytree.tree_flatten(a)
    lb, sb = pytree.tree_flatten(b)
    if sa != sb:
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            if not torch.allclose(x, y, rtol=1e-5, atol=1e-6, equal_nan=True):
                return False
    return True


def same_as_torchscript(set_dir: str, name: str, state: Dict[str, torch.Tensor],
                        args: tuple) -> Optional[Dict[str, bool]]:
    """Whether the weights and the sample inputs are bitwise those of torch2.11/<name>/ (None when
    that directory has no archive)."""
    model_dir = os.path.join(set_dir, "torch2.11", name)
    archive = None
    for kind in ("scripted.pt", "traced.pt"):
        if os.path.exists(os.path.join(model_dir, kind)):
            archive = os.path.join(model_dir, kind)
            break
    inputs_path = os.path.join(model_dir, "inputs.pt")
    if archive is None or not os.path.exists(inputs_path):
        return None
    ts_state = torch.jit.load(archive, map_location="cpu").state_dict()
    weights = (set(ts_state) == set(state)
               and all(_bitwise_equal(ts_state[k], state[k]) for k in state))
    inputs = _bitwise_equal(tuple(torch.load(inputs_path, weights_only=False)), tuple(args))
    return {"weights": weights, "inputs": inputs}


# --------------------------------------------------------------------------------------------
# Export.


_FILE_RE = re.compile(r'File "([^"]+)"')


def _portable_path(path: str) -> str:
    """A stack trace's file path without the machine's prefixes."""
    absolute = os.path.abspath(path)
    if absolute.startswith(REPO + os.sep):
        return os.path.relpath(absolute, REPO)
    marker = os.sep + "site-packages" + os.sep
    if marker in absolute:
        return absolute.split(marker, 1)[1]
    return os.path.basename(absolute)


def make_portable(ep: torch.export.ExportedProgram) -> None:
    """Rewrites the absolute paths in the nodes' stack traces (kept: they say which line of the
    user's code made each op)."""
    for node in ep.graph.nodes:
        trace = node.meta.get("stack_trace")
        if trace:
            node.meta["stack_trace"] = _FILE_RE.sub(
                lambda m: 'File "%s"' % _portable_path(m.group(1)), trace)


def _serialized_targets(path: str) -> List[str]:
    """The op targets of the archive's model.json (what a reader of the archive sees)."""
    import zipfile
    targets = set()
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            if info.filename.endswith("models/model.json"):
                model = json.loads(z.read(info))
                for node in model["graph_module"]["graph"]["nodes"]:
                    targets.add(node["target"])
    return sorted(targets)


def graph_counts(ep: torch.export.ExportedProgram) -> Tuple[int, int]:
    nodes = list(ep.graph.nodes)
    aten = [n for n in nodes if n.op == "call_function" and n.target is not operator.getitem]
    return len(nodes), len(aten)


def export_one(set_name: str, name: str, out_dir: str, files: Dict[str, bytes],
               batch: Optional[int] = None) -> Dict[str, Any]:
    """Exports one module into files[<name>.pt2] (bytes) and returns its manifest entry. A batch
    other than the set's own (--batch) skips the comparison with the TorchScript archives'
    inputs, which are drawn at the set's batch."""
    set_dir, set_batch = SETS[set_name]
    batch = batch or set_batch
    module, args, training = build(set_name, name, batch)
    state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    with torch.no_grad():
        expected = copy.deepcopy(module)(*copy.deepcopy(args))
    try:
        ep = torch.export.export(copy.deepcopy(module), copy.deepcopy(args), strict=False)
    except Exception as e:  # torch refuses the module: record its reason
        lines = [l.strip() for l in str(e).splitlines() if l.strip()]
        reason = "%s: %s" % (type(e).__name__, lines[0] if lines else "")
        return {"exported": False, "torch": TORCH_VERSION, "reason": reason}
    make_portable(ep)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, name + ".pt2")
        torch.export.save(ep, path)
        with open(path, "rb") as f:
            data = f.read()
        loaded = torch.export.load(path)
        targets = _serialized_targets(path)
    # The saved program, run on a copy of its own sample inputs, gives the eager module's output.
    ex_args, ex_kwargs = loaded.example_inputs
    if not _bitwise_equal(tuple(ex_args), args) or ex_kwargs:
        raise RuntimeError("%s: the archive's sample inputs are not the generator's" % name)
    saved_state = loaded.state_dict  # before running it: the run updates BatchNorm's buffers
    for k, v in state.items():
        if k in saved_state and not _bitwise_equal(saved_state[k], v):
            raise RuntimeError("%s: %s differs from the freshly built module" % (name, k))
    with torch.no_grad():
        got = loaded.module()(*copy.deepcopy(ex_args))
    if not _close(expected, got):
        raise RuntimeError("%s: the exported program's output differs from eager" % name)
    files[name + ".pt2"] = data
    nodes, aten_ops = graph_counts(loaded)
    same = same_as_torchscript(set_dir, name, state, args) if batch == set_batch else None
    entry: Dict[str, Any] = {
        "exported": True,
        "torch": TORCH_VERSION,
        "nodes": nodes,
        "aten_ops": aten_ops,
        "targets": targets,
        "training": training,
        "parameters": len(list(module.parameters())),
        "buffers": len(list(module.buffers())),
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    if same is not None:
        entry["same_as_torchscript"] = same
    return entry


# --------------------------------------------------------------------------------------------
# Manifests.


DESCRIPTIONS = {
    "corpus": "The model corpus (make_corpus.py) as exported programs",
    "conformance": "The Optimus conformance set (make_conformance.py) as exported programs",
}


def _manifest_path(set_name: str) -> str:
    return os.path.join(SETS[set_name][0], "pt2", "MANIFEST.json")


def _read_manifest(set_name: str) -> Dict[str, Any]:
    path = _manifest_path(set_name)
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return {"modules": {}}


def _union(entries: Dict[str, Dict[str, Any]]) -> List[str]:
    out = set()
    for e in entries.values():
        out.update(e.get("targets", []))
    return sorted(out)


def manifest_text(set_name: str, entries: Dict[str, Dict[str, Any]],
                  all_targets: List[str]) -> str:
    exported = sum(1 for e in entries.values() if e["exported"])
    manifest = {
        "description": (
            DESCRIPTIONS[set_name] + ": <name>.pt2 = torch.export.save(torch.export.export("
            "module, sample_inputs, strict=False)), static shapes, written by "
            "testdata/models/make_pt2.py with torch " + TORCH_VERSION + ". The archive holds its "
            "sample inputs (ExportedProgram.example_inputs). Per module: exported; torch; nodes "
            "(every graph node); aten_ops (call_function nodes other than getitem); targets "
            "(their sorted unique targets as model.json spells them); training (the mode it was "
            "exported in: the graph is specialized to it); parameters, buffers; bytes, sha256 of "
            "the archive; same_as_torchscript (weights and sample inputs bitwise equal to "
            "torch2.11/<name>/); or, where torch refuses, reason (the first line of its "
            "message). targets (top level): the union over testdata/models/pt2 and "
            "testdata/optimus_conformance/pt2; targets_this_set: over this directory."),
        "torch": TORCH_VERSION,
        "exported": exported,
        "refused": len(entries) - exported,
        "bytes": sum(e.get("bytes", 0) for e in entries.values()),
        "targets": all_targets,
        "targets_this_set": _union(entries),
        "modules": entries,
    }
    return json.dumps(manifest, indent=2, sort_keys=False) + "\n"


# --------------------------------------------------------------------------------------------


def export_at_batch(sets: List[str], only: List[str], batch: int, out: str) -> int:
    """--batch/--out: the same modules exported at another batch (the GPU scripts' 4096), one
    archive per module in OUT/<name>.pt2; the checked-in archives and manifests are untouched.
    Refusals are printed and skipped."""
    if batch <= 0 or not out:
        print("--batch and --out go together (a positive batch and a directory)", file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    for s in sets:
        for name in [n for n in names_of(s) if not only or n in only]:
            files: Dict[str, bytes] = {}
            entry = export_one(s, name, out, files, batch)
            for fname, data in files.items():
                with open(os.path.join(out, fname), "wb") as f:
                    f.write(data)
            print("%-12s %-40s %s" % (s, name, "%d aten ops at batch %d" % (entry["aten_ops"], batch)
                                      if entry["exported"] else "refused: " + entry["reason"]),
                  flush=True)
    return 0


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", default="all", choices=["corpus", "conformance", "all"])
    parser.add_argument("--only", default="", help="comma-separated subset of module names")
    parser.add_argument("--batch", type=int, default=0,
                        help="export at this batch into --out (archives only, no manifest)")
    parser.add_argument("--out", default="", help="with --batch: where the archives go")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if an archive or a manifest would change")
    opts = parser.parse_args(argv)
    if not TORCH_VERSION.startswith("2."):
        print("torch %s: torch.export needs torch 2.x (2.11 wrote these archives)"
              % torch.__version__, file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    sets = ["corpus", "conformance"] if opts.set == "all" else [opts.set]
    only = [n for n in opts.only.split(",") if n]
    known = set(names_of("corpus")) | set(names_of("conformance"))
    unknown = [n for n in only if n not in known]
    if unknown:
        print("unknown module(s): %s" % ", ".join(unknown), file=sys.stderr)
        return 2

    if opts.batch or opts.out:
        return export_at_batch(sets, only, opts.batch, opts.out)
    entries = {s: _read_manifest(s)["modules"] for s in SETS}
    files: Dict[str, Dict[str, bytes]] = {s: {} for s in SETS}
    for s in sets:
        names = [n for n in names_of(s) if not only or n in only]
        if not only:
            entries[s] = {}
        for name in names:
            entry = export_one(s, name, os.path.join(SETS[s][0], "pt2"), files[s])
            entries[s][name] = entry
            if entry["exported"]:
                same = entry.get("same_as_torchscript")
                print("%-12s %-40s %6d nodes %5d aten ops %8.1f KB%s" % (
                    s, name, entry["nodes"], entry["aten_ops"], entry["bytes"] / 1024.0,
                    "" if same is None else "  same as torch2.11 TorchScript: weights %s, "
                    "inputs %s" % (same["weights"], same["inputs"])))
            else:
                print("%-12s %-40s refused: %s" % (s, name, entry["reason"]))
        # Manifest order: the generator's registry order.
        order = names_of(s)
        entries[s] = {n: entries[s][n] for n in order if n in entries[s]}

    all_targets = sorted(set(_union(entries["corpus"])) | set(_union(entries["conformance"])))
    changed: List[str] = []
    for s in SETS:
        if s not in sets and not entries[s]:
            continue
        pt2_dir = os.path.join(SETS[s][0], "pt2")
        outputs = dict(files[s])
        outputs["MANIFEST.json"] = manifest_text(s, entries[s], all_targets).encode()
        if not opts.check:
            os.makedirs(pt2_dir, exist_ok=True)
            if s in sets and not only:  # a full set: drop archives of modules gone or refused
                for old in os.listdir(pt2_dir):
                    if old.endswith(".pt2") and old not in outputs:
                        os.remove(os.path.join(pt2_dir, old))
        for fname, data in outputs.items():
            path = os.path.join(pt2_dir, fname)
            old = open(path, "rb").read() if os.path.exists(path) else None
            if old != data:
                changed.append(os.path.relpath(path, REPO))
                if not opts.check:
                    with open(path, "wb") as f:
                        f.write(data)
        # A refused module leaves no archive behind.
        for name, e in entries[s].items():
            stale = os.path.join(pt2_dir, name + ".pt2")
            if not e["exported"] and os.path.exists(stale):
                changed.append(os.path.relpath(stale, REPO))
                if not opts.check:
                    os.remove(stale)

    print("targets (union over both sets, %d): %s" % (len(all_targets), ", ".join(all_targets)))
    for s in sets:
        es = entries[s]
        print("%s: %d exported, %d refused, %.1f KB" % (
            s, sum(e["exported"] for e in es.values()), sum(not e["exported"] for e in es.values()),
            sum(e.get("bytes", 0) for e in es.values()) / 1024.0))
    if opts.check:
        if changed:
            print("would change: %s" % ", ".join(changed))
            return 1
        print("up to date")
    return 0


if __name__ == "__main__":
    run_with_pinned_hash_seed(main, __file__)
