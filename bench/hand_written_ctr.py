#!/usr/bin/env python3
"""Hand-written twins of the corpus models ctr_deepfm, ctr_dcn and ctr_mmoe
(testdata/models/make_corpus.py): the same layers, written as a performance engineer would: all
26 ids in one [B, 26] int64 tensor and the 13 dense values in one [B, 13] float32 tensor, one
table per embedding width with the fields' first rows added to the ids (one add), one lookup
giving [B, 26, D], no casts; MMoE's experts, gates and towers hand-batched (one linear or one
batched matmul per layer for all experts or tasks, one BatchNorm over their features side by
side: BatchNorm normalizes each feature on its own, so one over the joined features is the
experts' own ones). Traced and
saved with their inputs, so that Sentier's counts of the library-style models can be set against
them (bench/RESULTS.md, "Public-style CTR models on the CPU"):

  /usr/bin/python3 bench/hand_written_ctr.py --out DIR
  bazel-bin/tools/sentier_opt --input=DIR/hand_deepfm/traced.pt --inputs=DIR/hand_deepfm/inputs.pt \\
      --output=/tmp/x.pt --enable=none --report=r.json    # aten_ops_per_forward_before
"""
import argparse
import os

import torch
import torch.nn as nn

FIELDS, DENSE, DIM = 26, 13, 16
VOCAB = [40 + 2 * k for k in range(FIELDS)]


def _dnn(sizes):
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers)


class OneTable(nn.Module):
    """Every field's rows in one table; the fields' first rows added to the ids in one add."""

    def __init__(self, dim: int):
        super().__init__()
        self.table = nn.Embedding(sum(VOCAB), dim)
        first = torch.tensor([sum(VOCAB[:k]) for k in range(FIELDS)], dtype=torch.int64)
        self.register_buffer("first_rows", first)

    def forward(self, ids):  # [B, 26] -> [B, 26, dim]
        return self.table(ids + self.first_rows)


class HandDeepFM(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear_table = OneTable(1)
        self.table = OneTable(DIM)
        self.dense_linear = nn.Linear(DENSE, 1, bias=False)
        self.dnn = _dnn([FIELDS * DIM + DENSE, 64, 32])
        self.out = nn.Linear(32, 1, bias=False)

    def forward(self, ids, dense):
        linear = self.linear_table(ids).sum(1) + self.dense_linear(dense)
        E = self.table(ids)
        fm = 0.5 * (E.sum(1).pow(2) - (E * E).sum(1)).sum(1, keepdim=True)
        deep = self.out(self.dnn(torch.cat([E.flatten(1), dense], 1)))
        return torch.sigmoid(linear + fm + deep)


class HandDCN(nn.Module):
    def __init__(self, cross_layers: int = 3):
        super().__init__()
        self.table = OneTable(DIM)
        dim = FIELDS * DIM + DENSE
        self.kernels = nn.Parameter(torch.randn(cross_layers, dim, 1) * 0.05)
        self.biases = nn.Parameter(torch.zeros(cross_layers, dim, 1))
        self.dnn = _dnn([dim, 64, 32])
        self.out = nn.Linear(dim + 32, 1, bias=False)

    def forward(self, ids, dense):
        x = torch.cat([self.table(ids).flatten(1), dense], 1)
        x0 = x.unsqueeze(2)
        xl = x0
        for i in range(self.kernels.shape[0]):
            xl = torch.matmul(x0, torch.matmul(xl.transpose(1, 2), self.kernels[i])) + self.biases[i] + xl
        return torch.sigmoid(self.out(torch.cat([xl.squeeze(2), self.dnn(x)], 1)))


class HandMMoE(nn.Module):
    """ctr_mmoe's layers (4 experts [429 -> 32 -> 16] with BatchNorm, ReLU and Dropout(0), two
    softmax gates, two towers [16 -> 8 -> 1]) hand-batched."""

    def __init__(self, experts: int = 4, tasks: int = 2):
        super().__init__()
        self.table = OneTable(DIM)
        dim = FIELDS * DIM + DENSE
        self.E, self.T = experts, tasks
        self.l1 = nn.Linear(dim, experts * 32)
        self.bn1 = nn.BatchNorm1d(experts * 32)
        self.w2 = nn.Parameter(torch.randn(experts, 32, 16) * 0.1)
        self.b2 = nn.Parameter(torch.zeros(experts, 16))
        self.bn2 = nn.BatchNorm1d(experts * 16)
        self.gates = nn.Linear(dim, tasks * experts)
        self.t1 = nn.Parameter(torch.randn(tasks, 16, 8) * 0.1)
        self.tb1 = nn.Parameter(torch.zeros(tasks, 8))
        self.tbn = nn.BatchNorm1d(tasks * 8)
        self.t2 = nn.Parameter(torch.randn(tasks, 8, 1) * 0.1)
        self.tb2 = nn.Parameter(torch.zeros(tasks, 1))
        self.drop = nn.Dropout(0.0)

    def forward(self, ids, dense):
        B = ids.shape[0]
        x = torch.cat([self.table(ids).flatten(1), dense], 1)
        h = self.drop(torch.relu(self.bn1(self.l1(x)))).view(B, self.E, 32)
        h = torch.einsum("bei,eio->beo", h, self.w2) + self.b2
        h = self.drop(torch.relu(self.bn2(h.reshape(B, self.E * 16)))).view(B, self.E, 16)
        g = torch.softmax(self.gates(x).view(B, self.T, self.E), 2)
        mixed = torch.bmm(g, h)  # [B, T, 16]
        t = torch.einsum("bti,tio->bto", mixed, self.t1) + self.tb1
        t = self.drop(torch.relu(self.tbn(t.reshape(B, self.T * 8)))).view(B, self.T, 8)
        out = torch.sigmoid(torch.einsum("bti,tio->bto", t, self.t2) + self.tb2)  # [B, T, 1]
        return list(out.unbind(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", type=int, default=16)
    opts = parser.parse_args()
    torch.manual_seed(0)
    ids = torch.stack([torch.randint(0, v, (opts.batch,)) for v in VOCAB], 1)
    dense = torch.rand(opts.batch, DENSE)
    for name, cls in (("hand_deepfm", HandDeepFM), ("hand_dcn", HandDCN), ("hand_mmoe", HandMMoE)):
        model = cls()
        d = os.path.join(opts.out, name)
        os.makedirs(d, exist_ok=True)
        torch.jit.save(torch.jit.trace(model, (ids, dense)), os.path.join(d, "traced.pt"))
        torch.save((ids, dense), os.path.join(d, "inputs.pt"))
        print(name, d)


if __name__ == "__main__":
    main()
