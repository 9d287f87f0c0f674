#!/usr/bin/env python3
"""Checks that an exported program (.pt2) is equivalent to an original one, for training.

  check_pt2_artifact.py ORIGINAL.pt2 ARTIFACT.pt2 [--steps 20] [--json] [--renamed-ok]
                        [--rtol 1e-4] [--atol 1e-5] [--dropout seed|off] [--seed 0]

Both archives are loaded with torch.export.load; each run uses a fresh copy of
ExportedProgram.module() and the ORIGINAL's sample inputs (ExportedProgram.example_inputs, as
torch.export.save stores them). The graph of an exported program is specialized to the mode it
was exported in (its module() refuses .train()): the checker runs both as exported and reports
the mode-dependent nodes it finds (batch_norm's `training`, dropout's `train`); the corpus
archives (testdata/models/pt2, testdata/optimus_conformance/pt2) are exported in training mode.

  (a) forward: the outputs have the same structure, shapes and dtypes, and are equal within the
      tolerance (float32: rtol 1e-4, atol 1e-5, the defaults; float64: rtol 1e-7, atol 1e-9;
      float16/bfloat16: rtol 1e-2, atol 1e-3; integer and bool tensors exactly); the buffers
      after that forward (BatchNorm's running statistics) too.
  (b) backward of a deterministic scalar loss, sum over the floating outputs of
      (output * W).sum() with W drawn from a generator seeded with --seed (in float64): the
      gradient of every parameter and of every floating input is equal within the tolerance,
      with the same layout (a sparse embedding gradient stays sparse). Parameters and buffers are
      matched by name: the artifact must keep the original's names; missing and extra names are
      reported and fail the check (the buffers are those of the graph signature; lifted tensor
      constants may come and go). With --renamed-ok (a stacked parameter layout) an original
      tensor missing from the artifact is found by value among the artifact's extra tensors:
      the same tensor under another name, a slice along a new dimension (stacked) or a block
      along an existing one (concatenated); its gradient is then that slice or block of the
      artifact's gradient. Every original tensor must be found, and every extra tensor covered.
  (c) training: --steps steps of SGD (lr 0.01) and --steps of Adam (lr 1e-3; SparseAdam for the
      parameters whose gradient is sparse) from identical fresh copies, on the sample inputs,
      minimizing the loss of (b); the losses must agree at every step within a tolerance that
      grows with the step: (k + 1) * (atol + rtol * sum|output * W|) at step k.
  (d) the call_function nodes of both graphs (all, and those other than getitem) are counted
      and reported.

An artifact whose graph is in another mode than the original's (batch_norm nodes in eval form
where the original trains, no dropout that draws where the original has one) fails too.

Dropout: with --dropout seed (the default) the global generator is seeded with --seed before
every forward of either module, so that a dropout draws the same mask in both as long as both
draw in the same order; --dropout off sets p = 0 in every dropout node of both graphs first.
The corpus archives hold no dropout that draws (p = 0, or eval mode).

Prints the details and a one-line verdict last ("equivalent: ..." or "NOT equivalent: ...");
--json prints one JSON object instead. Exit status: 0 equivalent, 1 not equivalent, 2 bad input
(an archive that cannot be read, an original without sample inputs or that does not run on
them). Needs torch 2.x (torch.export), e.g. /tmp/venv211/bin/python.
"""

import argparse
import copy
import json
import math
import operator
import sys
from typing import Any, Dict, List, Optional, Tuple

import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
warnings.filterwarnings("ignore", message="The given buffer is not writable")
warnings.filterwarnings("ignore", category=FutureWarning)

import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402

Tensor = torch.Tensor

DROPOUT_OPS = ("aten.dropout.default", "aten.native_dropout.default",
               "aten.feature_dropout.default", "aten.alpha_dropout.default",
               "aten.feature_alpha_dropout.default")


class BadInput(Exception):
    """The input cannot be judged (exit status 2)."""


# --------------------------------------------------------------------------------------------
# Tolerances.


def tolerance(dtype: torch.dtype, rtol: float, atol: float) -> Tuple[float, float]:
    """(rtol, atol) for a dtype: the float32 values given, scaled for the other float types."""
    if dtype == torch.float64:
        return rtol * 1e-3, atol * 1e-4
    if dtype in (torch.float16, torch.bfloat16):
        return max(rtol, 1e-2), max(atol, 1e-3)
    return rtol, atol


def _dense(t: Tensor) -> Tensor:
    return t.to_dense() if t.layout != torch.strided else t


def compare_tensors(a: Tensor, b: Tensor, rtol: float, atol: float) -> Optional[str]:
    """None when equal within the dtype's tolerance, else why not."""
    if a.shape != b.shape:
        return "shape %s vs %s" % (list(a.shape), list(b.shape))
    if a.dtype != b.dtype:
        return "dtype %s vs %s" % (a.dtype, b.dtype)
    if a.layout != b.layout:
        return "layout %s vs %s" % (a.layout, b.layout)
    a, b = _dense(a).detach(), _dense(b).detach()
    if not (a.dtype.is_floating_point or a.dtype.is_complex):
        if torch.equal(a, b):
            return None
        return "%d of %d elements differ" % (int((a != b).sum()), a.numel())
    r, t = tolerance(a.dtype, rtol, atol)
    if torch.allclose(a, b, rtol=r, atol=t, equal_nan=True):
        return None
    diff = (a.double() - b.double()).abs().nan_to_num(nan=math.inf)
    return "max abs diff %.3g (rtol %g, atol %g)" % (float(diff.max()), r, t)


def compare_trees(a: Any, b: Any, rtol: float, atol: float, what: str) -> List[str]:
    la, sa = pytree.tree_flatten(a)
    lb, sb = pytree.tree_flatten(b)
    if sa != sb:
        return ["%s: structure differs (%s vs %s)" % (what, sa, sb)]
    problems = []
    for i, (x, y) in enumerate(zip(la, lb)):
        if isinstance(x, Tensor) and isinstance(y, Tensor):
            why = compare_tensors(x, y, rtol, atol)
        elif isinstance(x, Tensor) or isinstance(y, Tensor):
            why = "a tensor vs %s" % type(y if isinstance(x, Tensor) else x).__name__
        else:
            why = None if x == y else "%r vs %r" % (x, y)
        if why:
            problems.append("%s %d: %s" % (what, i, why))
    return problems


# --------------------------------------------------------------------------------------------
# Loading and graphs.


def load(path: str) -> torch.export.ExportedProgram:
    try:
        return torch.export.load(path)
    except Exception as e:
        raise BadInput("%s: cannot be read by torch.export.load: %s" % (
            path, (str(e).strip().splitlines() or [type(e).__name__])[0]))


def graph_counts(ep: torch.export.ExportedProgram) -> Dict[str, int]:
    calls = [n for n in ep.graph.nodes if n.op == "call_function"]
    return {"call_function": len(calls),
            "aten_ops": sum(1 for n in calls if n.target is not operator.getitem)}


def _arg(node, index: int, name: str, default: Any) -> Any:
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def mode_nodes(ep: torch.export.ExportedProgram) -> Dict[str, Any]:
    """The mode-dependent nodes: batch_norm in training or eval form, dropouts that draw."""
    bn_train = bn_eval = drop_active = drop_inactive = 0
    for n in ep.graph.nodes:
        if n.op != "call_function":
            continue
        t = str(n.target)
        if t in ("aten.batch_norm.default", "aten._native_batch_norm_legit_functional.default",
                 "aten.native_batch_norm.default"):
            if _arg(n, 5, "training", None):  # argument 5 in all three
                bn_train += 1
            else:
                bn_eval += 1
        elif t == "aten._native_batch_norm_legit_no_training.default":
            bn_eval += 1
        elif t in DROPOUT_OPS:
            p, train = _arg(n, 1, "p", 0.5), _arg(n, 2, "train", True)
            if train and p:
                drop_active += 1
            else:
                drop_inactive += 1
    return {"batch_norm_training": bn_train, "batch_norm_eval": bn_eval,
            "dropout_drawing": drop_active, "dropout_not_drawing": drop_inactive}


def disable_dropout(module: torch.fx.GraphModule) -> int:
    """Sets p = 0 in every dropout node of an unlifted exported module; returns their count."""
    count = 0
    for n in module.graph.nodes:
        if n.op == "call_function" and str(n.target) in DROPOUT_OPS:
            args = list(n.args)
            if len(args) > 1:
                args[1] = 0.0
                n.args = tuple(args)
            else:
                n.kwargs = dict(n.kwargs, p=0.0)
            count += 1
    module.recompile()
    return count


def state_buffers(ep: torch.export.ExportedProgram, module: torch.nn.Module
                  ) -> Dict[str, Tensor]:
    """The module's buffers that are the program's buffers (its graph signature's), not the
    lifted tensor constants that the loaded module also holds as buffers: a rewrite may add or
    drop constants (index tensors, say)."""
    names = set(ep.graph_signature.buffers)
    return {k: v for k, v in module.named_buffers() if k in names}


class Runner:
    """Fresh copies of an exported program's module, run on copies of the sample inputs."""

    def __init__(self, ep: torch.export.ExportedProgram, dropout_off: bool):
        self.template = ep.module()
        if dropout_off:
            disable_dropout(self.template)

    def fresh(self) -> torch.nn.Module:
        return copy.deepcopy(self.template)


# --------------------------------------------------------------------------------------------
# Loss.


def _float_leaves(out: Any) -> List[Tensor]:
    return [t for t in pytree.tree_leaves(out)
            if isinstance(t, Tensor) and t.dtype.is_floating_point and t.requires_grad]


def loss_weights(out: Any, seed: int) -> List[Tensor]:
    """Fixed random weights (float64) for the floating outputs, drawn from their shapes only."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(t.shape, generator=gen, dtype=torch.float64)
            for t in pytree.tree_leaves(out) if isinstance(t, Tensor) and t.dtype.is_floating_point]


def scalar_loss(out: Any, weights: List[Tensor]) -> Tuple[Optional[Tensor], float]:
    """(sum of (output * W).sum() over the floating outputs that need a gradient, and the scale
    sum |output * W| that the tolerance of a loss is relative to)."""
    floats = [t for t in pytree.tree_leaves(out)
              if isinstance(t, Tensor) and t.dtype.is_floating_point]
    loss, scale = None, 0.0
    for t, w in zip(floats, weights):
        term = t.double() * w
        scale += float(term.detach().abs().sum())
        if t.requires_grad:
            loss = term.sum() if loss is None else loss + term.sum()
    return loss, scale


# --------------------------------------------------------------------------------------------
# Names: the artifact keeps the original's, or (--renamed-ok) holds them in stacked tensors.


class Place:
    """Where an original tensor lives in the artifact: the whole of `name`, or
    select(dim, index) of it ("select"), or narrow(dim, start, length) of it ("narrow")."""

    def __init__(self, name: str, kind: str = "same", dim: int = 0, start: int = 0,
                 length: int = 0):
        self.name, self.kind, self.dim, self.start, self.length = name, kind, dim, start, length

    def take(self, t: Tensor) -> Tensor:
        if self.kind == "select":
            return t.select(self.dim, self.start)
        if self.kind == "narrow":
            return t.narrow(self.dim, self.start, self.length)
        return t

    def describe(self) -> str:
        if self.kind == "select":
            return "%s[%s%d]" % (self.name, ":, " * self.dim, self.start)
        if self.kind == "narrow":
            return "%s[%s%d:%d]" % (self.name, ":, " * self.dim, self.start,
                                    self.start + self.length)
        return self.name


def _same_bits(a: Tensor, b: Tensor) -> bool:
    a, b = _dense(a).detach(), _dense(b).detach()
    return a.dtype == b.dtype and a.shape == b.shape and bool(
        torch.equal(a, b) or (a.dtype.is_floating_point
                              and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
                              and torch.equal(a.isnan(), b.isnan())))


def _candidates(big: Tensor, small: Tensor) -> List[Place]:
    """The places in `big` whose values are exactly `small`'s (name filled in by the caller)."""
    big, small = _dense(big).detach(), _dense(small).detach()
    if big.dtype != small.dtype:
        return []
    found: List[Place] = []
    if big.shape == small.shape and _same_bits(big, small):
        found.append(Place("", "same"))
    if big.dim() == small.dim() + 1:
        for d in range(big.dim()):
            if big.shape[:d] + big.shape[d + 1:] == small.shape:
                for i in range(big.shape[d]):
                    if _same_bits(big.select(d, i), small):
                        found.append(Place("", "select", d, i))
    if big.dim() == small.dim() and big.dim() > 0:
        for d in range(big.dim()):
            others = [k for k in range(big.dim()) if k != d]
            if any(big.shape[k] != small.shape[k] for k in others):
                continue
            n, m = big.shape[d], small.shape[d]
            if n <= m or m == 0:
                continue
            first = small.select(d, 0).unsqueeze(0)
            rows = big.movedim(d, 0).reshape(n, -1)
            hits = (rows == first.reshape(1, -1)).all(1).nonzero().flatten().tolist()
            for s in hits:
                if s + m <= n and _same_bits(big.narrow(d, s, m), small):
                    found.append(Place("", "narrow", d, s, m))
    return found


def match_names(orig: Dict[str, Tensor], art: Dict[str, Tensor], renamed_ok: bool,
                what: str) -> Tuple[Dict[str, Place], List[str], List[str], List[str]]:
    """(original name -> place in the artifact, missing names, extra names, problems)."""
    places = {k: Place(k) for k in orig if k in art}
    missing = [k for k in orig if k not in art]
    extra = [k for k in art if k not in orig]
    problems = []
    for k in places:  # kept names: the same tensors before anything runs
        if orig[k].shape != art[k].shape or orig[k].dtype != art[k].dtype:
            problems.append("%s %s: %s %s vs %s %s" % (
                what, k, orig[k].dtype, list(orig[k].shape), art[k].dtype, list(art[k].shape)))
        elif not _same_bits(orig[k], art[k]):
            problems.append("%s %s: its initial value differs (%s)" % (
                what, k, compare_tensors(orig[k], art[k], 0.0, 0.0) or "NaNs differ"))
    if not renamed_ok:
        problems += ["%s missing in the artifact: %s" % (what, k) for k in missing]
        problems += ["%s not in the original: %s" % (what, k) for k in extra]
        return places, missing, extra, problems
    # Value search: every missing original tensor in some extra artifact tensor, blocks not
    # overlapping, in the original's order (identical values, e.g. LayerNorm's ones, are taken
    # in member order).
    covered: Dict[str, torch.Tensor] = {k: torch.zeros(art[k].shape, dtype=torch.bool)
                                        for k in extra}
    for k in missing:
        chosen = None
        for e in extra:
            for place in _candidates(art[e], orig[k]):
                place.name = e
                mask = place.take(covered[e])
                if not bool(mask.any()):
                    chosen = place
                    break
            if chosen:
                break
        if chosen is None:
            problems.append("%s missing in the artifact and not found by value: %s" % (what, k))
            continue
        chosen.take(covered[chosen.name]).fill_(True)
        places[k] = chosen
    for e in extra:
        if not bool(covered[e].all()):
            problems.append("%s %s of the artifact: %d of %d elements hold no original tensor" % (
                what, e, int((~covered[e]).sum()), covered[e].numel()))
    return places, missing, extra, problems


# --------------------------------------------------------------------------------------------
# The checks.


def _inputs(args: Any, kwargs: Any, grad: bool) -> Tuple[Any, Any, List[Tensor]]:
    """Copies of the sample inputs; with grad, the floating ones require a gradient."""
    args, kwargs = copy.deepcopy(args), copy.deepcopy(kwargs)
    leaves = []
    if grad:
        for t in pytree.tree_leaves((args, kwargs)):
            if isinstance(t, Tensor) and t.dtype.is_floating_point and t.layout == torch.strided:
                t.requires_grad_(True)
                leaves.append(t)
    return args, kwargs, leaves


def _forward(module, args, kwargs, seed: int):
    torch.manual_seed(seed)
    return module(*args, **kwargs)


def gradient_problems(params_o: Dict[str, Tensor], params_a: Dict[str, Tensor],
                      p_places: Dict[str, Place], in_o: List[Tensor], in_a: List[Tensor],
                      rtol: float, atol: float, sparse_names: List[str]) -> List[str]:
    """The parameter and input gradients after both backwards that differ; appends the names
    of the parameters whose gradient is sparse to sparse_names."""
    grads: List[str] = []
    for k, place in p_places.items():
        g_o, whole = params_o[k].grad, params_a[place.name].grad
        if g_o is None and whole is None:
            continue
        if g_o is None or whole is None:
            grads.append("parameter %s: gradient %s in the original, %s in the artifact" % (
                k, "none" if g_o is None else "set", "none" if whole is None else "set"))
            continue
        if g_o.layout != whole.layout:
            grads.append("parameter %s: gradient layout %s vs %s" % (k, g_o.layout, whole.layout))
            continue
        if g_o.layout != torch.strided:
            sparse_names.append(k)
        why = compare_tensors(_dense(g_o), place.take(_dense(whole)), rtol, atol)
        if why:
            grads.append("parameter %s gradient: %s" % (k, why))
    for i, (x, y) in enumerate(zip(in_o, in_a)):
        if (x.grad is None) != (y.grad is None):
            grads.append("input %d: gradient in one only" % i)
        elif x.grad is not None:
            why = compare_tensors(x.grad, y.grad, rtol, atol)
            if why:
                grads.append("input %d gradient: %s" % (i, why))
    return grads


def mode_problems(mode_o: Dict[str, int], mode_a: Dict[str, int]) -> List[str]:
    """A graph exported in another mode than the original: batch_norm nodes that no longer
    train, or no dropout that draws where the original has one."""
    problems = []
    if mode_o["batch_norm_training"] and mode_a["batch_norm_eval"] > mode_o["batch_norm_eval"]:
        problems.append("the artifact has %d batch_norm in eval form, the original %d (and %d "
                        "training)" % (mode_a["batch_norm_eval"], mode_o["batch_norm_eval"],
                                       mode_o["batch_norm_training"]))
    if mode_o["dropout_drawing"] and not mode_a["dropout_drawing"]:
        problems.append("the artifact has no dropout that draws, the original %d"
                        % mode_o["dropout_drawing"])
    return problems


def check(orig_path: str, art_path: str, steps: int, rtol: float, atol: float,
          renamed_ok: bool, dropout: str, seed: int) -> Dict[str, Any]:
    ep_o, ep_a = load(orig_path), load(art_path)
    if ep_o.example_inputs is None:
        raise BadInput("%s holds no sample inputs (ExportedProgram.example_inputs)" % orig_path)
    args, kwargs = ep_o.example_inputs
    report: Dict[str, Any] = {
        "original": orig_path, "artifact": art_path,
        "rtol": rtol, "atol": atol, "dropout": dropout, "seed": seed,
        "mode": {"original": mode_nodes(ep_o), "artifact": mode_nodes(ep_a)},
        "counts": {"original": graph_counts(ep_o), "artifact": graph_counts(ep_a)},
    }
    problems: List[str] = []
    if dropout == "seed":
        problems += mode_problems(report["mode"]["original"], report["mode"]["artifact"])
    else:
        problems += mode_problems(dict(report["mode"]["original"], dropout_drawing=0),
                                  report["mode"]["artifact"])
    run_o, run_a = Runner(ep_o, dropout == "off"), Runner(ep_a, dropout == "off")

    # (a) forward, (b) gradients.
    m_o, m_a = run_o.fresh(), run_a.fresh()
    params_o, params_a = dict(m_o.named_parameters()), dict(m_a.named_parameters())
    bufs_o, bufs_a = state_buffers(ep_o, m_o), state_buffers(ep_a, m_a)
    p_places, p_missing, p_extra, p_probs = match_names(params_o, params_a, renamed_ok,
                                                        "parameter")
    b_places, b_missing, b_extra, b_probs = match_names(bufs_o, bufs_a, renamed_ok, "buffer")
    problems += p_probs + b_probs
    report["names"] = {
        "parameters": len(params_o), "buffers": len(bufs_o),
        "missing_parameters": p_missing, "extra_parameters": p_extra,
        "missing_buffers": b_missing, "extra_buffers": b_extra,
        "renamed": {k: p.describe() for k, p in sorted({**p_places, **b_places}.items())
                    if p.kind != "same" or p.name != k},
    }
    input_grads = True
    a_o, k_o, in_o = _inputs(args, kwargs, True)
    try:
        out_o = _forward(m_o, a_o, k_o, seed)
    except Exception:
        # E.g. a module that writes in place to an input: run it on inputs without gradients.
        input_grads = False
        m_o = run_o.fresh()
        params_o, bufs_o = dict(m_o.named_parameters()), state_buffers(ep_o, m_o)
        a_o, k_o, in_o = _inputs(args, kwargs, False)
        try:
            out_o = _forward(m_o, a_o, k_o, seed)
        except Exception as e:
            raise BadInput("the original does not run on its sample inputs: %s"
                           % (str(e).strip().splitlines() or [type(e).__name__])[0])
    a_a, k_a, in_a = _inputs(args, kwargs, input_grads)
    try:
        out_a = _forward(m_a, a_a, k_a, seed)
    except Exception as e:
        problems.append("the artifact does not run on the sample inputs: %s"
                        % (str(e).strip().splitlines() or [type(e).__name__])[0])
        report["problems"] = problems
        return report
    fwd = compare_trees(out_o, out_a, rtol, atol, "output")
    for k, place in b_places.items():
        why = compare_tensors(bufs_o[k], place.take(bufs_a[place.name]), rtol, atol)
        if why:
            fwd.append("buffer %s after the forward: %s" % (k, why))
    problems += fwd
    report["forward"] = {"outputs": len(pytree.tree_leaves(out_o)), "ok": not fwd}

    weights = loss_weights(out_o, seed)
    loss_o, _ = scalar_loss(out_o, weights)
    grads: List[str] = []
    sparse_names: List[str] = []
    if loss_o is not None and not fwd:
        loss_a, _ = scalar_loss(out_a, weights)
        loss_o.backward()
        if loss_a is None:
            grads.append("no artifact output needs a gradient")
        else:
            loss_a.backward()
            grads = gradient_problems(params_o, params_a, p_places, in_o, in_a, rtol, atol,
                                      sparse_names)
    problems += grads
    report["gradients"] = {
        "parameters": sum(1 for p in params_o.values() if p.grad is not None),
        "inputs": sum(1 for x in in_o if x.grad is not None),
        "sparse": sparse_names, "ok": not grads,
        "skipped": ("no output needs a gradient" if loss_o is None else
                    "the forward differs" if fwd else None),
    }

    # (c) training.
    report["training"] = {}
    trainable = any(p.grad is not None for p in params_o.values())
    if steps > 0 and trainable and not problems:
        for opt_name in ("sgd", "adam"):
            losses_o, losses_a, why = train(run_o, run_a, opt_name, steps, args, kwargs,
                                            weights, p_places, sparse_names, rtol, atol, seed)
            report["training"][opt_name] = {"losses_original": losses_o,
                                            "losses_artifact": losses_a, "ok": why is None}
            if why:
                problems.append("%s training: %s" % (opt_name, why))
    elif steps > 0:
        report["training"]["skipped"] = (
            "earlier checks failed" if problems else
            "no parameters" if not params_o else "no parameter receives a gradient")
    report["problems"] = problems
    return report


def _optimizers(params: Dict[str, Tensor], names: List[str], sparse: List[str], kind: str):
    if kind == "sgd":
        return [torch.optim.SGD([params[n] for n in names], lr=0.01)]
    dense = [params[n] for n in names if n not in sparse]
    opts = [torch.optim.Adam(dense, lr=1e-3)] if dense else []
    if sparse:
        opts.append(torch.optim.SparseAdam([params[n] for n in sparse], lr=1e-3))
    return opts


def train(run_o: Runner, run_a: Runner, kind: str, steps: int, args, kwargs,
          weights: List[Tensor], p_places: Dict[str, Place], sparse: List[str],
          rtol: float, atol: float, seed: int) -> Tuple[List[float], List[float], Optional[str]]:
    """Losses per step of both from fresh copies, and the first step where they part."""
    m_o, m_a = run_o.fresh(), run_a.fresh()
    params_o, params_a = dict(m_o.named_parameters()), dict(m_a.named_parameters())
    # The artifact's tensors that hold sparse-gradient originals train with SparseAdam too.
    sparse_a = sorted({p_places[k].name for k in sparse})
    opts_o = _optimizers(params_o, list(params_o), sparse, kind)
    opts_a = _optimizers(params_a, list(params_a), sparse_a, kind)
    losses_o: List[float] = []
    losses_a: List[float] = []
    first_bad = None
    for step in range(steps):
        values = []
        for m, opts in ((m_o, opts_o), (m_a, opts_a)):
            for opt in opts:
                opt.zero_grad(set_to_none=True)
            a, k, _ = _inputs(args, kwargs, False)
            loss, scale = scalar_loss(_forward(m, a, k, seed), weights)
            loss.backward()
            for opt in opts:
                opt.step()
            values.append((loss.item(), scale))
        (lo, scale), (la, _) = values
        losses_o.append(lo)
        losses_a.append(la)
        bound = (step + 1) * (atol + rtol * scale)
        if first_bad is None and not (abs(lo - la) <= bound or (math.isnan(lo) and math.isnan(la))):
            first_bad = "step %d: loss %.9g vs %.9g (|diff| %.3g > %.3g)" % (
                step, lo, la, abs(lo - la), bound)
    return losses_o, losses_a, first_bad


# --------------------------------------------------------------------------------------------


def verdict(report: Dict[str, Any], steps: int) -> str:
    c = report["counts"]
    counts = "call_function %d -> %d (aten ops %d -> %d)" % (
        c["original"]["call_function"], c["artifact"]["call_function"],
        c["original"]["aten_ops"], c["artifact"]["aten_ops"])
    if report["problems"]:
        more = len(report["problems"]) - 1
        return "NOT equivalent: %s%s; %s" % (
            report["problems"][0], " (and %d more)" % more if more else "", counts)
    g = report["gradients"]
    trained = report["training"]
    if "sgd" in trained:
        train_text = "%d SGD + %d Adam steps" % (steps, steps)
    else:
        train_text = "training skipped (%s)" % trained.get("skipped", "--steps 0")
    renamed = len(report["names"]["renamed"])
    return ("equivalent: outputs, %d parameter and %d input gradients, %s within rtol %g atol %g"
            "%s; %s") % (
        g["parameters"], g["inputs"], train_text, report["rtol"], report["atol"],
        "; %d tensors found renamed" % renamed if renamed else "", counts)


def print_details(report: Dict[str, Any]) -> None:
    for side in ("original", "artifact"):
        m = report["mode"][side]
        print("%-8s %s: %d call_function nodes, %d aten ops; batch_norm training %d, eval %d; "
              "dropouts that draw %d" % (
                  side, report[side], report["counts"][side]["call_function"],
                  report["counts"][side]["aten_ops"], m["batch_norm_training"],
                  m["batch_norm_eval"], m["dropout_drawing"]))
    n = report["names"]
    print("names: %d parameters, %d buffers; missing %s, extra %s" % (
        n["parameters"], n["buffers"], n["missing_parameters"] + n["missing_buffers"] or "none",
        n["extra_parameters"] + n["extra_buffers"] or "none"))
    for k, v in n["renamed"].items():
        print("  %s -> %s" % (k, v))
    print("dropout: %s" % ("p set to 0 in both graphs" if report["dropout"] == "off" else
                           "generator seeded with %d before every forward" % report["seed"]))
    for name, t in report.get("training", {}).items():
        if isinstance(t, dict):
            print("%s: losses %s" % (name, " ".join("%.6g" % v for v in t["losses_original"][:5])
                                      + (" ..." if len(t["losses_original"]) > 5 else "")))
    for p in report["problems"]:
        print("problem: %s" % p)


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("original")
    parser.add_argument("artifact")
    parser.add_argument("--steps", type=int, default=20, help="training steps per optimizer")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--renamed-ok", action="store_true",
                        help="find renamed (stacked, concatenated) tensors by value")
    parser.add_argument("--rtol", type=float, default=1e-4, help="float32 rtol")
    parser.add_argument("--atol", type=float, default=1e-5, help="float32 atol")
    parser.add_argument("--dropout", choices=["seed", "off"], default="seed")
    parser.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args(argv)
    torch.set_num_threads(1)
    try:
        report = check(opts.original, opts.artifact, opts.steps, opts.rtol, opts.atol,
                       opts.renamed_ok, opts.dropout, opts.seed)
    except BadInput as e:
        if opts.json:
            print(json.dumps({"error": str(e), "verdict": "bad input"}))
        else:
            print("bad input: %s" % e)
        return 2
    line = verdict(report, opts.steps)
    report["verdict"] = line
    report["equivalent"] = not report["problems"]
    if opts.json:
        print(json.dumps(report, indent=1))
    else:
        print_details(report)
        print(line)
    return 0 if report["equivalent"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
