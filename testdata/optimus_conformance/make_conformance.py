#!/usr/bin/env python3
"""Builds Sentier's Optimus conformance set: small nn.Modules in the shapes of the graphs that
PyTorch Inductor's Optimus passes (torch/_inductor/fx_passes: group_batch_fusion.py,
split_cat.py) rewrite, each written the way users write them, as TorchScript archives.

Every Optimus pass appears in at least two user spellings (a ModuleList loop with a counter or
enumerate, a list comprehension, list slicing such as xs[:5], explicit pieces ...), plus the
negative cases where a rewrite would be wrong or impossible (outputs mutated in place, pieces used
elsewhere, mismatched shapes or dims). MANIFEST.json says, per module, which Optimus pass it
mirrors, the spelling, the rules of patterns/*.rules that fire on it and the aten ops per forward
before and after optimization.

For each module (the conventions of testdata/models/make_corpus.py):

  DIR/<name>/scripted.pt   torch.jit.script(module), saved with torch.jit.save
  DIR/<name>/traced.pt     torch.jit.trace(module, inputs, strict=False) (list outputs allowed)
  DIR/<name>/inputs.pt     torch.save(tuple of forward arguments), batch --batch

Usage:
  /usr/bin/python3 testdata/optimus_conformance/make_conformance.py --out DIR [--batch 8]
                   [--modules a,b] [--list]

DIR is testdata/optimus_conformance/torch1.13 with Debian's torch 1.13, torch2.11 with torch
2.11. Weights are drawn after torch.manual_seed(seed), inputs after torch.manual_seed(seed + 1);
PYTHONHASHSEED is pinned, so re-running writes the same files. Modules stay in training mode
except the dropout ones (eval: a dropout that draws random numbers has no reference output to
compare against); no module draws random numbers in forward. Runs unchanged under torch 1.13
and 2.x.
"""

import argparse
import os
import sys
from typing import Callable, Dict, List, NamedTuple, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

Tensor = torch.Tensor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
from make_corpus import _kb, run_with_pinned_hash_seed, write_archives  # noqa: E402


# --------------------------------------------------------------------------------------------
# Horizontal: batch_linear (N linears, 2-D inputs of one shape, weights of one shape).


class BatchLinearLoop(nn.Module):
    """Pieces of one split, one nn.Linear each, in a ModuleList loop with a counter; cat."""

    def __init__(self, n: int = 5, d: int = 8, h: int = 6, bias: bool = True):
        super().__init__()
        self.d = d
        self.lins = nn.ModuleList([nn.Linear(d, h, bias=bias) for _ in range(n)])

    def forward(self, x: Tensor) -> Tensor:
        parts = torch.split(x, self.d, 1)
        outs: List[Tensor] = []
        i = 0
        for lin in self.lins:
            outs.append(lin(parts[i]))
            i += 1
        return torch.sin(torch.cat(outs, 1))


class BatchLinearEnumerate(nn.Module):
    """The same, enumerate over the ModuleList and chunk instead of split."""

    def __init__(self, n: int = 5, d: int = 8, h: int = 6):
        super().__init__()
        self.n = n
        self.lins = nn.ModuleList([nn.Linear(d, h) for _ in range(n)])

    def forward(self, x: Tensor) -> Tensor:
        parts = x.chunk(self.n, dim=-1)
        outs: List[Tensor] = []
        for i, lin in enumerate(self.lins):
            outs.append(lin(parts[i]))
        return torch.sin(torch.cat(outs, dim=-1))


class BatchLinearListInput(nn.Module):
    """Linears over the first members of a list input (xs[:5]) in a comprehension over indices,
    the weights in a ParameterList read with F.linear (Optimus' MyModule5 keeps them so)."""

    def __init__(self, n: int = 5, d: int = 8, h: int = 6):
        super().__init__()
        self.n = n
        self.weights = nn.ParameterList([nn.Parameter(torch.randn(h, d) * 0.3) for _ in range(n)])
        self.biases = nn.ParameterList([nn.Parameter(torch.randn(h) * 0.1) for _ in range(n)])

    def forward(self, xs: List[Tensor]) -> Tensor:
        firsts = xs[:5]
        outs: List[Tensor] = []
        i = 0
        for w, b in zip(self.weights, self.biases):
            outs.append(F.linear(firsts[i], w, b))
            i += 1
        return torch.cat(outs, 1)


class NegBatchLinearShapes(nn.Module):
    """Linears whose inputs and weights differ in shape (split [6, 8, 10], Optimus' MyModule2):
    no batch of equal shapes; Optimus' group_linear fuses them with a grouped GEMM."""

    def __init__(self):
        super().__init__()
        self.sizes = [6, 8, 10]
        self.lins = nn.ModuleList([nn.Linear(s, 8) for s in [6, 8, 10, 6, 8, 10]])

    def forward(self, x: Tensor) -> Tensor:
        t = torch.split(x, self.sizes, dim=1)
        outs: List[Tensor] = []
        i = 0
        for lin in self.lins:
            outs.append(lin(torch.sin(t[i % 3]) if i >= 3 else t[i] + 0.1 * (i + 1)))
            i += 1
        return torch.sigmoid(torch.cat(outs, 1))


class GroupLinearLayers(nn.Module):
    """group_linear's other shape (Optimus' MyModule): three layers of ten Linear(z, z) on
    ten different inputs x + 0.1 * i, comprehensions over indices."""

    def __init__(self, z: int = 6, n: int = 10):
        super().__init__()
        self.n = n
        self.seq1 = nn.ModuleList([nn.Linear(z, z) for _ in range(n)])
        self.seq2 = nn.ModuleList([nn.Linear(z, z) for _ in range(n)])

    def forward(self, x: Tensor) -> Tensor:
        x1 = [x + 0.1 * i for i in range(self.n)]
        x2: List[Tensor] = []
        for i, lin in enumerate(self.seq1):
            x2.append(lin(x1[i]))
        x3 = [x2[i] - 0.1 * i for i in range(self.n)]
        x4: List[Tensor] = []
        for i, lin in enumerate(self.seq2):
            x4.append(lin(x3[i]))
        return torch.cat(x4, dim=1)


# --------------------------------------------------------------------------------------------
# batch_linear_lhs: N linears on the same input.


class BatchLinearLhsLoop(nn.Module):
    """Ten linears (out widths z - i % 5) on one input, loop with append (Optimus' MyModule4)."""

    def __init__(self, z: int = 10, n: int = 10, bias: bool = True):
        super().__init__()
        self.lins = nn.ModuleList([nn.Linear(z, z - i % 5, bias=bias) for i in range(n)])

    def forward(self, x: Tensor) -> Tensor:
        x = x + 1.2
        outs: List[Tensor] = []
        for lin in self.lins:
            outs.append(lin(x))
        return torch.sigmoid(torch.cat(outs, dim=1))


class BatchLinearLhsComprehension(nn.Module):
    """The same as a comprehension over the ModuleList."""

    def __init__(self, z: int = 10, n: int = 10):
        super().__init__()
        self.lins = nn.ModuleList([nn.Linear(z, z - i % 5) for i in range(n)])

    def forward(self, x: Tensor) -> Tensor:
        x = x + 1.2
        outs = [lin(x) for lin in self.lins]
        return torch.sigmoid(torch.cat(outs, dim=1))


# --------------------------------------------------------------------------------------------
# batch_layernorm.


class BatchLayerNormLoop(nn.Module):
    """Pieces of a split, one nn.LayerNorm(10) each, loop with a counter; cat."""

    def __init__(self, n: int = 5, d: int = 10):
        super().__init__()
        self.d = d
        self.norms = nn.ModuleList([nn.LayerNorm(d) for _ in range(n)])
        with torch.no_grad():
            for m in self.norms:
                m.weight.normal_(1.0, 0.2)
                m.bias.normal_(0.0, 0.2)

    def forward(self, x: Tensor) -> Tensor:
        parts = torch.split(x, self.d, 1)
        outs: List[Tensor] = []
        i = 0
        for norm in self.norms:
            outs.append(norm(parts[i]))
            i += 1
        return torch.cat(outs, 1)


class BatchLayerNormComprehension(nn.Module):
    """F.layer_norm over the pieces in a comprehension over indices, weights in ParameterLists."""

    def __init__(self, n: int = 5, d: int = 10):
        super().__init__()
        self.d = d
        self.scale = nn.ParameterList([nn.Parameter(torch.randn(d)) for _ in range(n)])
        self.shift = nn.ParameterList([nn.Parameter(torch.randn(d)) for _ in range(n)])

    def forward(self, x: Tensor) -> Tensor:
        parts = torch.split(x, self.d, 1)
        outs: List[Tensor] = []
        i = 0
        for w, b in zip(self.scale, self.shift):
            outs.append(F.layer_norm(parts[i], (10,), w, b))
            i += 1
        return torch.cat(outs, 1)


class BatchLayerNorm3d(nn.Module):
    """Optimus' MyModule3: a [B, 5, 50] input split on dim 2 into five, layer norms over (10,),
    cat, split again, layer norms over (5, 10)."""

    def __init__(self, n: int = 5):
        super().__init__()
        self.norms1 = nn.ModuleList([nn.LayerNorm(10) for _ in range(n)])
        self.norms2 = nn.ModuleList([nn.LayerNorm([5, 10]) for _ in range(n)])

    def forward(self, x: Tensor) -> Tensor:
        l1 = torch.split(x, 10, dim=2)
        post1: List[Tensor] = []
        for i, norm in enumerate(self.norms1):
            post1.append(norm(l1[i]))
        l2 = torch.split(torch.cat(post1, dim=2), 10, dim=2)
        post2: List[Tensor] = []
        for i, norm in enumerate(self.norms2):
            post2.append(norm(l2[i]))
        return torch.cat(post2, dim=2)


class NegBatchLayerNormEps(nn.Module):
    """Layer norms of one shape but two different eps: only members of one eps batch together
    (3 and 2; no group of two different eps)."""

    def __init__(self):
        super().__init__()
        self.norms = nn.ModuleList([nn.LayerNorm(10, eps=1e-5 if i < 3 else 1e-2)
                                    for i in range(5)])

    def forward(self, x: Tensor) -> Tensor:
        parts = torch.split(x, 10, 1)
        outs: List[Tensor] = []
        i = 0
        for norm in self.norms:
            outs.append(norm(parts[i]))
            i += 1
        return torch.cat(outs, 1)


# --------------------------------------------------------------------------------------------
# Pointwise batches: tanh, relu, sigmoid (unary); add, sub, mul, div (binary); detach,
# nan_to_num, clamp, dropout (scalar arguments).


class UnaryLoop(nn.Module):
    """One unary op per piece of a split, loop over range with append; cat."""

    def __init__(self, op: str, n: int = 6, d: int = 5):
        super().__init__()
        self.op = op
        self.n = n
        self.d = d

    def forward(self, x: Tensor) -> Tensor:
        parts = torch.split(x, self.d, dim=1)
        outs: List[Tensor] = []
        for i in range(self.n):
            p = parts[i]
            if self.op == "tanh":
                outs.append(torch.tanh(p))
            elif self.op == "relu":
                outs.append(F.relu(p))
            else:
                outs.append(torch.sigmoid(p))
        return torch.cat(outs, dim=1)


class UnaryModules(nn.Module):
    """One activation module (nn.Tanh / nn.ReLU / nn.Sigmoid) per branch in a ModuleList, each
    after its own linear layer, a loop with a counter over the branches' inputs xs[i]."""

    def __init__(self, op: str, n: int = 6, d: int = 5):
        super().__init__()
        act = {"tanh": nn.Tanh, "relu": nn.ReLU, "sigmoid": nn.Sigmoid}[op]
        self.acts = nn.ModuleList([act() for _ in range(n)])

    def forward(self, xs: List[Tensor]) -> Tensor:
        outs: List[Tensor] = []
        i = 0
        for act in self.acts:
            outs.append(act(xs[i] * 2.0))
            i += 1
        return torch.stack(outs, dim=1)


class UnaryComprehension(nn.Module):
    """One unary op per piece, a comprehension over the pieces themselves."""

    def __init__(self, op: str, d: int = 5):
        super().__init__()
        self.op = op
        self.d = d

    def forward(self, x: Tensor) -> Tensor:
        parts = x.split(self.d, -1)
        if self.op == "tanh":
            outs = [torch.tanh(p) for p in parts]
        elif self.op == "relu":
            outs = [torch.relu(p) for p in parts]
        else:
            outs = [torch.sigmoid(p) for p in parts]
        return torch.cat(outs, -1)


class PointwiseChain(nn.Module):
    """Optimus' _TestPointwiseOps shape: x split in two halves, each split in pieces; sigmoid
    and relu per piece, then per pair add, mul, sub and div (the divisor kept away from 0),
    comprehensions over indices; cat."""

    def __init__(self, half: int = 20, d: int = 4):
        super().__init__()
        self.half = half
        self.d = d

    def forward(self, x: Tensor) -> Tensor:
        inputs = torch.split(x, self.half, dim=1)
        xs = torch.split(inputs[0], self.d, dim=1)
        ys = torch.split(inputs[1], self.d, dim=1)
        s1 = [torch.sigmoid(xs[i]) for i in range(len(xs))]
        s2 = [torch.sigmoid(ys[i]) for i in range(len(ys))]
        r1 = [torch.nn.functional.relu(s1[i]) for i in range(len(s1))]
        r2 = [torch.nn.functional.relu(s2[i]) for i in range(len(s2))]
        add = [torch.add(r1[i], r2[i]) for i in range(len(r1))]
        mul = [torch.mul(add[i], r1[i]) for i in range(len(add))]
        sub = [torch.sub(mul[i], r2[i]) for i in range(len(mul))]
        div = [torch.div(sub[i], add[i] + 1.0) for i in range(len(sub))]
        return torch.cat(div, dim=1)


class BinaryLoop(nn.Module):
    """One binary op per pair of pieces (x's and y's), loop over range with append; cat."""

    def __init__(self, op: str, n: int = 5, d: int = 4):
        super().__init__()
        self.op = op
        self.n = n
        self.d = d

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        a = torch.split(x, self.d, dim=1)
        b = torch.split(y, self.d, dim=1)
        outs: List[Tensor] = []
        for i in range(self.n):
            if self.op == "add":
                outs.append(a[i] + b[i])
            elif self.op == "sub":
                outs.append(a[i] - b[i])
            elif self.op == "mul":
                outs.append(a[i] * b[i])
            else:
                outs.append(a[i] / (b[i].abs() + 1.0))
        return torch.cat(outs, dim=1)


class MathOpsComprehension(nn.Module):
    """Optimus' _TestMathOps shape: ten copies of the input, clamp(+-1000.1), nan_to_num(0),
    detach per copy in comprehensions, two stacks stacked."""

    def __init__(self, n: int = 10):
        super().__init__()
        self.n = n

    def forward(self, x: Tensor) -> Tensor:
        inputs = [x * 1.0 for i in range(self.n)]
        others = [x * 2.0 for i in range(self.n)]
        clamp_input = [t.clamp(min=-1000.1, max=1000.1) for t in inputs]
        clamp_other = [t.clamp(min=-1000.1, max=1000.1) for t in others]
        nan_input = [torch.nan_to_num(t, 0.0) for t in clamp_input]
        nan_other = [torch.nan_to_num(t, 0.0) for t in clamp_other]
        detach_input = [t.detach() for t in nan_input]
        detach_other = [t.detach() for t in nan_other]
        stack_input = torch.stack(detach_input, dim=0)
        stack_other = torch.stack(detach_other, dim=0)
        return torch.stack((stack_input, stack_other), dim=0)


class ScalarOpLoop(nn.Module):
    """One clamp / nan_to_num / detach per member of a list input, loop over xs[:n] with a
    counter; the detached members are scaled by a parameter so that gradients flow around them."""

    def __init__(self, op: str, n: int = 5):
        super().__init__()
        self.op = op
        self.n = n
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, xs: List[Tensor]) -> Tensor:
        outs: List[Tensor] = []
        i = 0
        for t in xs[: self.n]:
            if self.op == "clamp":
                outs.append(torch.clamp(t, -0.5, 0.5))
            elif self.op == "nan_to_num":
                outs.append(torch.nan_to_num(t * self.scale, nan=0.0, posinf=1.0, neginf=-1.0))
            else:
                outs.append(t.detach() * self.scale + t)
            i += 1
        return torch.cat(outs, 1)


class DropoutModules(nn.Module):
    """One nn.Dropout(0.05) per piece in a ModuleList loop with a counter (Optimus'
    _TestDropout), in eval mode."""

    def __init__(self, n: int = 5, d: int = 20):
        super().__init__()
        self.d = d
        self.drops = nn.ModuleList([nn.Dropout(0.05) for _ in range(n)])

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        split = x.split([20, 20, 20, 20, 20], 1)
        outs: List[Tensor] = []
        i = 0
        for drop in self.drops:
            outs.append(drop(split[i]))
            i += 1
        return outs[0], outs[1], outs[2], outs[3], outs[4]


class DropoutFunctional(nn.Module):
    """F.dropout(p=0.05, training=False) per piece in a comprehension (the inference spelling)."""

    def forward(self, x: Tensor) -> Tensor:
        split = x.split(20, 1)
        outs = [F.dropout(p, p=0.05, training=False) for p in split]
        return torch.cat(outs, 1)


class NegBatchAddMutated(nn.Module):
    """Adds of equal pieces whose outputs are then changed in place (add_, mul_), two of them:
    a batch must not let a mutation of one output reach the others, nor turn the outputs into
    views of one tensor (Optimus' mutated outputs)."""

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        a = torch.split(x, 5, 1)
        b = torch.split(y, 5, 1)
        outs = [a[i] + b[i] for i in range(4)]
        outs[0].add_(1.0)
        outs[2].mul_(2.0)
        return torch.cat(outs, 1)


class NegBatchShapes(nn.Module):
    """Sigmoids of pieces of three different widths (split [4, 6, 8] twice): only equal widths
    may be batched together."""

    def forward(self, x: Tensor) -> Tensor:
        parts = torch.split(x, [4, 6, 8, 4, 6, 8], 1)
        outs = [torch.sigmoid(p) for p in parts]
        return torch.cat(outs, 1)


# --------------------------------------------------------------------------------------------
# Vertical: split / cat / stack / unbind families.


class SplitNormalization(nn.Module):
    """split in the spellings normalization unifies: int size, keyword dim, negative dim, the
    method form and chunk, each piece relu'd (Optimus' test_split_normalization)."""

    def forward(self, x: Tensor) -> Tuple[List[Tensor], List[Tensor], List[Tensor]]:
        a = [torch.relu(s) for s in torch.split(x, 2, 1)]
        b = [torch.relu(s) for s in x.split(split_size=2, dim=-1)]
        c = [torch.relu(s) for s in torch.chunk(x, 4, dim=-1)]
        return a, b, c


class SplitNormalizationUnequal(nn.Module):
    """An int split size that does not divide the dim (3 into 16: 3, 3, 3, 3, 3, 1), method
    form with a negative dim, and a section list [8, 8]; pieces relu'd in a loop."""

    def forward(self, x: Tensor) -> List[Tensor]:
        outs: List[Tensor] = []
        for s in x.split(3, -1):
            outs.append(torch.relu(s))
        for s in torch.split(x, [8, 8], dim=1):
            outs.append(torch.tanh(s))
        return outs


class SplitSizeOne(nn.Module):
    """A split whose one section is the whole dim (remove_split_with_size_one): int size."""

    def forward(self, x: Tensor) -> Tensor:
        parts = torch.split(x, 16, 1)
        return torch.relu(parts[0]) + 1.0


class SplitSizeOneList(nn.Module):
    """The same with a one-element section list, method form, negative dim, pieces in a loop."""

    def forward(self, x: Tensor) -> Tensor:
        outs: List[Tensor] = []
        for p in x.split([16], dim=-1):
            outs.append(torch.relu(p))
        return torch.cat(outs, -1) * 2.0


class MergeSplitsExplicit(nn.Module):
    """Optimus' unequal_multi_split: split [10, 10, 12], each piece split again on the same dim
    ([4, 6], [6, 4], [4, 4, 4]), the pieces collected with extend and relu'd."""

    def forward(self, x: Tensor) -> List[Tensor]:
        fs = torch.split(x, [10, 10, 12], dim=1)
        item0 = fs[0]
        item1 = fs[1]
        item2 = fs[2]
        final_items: List[Tensor] = []
        final_items.extend(item0.split([4, 6], 1))
        final_items.extend(item1.split([6, 4], 1))
        final_items.extend(item2.split([4, 4, 4], 1))
        return [torch.relu(s) for s in final_items]


class MergeSplitsLoop(nn.Module):
    """Optimus' multi_split_2_neg_dim: split(x, 2, -1), each piece split in 1s, a loop over the
    outer pieces with extend; the pieces relu'd."""

    def forward(self, x: Tensor) -> List[Tensor]:
        items: List[Tensor] = []
        for s in torch.split(x, 4, -1):
            items.extend(torch.split(s, 2, 1))
        return [torch.relu(s) for s in items]


class NegMergeSplitsDims(nn.Module):
    """Optimus' diff_dims: the inner split is on another dim (0, the batch, split in halves by
    chunk): splits of different dims must not merge."""

    def forward(self, x: Tensor) -> List[Tensor]:
        items: List[Tensor] = []
        for s in torch.split(x, 8, dim=1):
            items.extend(torch.chunk(s, 2, dim=0))
        return [torch.relu(s) for s in items]


class NegMergeSplitsOtherUsers(nn.Module):
    """Optimus' some_users_not_splits: one piece of the outer split is also read by sin (not a
    split): the other two merge, that one stays."""

    def forward(self, x: Tensor) -> List[Tensor]:
        fs = torch.split(x, [10, 10, 12], dim=1)
        final_items: List[Tensor] = []
        final_items.extend(fs[0].split([4, 6], 1))
        final_items.extend(fs[1].split([6, 4], 1))
        final_items.append(torch.sin(fs[2]))
        return [torch.relu(s) for s in final_items]


class SplitSqueezeComprehension(nn.Module):
    """Optimus' split_squeeze_stack: split in 1s on dim 1, every piece squeezed on dim 1 in a
    comprehension, stacked on dim 0 (merge_split_squeeze: unbind)."""

    def forward(self, x: Tensor) -> Tensor:
        items = list(torch.split(x, 1, dim=1))
        split_items = [torch.squeeze(s, 1) for s in items]
        return torch.stack(split_items)


class SplitSqueezeLoop(nn.Module):
    """The method spellings in a loop: x.split(1, dim=1), t.squeeze(dim=1), sin, stack."""

    def forward(self, x: Tensor) -> Tensor:
        output: List[Tensor] = []
        for t in x.split(1, dim=1):
            output.append(torch.sin(t.squeeze(dim=1)))
        return torch.stack(output, 1)


class NegSplitSqueezeOtherUsers(nn.Module):
    """Optimus' other_users: a piece is also read unsqueezed (relu(items[0])): every user must
    be the squeeze for an unbind."""

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        items = list(torch.split(x, 1, dim=1))
        split_items = [torch.squeeze(s, 1) for s in items]
        return torch.stack(split_items), torch.relu(items[0])


class NegSplitSqueezeDim(nn.Module):
    """Optimus' dim_mismatch and split_size_not_1: squeeze on another dim than the split's, and
    pieces of 2 squeezed (a no-op); neither is an unbind."""

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        a = [torch.squeeze(s, 0) for s in torch.split(x, 1, dim=1)]
        b = [torch.squeeze(s, 1) for s in torch.split(x, 2, dim=1)]
        return torch.stack(a), torch.stack(b)


class MergeGetitemCatExplicit(nn.Module):
    """Optimus' split_cat_split (sizes / 10): consecutive pieces of one split catted and split
    again, all pieces catted back in another order (merge_getitem_cat)."""

    def forward(self, x: Tensor) -> Tensor:
        l1 = torch.split(x, [20, 5, 5, 2, 2, 2, 2, 2, 2, 5, 3], 1)
        cat_1 = torch.cat((l1[0], l1[1]), 1)
        cat_2 = torch.cat((l1[9], l1[10]), 1)
        l2 = torch.split(cat_1, [5, 12, 8], 1)
        l3 = torch.split(cat_2, [1, 2, 5], 1)
        return torch.cat([l2[0], l2[1], l2[2], l3[0], l3[1], l3[2], l1[2], l1[3], l1[4],
                          l1[5], l1[6], l1[7], l1[8]], 1)


class MergeGetitemCatSlices(nn.Module):
    """Runs of consecutive pieces catted through list slicing: cat(pieces[0:3]) and
    cat(pieces[3:6]), each then through a linear."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(12, 4)
        self.b = nn.Linear(12, 4)

    def forward(self, x: Tensor) -> Tensor:
        pieces = torch.split(x, 4, 1)
        left = torch.cat(pieces[0:3], 1)
        right = torch.cat(pieces[3:6], 1)
        return self.a(left) + self.b(right)


class MutateCatExplicit(nn.Module):
    """Optimus' mutate_cat_node_with_some_getitmes on dim 1 (dim 0 is the batch here): runs of
    pieces catted while some pieces are also read by other cats."""

    def forward(self, x: Tensor) -> Tensor:
        l1 = torch.split(x, [5, 5, 20, 2, 2, 2, 2, 2, 4, 1, 5], dim=1)
        cat = torch.cat((l1[6], l1[7], l1[8], l1[9], l1[10], l1[2], l1[3], l1[4], l1[5]), dim=1)
        cat_1 = torch.cat((l1[0], l1[1]), dim=1)
        cat_2 = torch.cat((l1[0], l1[10]), dim=1)
        l2 = torch.split(cat_1, [2, 3, 5], dim=1)
        l3 = torch.split(cat_2, [1, 6, 3], dim=1)
        output = torch.cat([l2[0], l2[1], l2[2], l3[0], l3[1], l3[2], l1[2]], dim=1)
        return torch.cat((output, cat), dim=1)


class MutateCatAllPieces(nn.Module):
    """Optimus' remove_cat_node_with_all_getitmes on dim 1: a cat of every piece (the input
    itself) while pieces are also read elsewhere, in a loop over the pieces."""

    def forward(self, x: Tensor) -> Tensor:
        l1 = torch.split(x, [5, 5, 20, 2, 2, 2, 2, 2, 4, 1, 5], dim=1)
        everything: List[Tensor] = []
        for p in l1:
            everything.append(p)
        cat = torch.cat(everything, dim=1)
        cat_1 = torch.cat((l1[0], l1[1]), dim=1)
        return torch.cat((torch.relu(cat_1), cat, torch.tanh(l1[2])), dim=1)


class SplitCatIdentity(nn.Module):
    """cat(split(x, 4, 1), 1) is x; positional and keyword spellings, and list(...)."""

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        a = torch.cat(torch.split(x, 4, dim=1), dim=1)
        b = torch.cat(list(x.split(4, 1)), 1)
        return a * 2.0, b + 1.0


class SplitCatOtherDim(nn.Module):
    """split on dim 1, cat or stack of all pieces on another dim (simple_split_cat_argspec3,
    simple_split_stack): views of x."""

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        a = torch.cat(torch.split(x, 4, dim=1), -2)
        b = torch.stack(torch.split(x, 4, dim=1), dim=1)
        c = torch.stack(list(torch.split(x, 4, 1)), 1)
        return a * 2.0, b + 1.0, c - 1.0


class SplitCatAddnArgs(nn.Module):
    """split_cat_addn_args / split_stack_addn_args: all pieces catted (stacked) between other
    tensors, comprehension and list concatenation."""

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        split_output = list(torch.split(x, 4, dim=1))
        ones = torch.ones_like(split_output[0])
        a = torch.cat([ones] + split_output + [ones * 2.0], dim=1)
        b = torch.stack([ones] + split_output + [ones, ones * 3.0], dim=1)
        return a, b


class SplitCatShuffled(nn.Module):
    """input_shuffling and input_shuffling_multiple_output: runs of pieces (1-3, 5-7) catted
    between other tensors on the split dim and on another, a stack of pieces 4, 5, a relu of 6."""

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        s = list(torch.split(x, 2, dim=1))
        ones = torch.ones_like(s[0])
        cat1 = torch.cat([ones] + [s[1], s[2], s[3]] + [ones] + [s[5], s[6], s[7]] + [ones],
                         dim=1)
        cat2 = torch.cat([ones, s[1], s[2], s[3], ones], dim=2)
        stack1 = torch.stack([ones, s[4], s[5], ones], dim=1)
        return cat1 + 0.0, torch.relu(s[6]) * cat2.sum(), stack1


class NegSplitCatMutation(nn.Module):
    """split_cat_mutation: one piece overwritten in place (copy_) before the cat: the cat is not
    the split tensor. The split tensor is a detached copy of the input (autograd refuses in-place
    writes to split pieces of a tensor that requires grad); the result is scaled by x, so that
    x's gradient flows."""

    def forward(self, x: Tensor) -> Tensor:
        y = x.detach().clone()
        splits = torch.split(y, 4, dim=1)
        splits[1].copy_(splits[0])
        return torch.cat(splits, dim=1) * x


class SplitCatToSlices(nn.Module):
    """Optimus' split_cat_to_slices on dim 1: long runs (ten pieces) of three splits of x and of
    copies of x catted, pieces out of order in one run, with another tensor in front."""

    def forward(self, x: Tensor) -> Tensor:
        x_c = x * 2.0
        x_c_2 = x * 3.0
        l1 = torch.split(x, [2, 2, 2, 2, 2, 2, 2, 2, 2, 2], dim=1)
        l2 = torch.split(x_c, [2, 2, 2, 2, 2, 2, 2, 2, 2, 2], dim=1)
        l3 = torch.split(x_c_2, [4, 4, 4, 4, 4], dim=1)
        other = l1[0] * 1.5
        pieces = [other] + list(l1) + [l2[4], l2[5], l2[6], l2[7], l2[8], l2[9], l2[0], l2[1],
                                       l2[2], l2[3]] + list(l3)
        return torch.cat(pieces, dim=1)


class SplitCatToSlicesLoop(nn.Module):
    """The same idea in a loop: pieces 2..9 of a split appended one by one after a linear of
    the first two, the pieces also read by a sum."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        pieces = torch.split(x, 2, dim=1)
        outs: List[Tensor] = [self.proj(torch.cat([pieces[0], pieces[1]], 1))]
        for i in range(2, 10):
            outs.append(pieces[i])
        total = pieces[2] + pieces[9]
        return torch.cat(outs, 1) * total.sum(1, keepdim=True)


class UnbindStack(nn.Module):
    """stack(unbind(x, 1), 1) is x; cat(unbind(x, dim=-3), 1); keyword and method spellings."""

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        a = torch.stack(torch.unbind(x, 1), 1)
        b = torch.cat(torch.unbind(x, dim=-3), 1)
        c = torch.stack(x.unbind(dim=1), dim=1)
        return a * 2.0, b + 1.0, c - 1.0


class UnbindStackLoop(nn.Module):
    """Unbind pieces collected in a loop and stacked on another dim (dim_mismatch: a movedim),
    and split-in-1s squeezed then stacked on the split dim."""

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        items: List[Tensor] = []
        for t in torch.unbind(x, dim=1):
            items.append(t)
        squeezed = [torch.squeeze(s, 1) for s in torch.split(x, 1, dim=1)]
        return torch.stack(items, 0) * 2.0, torch.stack(squeezed, 1) + 1.0


class UnbindCatAddnArgs(nn.Module):
    """unbind_cat_addn_args / unbind_stack_addn_args / unbind_cat_dim_mismatch: all unbind
    pieces between other tensors, catted on the unbind dim and on another, and stacked."""

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        split_output = list(torch.unbind(x, dim=1))
        ones = torch.ones_like(split_output[0])
        a = torch.cat([ones] + split_output + [ones], dim=1)
        b = torch.stack([ones] + split_output + [ones, ones], dim=1)
        c = torch.cat([ones] + split_output + [ones], dim=2)
        return a, b, c


class NegUnbindStackOtherUsers(nn.Module):
    """Optimus' other_users_2: pieces 1.. of a split in 1s squeezed and stacked while piece 0 is
    read elsewhere: not the whole input."""

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        items = list(torch.split(x, 1, dim=1))
        split_items = [torch.squeeze(s, 1) for s in items[1:]]
        return torch.stack(split_items, 1), torch.relu(items[0])


class UnbindCatToView(nn.Module):
    """Optimus' unbind_cat_to_view: two views of x unbound on dim 1, most pieces catted in order
    on dim 1 with clones of a few in between."""

    def forward(self, x: Tensor) -> Tensor:
        y = x.view(x.size(0), 10, 5)
        z = x.view(x.size(0), 10, 5)
        l1 = torch.unbind(y, dim=1)
        l2 = torch.unbind(z, dim=1)
        other1 = l1[7].clone()
        other2 = l1[8].clone()
        other3 = l1[9].clone()
        return torch.cat([l1[0], l1[1], l1[2], l1[3], l1[4], l1[5], l1[6], other1,
                          l2[0], l2[1], l2[2], l2[3], l2[4], l2[5], l2[6], l2[7], l2[8], l2[9],
                          other2, other3], dim=1)


class UnbindCatToViewLoop(nn.Module):
    """A [B, 6, 4] input unbound on dim 1, every piece appended in a loop and catted on dim 1
    after a bias piece: flatten(x, 1, 2) with the bias in front."""

    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(4))

    def forward(self, x: Tensor) -> Tensor:
        outs: List[Tensor] = [torch.tanh(x[:, 0] + self.bias)]
        for t in x.unbind(1):
            outs.append(t)
        return torch.cat(outs, 1)


class SplitStackToCats(nn.Module):
    """Optimus' split_stack_to_cats_same_dim: unbind of a view, each piece split in halves,
    the halves stacked with clones in between."""

    def forward(self, x: Tensor) -> Tensor:
        x_c = x.view(x.size(0), 6, 10)
        l1 = torch.unbind(x_c, dim=1)
        s = [torch.split(l1[i], [5, 5], dim=1) for i in range(6)]
        c0 = s[0][0].clone()
        c1 = s[0][1].clone()
        c2 = s[1][0].clone()
        return torch.stack((s[0][0], s[0][1], s[1][0], s[1][1], s[2][0], s[2][1], c0, c1,
                            s[3][0], s[3][1], s[4][0], s[4][1], s[5][0], s[5][1], c2), dim=1)


class SplitStackToCatsOtherDim(nn.Module):
    """Optimus' split_stack_to_cats_different_dim: all pieces of two equal splits stacked on
    another dim (2) after clones of three pieces."""

    def forward(self, x: Tensor) -> Tensor:
        l1 = torch.split(x, [4, 4, 4, 4, 4], dim=1)
        x_c = x * 2.0
        l2 = torch.split(x_c, [4, 4, 4, 4, 4], dim=1)
        others = [l1[i].clone() for i in range(3)]
        return torch.stack(others + list(l1) + list(l2), dim=2)


class UnbindStackToSlices(nn.Module):
    """Optimus' unbind_stack_to_slices: x viewed [B, 10, 5], unbound on dim 1, all pieces in
    order stacked on dim 1 after clones of three."""

    def forward(self, x: Tensor) -> Tensor:
        x_1 = x.view(x.size(0), 10, 5)
        l1 = torch.unbind(x_1, dim=1)
        others = [l1[0].clone(), l1[1].clone(), l1[2].clone()]
        return torch.stack(others + list(l1), dim=1)


class UnbindStackToSlicesRun(nn.Module):
    """A run of unbind pieces (2..7 of 8) stacked on the unbind dim between other tensors,
    appended in a loop."""

    def forward(self, x: Tensor) -> Tensor:
        parts = torch.unbind(x, 1)
        outs: List[Tensor] = [parts[0] * 2.0]
        for i in range(2, 8):
            outs.append(parts[i])
        outs.append(parts[1] * 3.0)
        return torch.stack(outs, 1)


class UnbindStackToSlicesOnly(nn.Module):
    """Every unbind piece, taken by a comprehension, stacked between two computed tensors (the
    pieces used nowhere else): stack([tanh(d), *x.unbind(1), d * 2], 1)."""

    def forward(self, x: Tensor, d: Tensor) -> Tensor:
        feats = [t for t in torch.unbind(x, 1)]
        return torch.stack([torch.tanh(d)] + feats + [d * 2.0], 1)


class MoveReshapeOutOfSplitStack(nn.Module):
    """Optimus' move_reshape_out_of_split_stack: x [B, 5] split in 1s, each piece reshaped
    (-1, 4), the reshapes stacked on dim 0 with clones around them."""

    def forward(self, x: Tensor) -> Tensor:
        l1 = torch.split(x, [1, 1, 1, 1, 1], dim=1)
        r = [l1[i].reshape(-1, 4) for i in range(5)]
        others = [r[0].clone(), r[1].clone(), r[2].clone()]
        return torch.stack(others + r + [r[3].clone()], dim=0)


class MoveReshapeOutOfSplitStackLoop(nn.Module):
    """The same without clones: every piece of split(x, 1, 1) viewed (-1, 4) in a loop and
    stacked on dim 0."""

    def forward(self, x: Tensor) -> Tensor:
        outs: List[Tensor] = []
        for p in x.split(1, 1):
            outs.append(p.view(-1, 4))
        return torch.stack(outs, 0)


class StackTanhUnbind(nn.Module):
    """merge_stack_tahn_unbind: pieces of a split stacked, tanh, unbound again."""

    def forward(self, x: Tensor) -> List[Tensor]:
        pieces = torch.split(x, 4, dim=1)
        return list(torch.unbind(torch.tanh(torch.stack(pieces, dim=0)), dim=0))


class StackTanhUnbindLoop(nn.Module):
    """The same in a loop (stacked on dim 1) and used: each unbound piece through a relu."""

    def forward(self, x: Tensor) -> Tensor:
        pieces: List[Tensor] = []
        for p in torch.split(x, 4, 1):
            pieces.append(p)
        t = torch.tanh(torch.stack(pieces, 1))
        outs = [torch.relu(u) for u in torch.unbind(t, 1)]
        return torch.cat(outs, 1)


class SelectCat(nn.Module):
    """Post-grad select forms: cat([x[:, i].unsqueeze(1) for i in range(n)], 1) is x;
    cat([x[:, i] for i ...], 1) is flatten(x, 1, 2)."""

    def __init__(self, n: int = 6):
        super().__init__()
        self.n = n

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        a = torch.cat([x[:, i].unsqueeze(1) for i in range(self.n)], 1)
        b = torch.cat([x[:, i] for i in range(self.n)], 1)
        return a * 2.0, b + 1.0


class SelectCatLoop(nn.Module):
    """Rows of a [T, B, d] sequence input selected one by one in a loop (select(x, 0, i)) and
    catted on dim 0 and stacked on dim 0; and split -> view -> cat (one reshape)."""

    def forward(self, x: Tensor, y: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        rows: List[Tensor] = []
        for i in range(4):
            rows.append(x[i])
        views = [p.view(-1, 2, 3) for p in torch.split(y, 6, dim=1)]
        return torch.cat(rows, 0) * 2.0, torch.stack(rows, 0) + 1.0, torch.cat(views, 1)


# --------------------------------------------------------------------------------------------
# Registry: name -> Case. Builders seed the global generator: weights after manual_seed(seed),
# inputs after manual_seed(seed + 1).


class Case(NamedTuple):
    seed: int
    make_module: Callable[[], nn.Module]
    make_args: Callable[[int], tuple]
    traceable: bool = True
    eval_mode: bool = False


def _x(d: int) -> Callable[[int], tuple]:
    return lambda b: (torch.randn(b, d),)


def _xs(n: int, d: int) -> Callable[[int], tuple]:
    return lambda b: ([torch.randn(b, d) for _ in range(n)],)


def _nan_xs(n: int, d: int) -> Callable[[int], tuple]:
    def make(b: int):
        xs = [torch.randn(b, d) * 3.0 for _ in range(n)]
        xs[0][0, 0] = float("nan")
        return (xs,)
    return make


CASES: Dict[str, Case] = {
    # batch_linear
    "batch_linear_loop": Case(201, BatchLinearLoop, _x(40)),
    "batch_linear_loop_no_bias": Case(202, lambda: BatchLinearLoop(bias=False), _x(40)),
    "batch_linear_enumerate": Case(203, BatchLinearEnumerate, _x(40)),
    "batch_linear_list_slice": Case(204, BatchLinearListInput, _xs(7, 8)),
    "neg_batch_linear_shapes": Case(205, NegBatchLinearShapes, _x(24)),
    # group_linear
    "group_linear_shapes": Case(206, NegBatchLinearShapes, _x(24)),
    "group_linear_layers": Case(207, GroupLinearLayers, _x(6)),
    # batch_linear_lhs
    "batch_linear_lhs_loop": Case(208, BatchLinearLhsLoop, _x(10)),
    "batch_linear_lhs_loop_no_bias": Case(209, lambda: BatchLinearLhsLoop(bias=False), _x(10)),
    "batch_linear_lhs_comprehension": Case(210, BatchLinearLhsComprehension, _x(10)),
    # batch_layernorm
    "batch_layernorm_loop": Case(211, BatchLayerNormLoop, _x(50)),
    "batch_layernorm_functional": Case(212, BatchLayerNormComprehension, _x(50)),
    "batch_layernorm_3d": Case(213, BatchLayerNorm3d, lambda b: (torch.randn(b, 5, 50),)),
    "neg_batch_layernorm_eps": Case(214, NegBatchLayerNormEps, _x(50)),
    # unary pointwise
    "batch_tanh_loop": Case(215, lambda: UnaryLoop("tanh"), _x(30)),
    "batch_tanh_modules": Case(216, lambda: UnaryModules("tanh"), _xs(6, 5)),
    "batch_tanh_comprehension": Case(217, lambda: UnaryComprehension("tanh"), _x(30)),
    "batch_relu_loop": Case(218, lambda: UnaryLoop("relu"), _x(30)),
    "batch_relu_modules": Case(219, lambda: UnaryModules("relu"), _xs(6, 5)),
    "batch_relu_comprehension": Case(220, lambda: UnaryComprehension("relu"), _x(30)),
    "batch_sigmoid_loop": Case(221, lambda: UnaryLoop("sigmoid"), _x(30)),
    "batch_sigmoid_modules": Case(222, lambda: UnaryModules("sigmoid"), _xs(6, 5)),
    "batch_sigmoid_comprehension": Case(223, lambda: UnaryComprehension("sigmoid"), _x(30)),
    "pointwise_chain": Case(224, PointwiseChain, _x(40)),
    "neg_batch_add_mutated": Case(225, NegBatchAddMutated,
                                  lambda b: (torch.randn(b, 20), torch.randn(b, 20))),
    "neg_batch_shapes": Case(226, NegBatchShapes, _x(36)),
    # binary pointwise
    "batch_add_loop": Case(227, lambda: BinaryLoop("add"), lambda b: (torch.randn(b, 20), torch.randn(b, 20))),
    "batch_sub_loop": Case(228, lambda: BinaryLoop("sub"), lambda b: (torch.randn(b, 20), torch.randn(b, 20))),
    "batch_mul_loop": Case(229, lambda: BinaryLoop("mul"), lambda b: (torch.randn(b, 20), torch.randn(b, 20))),
    "batch_div_loop": Case(230, lambda: BinaryLoop("div"), lambda b: (torch.randn(b, 20), torch.randn(b, 20))),
    # detach, nan_to_num, clamp, dropout
    "math_ops_comprehension": Case(231, MathOpsComprehension, _x(4)),
    "batch_clamp_list_slice": Case(232, lambda: ScalarOpLoop("clamp"), _xs(6, 4)),
    "batch_nan_to_num_list_slice": Case(233, lambda: ScalarOpLoop("nan_to_num"), _nan_xs(6, 4)),
    "batch_detach_list_slice": Case(234, lambda: ScalarOpLoop("detach"), _xs(6, 4)),
    "batch_dropout_modules": Case(235, DropoutModules, _x(100), eval_mode=True),
    "batch_dropout_functional": Case(236, DropoutFunctional, _x(100)),
    # split / cat family
    "normalization_split_spellings": Case(237, SplitNormalization, _x(8)),
    "normalization_split_unequal": Case(238, SplitNormalizationUnequal, _x(16)),
    "split_size_one": Case(239, SplitSizeOne, _x(16)),
    "split_size_one_list": Case(240, SplitSizeOneList, _x(16)),
    "merge_splits_explicit": Case(241, MergeSplitsExplicit, _x(32)),
    "merge_splits_loop": Case(242, MergeSplitsLoop, _x(16)),
    "neg_merge_splits_dims": Case(243, NegMergeSplitsDims, _x(16)),
    "neg_merge_splits_other_users": Case(244, NegMergeSplitsOtherUsers, _x(32)),
    "merge_split_squeeze_comprehension": Case(245, SplitSqueezeComprehension, _x(6)),
    "merge_split_squeeze_loop": Case(246, SplitSqueezeLoop, _x(6)),
    "neg_merge_split_squeeze_other_users": Case(247, NegSplitSqueezeOtherUsers, _x(6)),
    "neg_merge_split_squeeze_dim": Case(248, NegSplitSqueezeDim, _x(6)),
    "merge_getitem_cat_explicit": Case(249, MergeGetitemCatExplicit, _x(50)),
    "merge_getitem_cat_slices": Case(250, MergeGetitemCatSlices, _x(24)),
    "mutate_cat_explicit": Case(251, MutateCatExplicit, _x(50)),
    "mutate_cat_all_pieces": Case(252, MutateCatAllPieces, _x(50)),
    "split_cat_identity": Case(253, SplitCatIdentity, lambda b: (torch.randn(b, 16, 3, 2),)),
    "split_cat_other_dim": Case(254, SplitCatOtherDim, lambda b: (torch.randn(b, 16, 3, 2),)),
    "split_cat_addn_args": Case(255, SplitCatAddnArgs, lambda b: (torch.randn(b, 16, 3, 2),)),
    "split_cat_shuffled": Case(256, SplitCatShuffled, lambda b: (torch.randn(b, 16, 3, 2),)),
    "neg_split_cat_mutation": Case(257, NegSplitCatMutation, lambda b: (torch.randn(b, 16, 3, 2),)),
    "split_cat_to_slices": Case(258, SplitCatToSlices, _x(20)),
    "split_cat_to_slices_loop": Case(259, SplitCatToSlicesLoop, _x(20)),
    "unbind_stack": Case(260, UnbindStack, lambda b: (torch.randn(b, 6, 3, 2),)),
    "unbind_stack_loop": Case(261, UnbindStackLoop, lambda b: (torch.randn(b, 6, 3),)),
    "unbind_cat_addn_args": Case(262, UnbindCatAddnArgs, lambda b: (torch.randn(b, 6, 3, 2),)),
    "neg_unbind_stack_other_users": Case(263, NegUnbindStackOtherUsers, _x(6)),
    "unbind_cat_to_view": Case(264, UnbindCatToView, _x(50)),
    "unbind_cat_to_view_loop": Case(265, UnbindCatToViewLoop, lambda b: (torch.randn(b, 6, 4),)),
    "split_stack_to_cats": Case(266, SplitStackToCats, _x(60)),
    "split_stack_to_cats_other_dim": Case(267, SplitStackToCatsOtherDim, _x(20)),
    "unbind_stack_to_slices": Case(268, UnbindStackToSlices, _x(50)),
    "unbind_stack_to_slices_run": Case(269, UnbindStackToSlicesRun, lambda b: (torch.randn(b, 8, 3),)),
    "unbind_stack_to_slices_only": Case(276, UnbindStackToSlicesOnly,
                                        lambda b: (torch.randn(b, 6, 4), torch.randn(b, 4))),
    "move_reshape_out_of_split_stack": Case(270, MoveReshapeOutOfSplitStack, _x(5)),
    "move_reshape_out_of_split_stack_loop": Case(271, MoveReshapeOutOfSplitStackLoop, _x(5)),
    "merge_stack_tanh_unbind": Case(272, StackTanhUnbind, _x(20)),
    "merge_stack_tanh_unbind_loop": Case(273, StackTanhUnbindLoop, _x(20)),
    "select_cat": Case(274, SelectCat, lambda b: (torch.randn(b, 6, 3),)),
    "select_cat_loop": Case(275, SelectCatLoop,
                            lambda b: (torch.randn(4, b, 3), torch.randn(b, 24))),
}


def make_one(name: str, out_dir: str, batch: int) -> None:
    case = CASES[name]
    torch.manual_seed(case.seed)
    module = case.make_module()
    if case.eval_mode:
        module.eval()
    torch.manual_seed(case.seed + 1)
    args = case.make_args(batch)
    model_dir = os.path.join(out_dir, name)
    os.makedirs(model_dir, exist_ok=True)
    inputs_path = os.path.join(model_dir, "inputs.pt")
    torch.save(tuple(args), inputs_path)
    files = ["inputs.pt %s KB" % _kb(inputs_path)]
    write_archives(name, module, args, model_dir, case.traceable, files, trace_strict=False)
    print("%-40s %s" % (name, ", ".join(files)))


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="output directory (torch1.13/ or torch2.11/ here)")
    parser.add_argument("--batch", type=int, default=8, help="batch size of inputs.pt")
    parser.add_argument("--modules", default="", help="comma-separated subset (default: all)")
    parser.add_argument("--list", action="store_true", help="print the module names and exit")
    opts = parser.parse_args(argv)
    if opts.list:
        print("\n".join(CASES))
        return 0
    if not opts.out:
        parser.error("--out is required")
    names = [n for n in opts.modules.split(",") if n] or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print("unknown module(s): %s" % ", ".join(unknown), file=sys.stderr)
        return 2
    if opts.batch < 2 or opts.batch % 4:
        print("--batch must be a positive multiple of 4 (reshape(-1, 4) of batch rows)",
              file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    print("torch %s -> %s (batch %d)" % (torch.__version__, opts.out, opts.batch))
    for name in names:
        make_one(name, opts.out, opts.batch)
    return 0


if __name__ == "__main__":
    run_with_pinned_hash_seed(main, __file__)
