#!/usr/bin/env python3
"""Self-test of tools/check_pt2_artifact.py on the exported corpus (torch 2.x).

An archive against itself is equivalent (exit 0); artifacts written here from it with one weight
changed, one buffer changed, a BatchNorm momentum changed (the same outputs, other running
statistics), a BatchNorm in eval form, a weight read through detach (the same outputs, no
gradient), a weight read so that only training tells (the same outputs and gradients at the
start), one op changed, or the linears' weights stacked or concatenated under new names
(equivalent only with --renamed-ok, and not when a stacked member differs), a file that is no
archive (exit 2), and a module whose dropout draws (equivalent with the generator seeded, and
with --dropout off) are judged as they must be.

  /tmp/venv211/bin/python tools/check_pt2_artifact_self_test.py [--all]

--all also checks every archive of testdata/models/pt2 and testdata/optimus_conformance/pt2
against itself (13 minutes more on one core).
"""

import glob
import os
import subprocess
import sys
import tempfile
import warnings
from typing import List, Tuple

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
warnings.filterwarnings("ignore", message="The given buffer is not writable")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CHECKER = os.path.join(REPO, "tools", "check_pt2_artifact.py")
CORPUS = os.path.join(REPO, "testdata", "models", "pt2")
CONFORMANCE = os.path.join(REPO, "testdata", "optimus_conformance", "pt2")


def run_checker(original: str, artifact: str, *flags: str) -> Tuple[int, str]:
    proc = subprocess.run([sys.executable, CHECKER, original, artifact, "--steps", "5"]
                          + list(flags), capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    return proc.returncode, lines[-1] if lines else proc.stderr.strip()[-300:]


def changed_weight(src: str, dst: str, name: str) -> None:
    ep = torch.export.load(src)
    with torch.no_grad():
        ep.state_dict[name].view(-1)[0] += 0.01
    torch.export.save(ep, dst)


def changed_op(src: str, dst: str, old, new) -> None:
    ep = torch.export.load(src)
    for node in ep.graph.nodes:
        if node.op == "call_function" and node.target == old:
            node.target = new
            break
    ep.graph_module.recompile()
    torch.export.save(ep, dst)


class StackedLinears(nn.Module):
    """batch_linear_loop with its five Linear(8, 6) held as one [5, 6, 8] weight and one [5, 6]
    bias (stack=True), or as one [30, 8] weight and one [30] bias (stack=False)."""

    def __init__(self, weights: List[torch.Tensor], biases: List[torch.Tensor], stack: bool):
        super().__init__()
        self.n, self.h = len(weights), weights[0].shape[0]
        self.stack = stack
        join = torch.stack if stack else torch.cat
        self.weight = nn.Parameter(join([w.detach() for w in weights]))
        self.bias = nn.Parameter(join([b.detach() for b in biases]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        pieces = x.view(b, self.n, -1).transpose(0, 1)  # [n, B, d]
        if self.stack:
            w, bias = self.weight, self.bias
        else:
            w = self.weight.view(self.n, self.h, -1)
            bias = self.bias.view(self.n, self.h)
        out = torch.baddbmm(bias.unsqueeze(1), pieces, w.transpose(1, 2))  # [n, B, h]
        return torch.sin(out.transpose(0, 1).reshape(b, -1))


def stacked(src: str, dst: str, stack: bool, tamper: bool = False) -> None:
    ep = torch.export.load(src)
    state = ep.state_dict
    weights = [state["lins.%d.weight" % i] for i in range(5)]
    biases = [state["lins.%d.bias" % i] for i in range(5)]
    module = StackedLinears(weights, biases, stack)
    if tamper:
        with torch.no_grad():
            module.weight[3].view(-1)[0] += 0.01
    args, kwargs = ep.example_inputs
    torch.export.save(torch.export.export(module.train(), args, kwargs, strict=False), dst)


def changed_batch_norm(src: str, dst: str, index: int, value) -> None:
    """The first batch_norm's argument `index` (5: training, 6: momentum) set to `value`."""
    ep = torch.export.load(src)
    for node in ep.graph.nodes:
        if node.op == "call_function" and node.target == torch.ops.aten.batch_norm.default:
            args = list(node.args)
            args[index] = value
            node.args = tuple(args)
            break
    ep.graph_module.recompile()
    torch.export.save(ep, dst)


def detached_weight(src: str, dst: str) -> None:
    """The first linear reads its weight through aten.detach: the same outputs, no gradient."""
    ep = torch.export.load(src)
    for node in ep.graph.nodes:
        if node.op == "call_function" and node.target == torch.ops.aten.linear.default:
            with ep.graph.inserting_before(node):
                detached = ep.graph.call_function(torch.ops.aten.detach.default, (node.args[1],))
            detached.meta["val"] = node.args[1].meta["val"]
            node.args = (node.args[0], detached) + tuple(node.args[2:])
            break
    ep.graph_module.recompile()
    torch.export.save(ep, dst)


class SecondOrderLinears(nn.Module):
    """batch_linear_loop whose first weight is read as w + 100 (w - w0)^2 (w0 a constant copy of
    the initial weight): the same outputs and gradients as long as w = w0, other ones after a
    training step."""

    def __init__(self, state):
        super().__init__()
        self.lins = nn.ModuleList([nn.Linear(8, 6) for _ in range(5)])
        self.load_state_dict(state)
        self.w0 = self.lins[0].weight.detach().clone()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = torch.split(x, 8, 1)
        outs = []
        for i, lin in enumerate(self.lins):
            w = lin.weight
            if i == 0:
                w = w + 100.0 * (w - self.w0) ** 2
            outs.append(torch.nn.functional.linear(parts[i], w, lin.bias))
        return torch.sin(torch.cat(outs, 1))


def second_order(src: str, dst: str) -> None:
    ep = torch.export.load(src)
    args, kwargs = ep.example_inputs
    module = SecondOrderLinears({k: v.detach() for k, v in ep.state_dict.items()})
    torch.export.save(torch.export.export(module.train(), args, kwargs, strict=False), dst)


class Dropouts(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(torch.relu(self.lin(x))).sum(1)


def main(argv: List[str]) -> int:
    failures = 0
    cases = 0

    def expect(what: str, rc_want: int, got: Tuple[int, str], contains: str = "") -> None:
        nonlocal failures, cases
        cases += 1
        rc, line = got
        ok = rc == rc_want and contains in line
        failures += not ok
        print("%s %-55s rc %d: %s" % ("ok  " if ok else "FAIL", what, rc, line[:160]))

    linear = os.path.join(CONFORMANCE, "batch_linear_loop.pt2")
    bn = os.path.join(CORPUS, "batchnorm.pt2")
    with tempfile.TemporaryDirectory() as tmp:
        t = lambda name: os.path.join(tmp, name)  # noqa: E731
        for path in (linear, bn, os.path.join(CORPUS, "dlrm_sparse.pt2"),
                     os.path.join(CORPUS, "transformer.pt2"),
                     os.path.join(CONFORMANCE, "batch_dropout_modules.pt2")):
            expect("%s against itself" % os.path.basename(path), 0, run_checker(path, path),
                   "equivalent")

        changed_weight(linear, t("weight.pt2"), "lins.2.weight")
        expect("one weight changed", 1, run_checker(linear, t("weight.pt2")), "NOT equivalent")
        changed_weight(bn, t("buffer.pt2"), "mlp.1.running_mean")
        expect("one BatchNorm buffer changed (same outputs in training)", 1,
               run_checker(bn, t("buffer.pt2")), "running_mean")
        changed_batch_norm(bn, t("momentum.pt2"), 6, 0.5)
        expect("BatchNorm momentum changed (same outputs, other buffers)", 1,
               run_checker(bn, t("momentum.pt2")), "after the forward")
        changed_batch_norm(bn, t("eval.pt2"), 5, False)
        expect("one BatchNorm in eval form", 1, run_checker(bn, t("eval.pt2")),
               "batch_norm in eval form")
        detached_weight(linear, t("detached.pt2"))
        expect("a weight read through detach (same outputs)", 1,
               run_checker(linear, t("detached.pt2")), "none in the artifact")
        second_order(linear, t("second_order.pt2"))
        expect("same outputs and gradients, other training", 1,
               run_checker(linear, t("second_order.pt2")), "sgd training: step 1")
        changed_op(linear, t("op.pt2"), torch.ops.aten.sin.default, torch.ops.aten.cos.default)
        expect("sin changed to cos", 1, run_checker(linear, t("op.pt2")), "NOT equivalent")

        stacked(linear, t("stacked.pt2"), stack=True)
        expect("stacked weights, names kept required", 1,
               run_checker(linear, t("stacked.pt2")), "missing in the artifact")
        expect("stacked weights --renamed-ok", 0,
               run_checker(linear, t("stacked.pt2"), "--renamed-ok"), "10 tensors found renamed")
        stacked(linear, t("concatenated.pt2"), stack=False)
        expect("concatenated weights --renamed-ok", 0,
               run_checker(linear, t("concatenated.pt2"), "--renamed-ok"), "equivalent")
        stacked(linear, t("stacked_bad.pt2"), stack=True, tamper=True)
        expect("stacked weights, one member changed, --renamed-ok", 1,
               run_checker(linear, t("stacked_bad.pt2"), "--renamed-ok"), "not found by value")

        with open(t("junk.pt2"), "wb") as f:
            f.write(b"not an archive")
        expect("unreadable artifact", 2, run_checker(linear, t("junk.pt2")), "bad input")
        expect("missing original", 2, run_checker(t("none.pt2"), linear), "bad input")

        torch.manual_seed(0)
        x = torch.randn(16, 8)
        ep = torch.export.export(Dropouts().train(), (x,), strict=False)
        torch.export.save(ep, t("dropout.pt2"))
        expect("dropout p=0.3, generator seeded", 0,
               run_checker(t("dropout.pt2"), t("dropout.pt2")), "equivalent")
        expect("dropout p=0.3, --dropout off", 0,
               run_checker(t("dropout.pt2"), t("dropout.pt2"), "--dropout", "off"), "equivalent")

    if "--all" in argv:
        for path in sorted(glob.glob(os.path.join(CORPUS, "*.pt2"))
                           + glob.glob(os.path.join(CONFORMANCE, "*.pt2"))):
            expect("%s against itself" % os.path.relpath(path, REPO), 0,
                   run_checker(path, path), "equivalent")
    print("%d of %d cases as expected" % (cases - failures, cases))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
