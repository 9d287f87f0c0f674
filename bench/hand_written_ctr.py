#!/usr/bin/env python3
"""Hand-written twins of the corpus models ctr_deepfm and ctr_dcn (testdata/models/make_corpus.py):
the same layers, written as a performance engineer would: all 26 ids in one [B, 26] int64 tensor
and the 13 dense values in one [B, 13] float32 tensor, one table per embedding width with the
fields' first rows added to the ids (one add), one lookup giving [B, 26, D], no casts. Traced and
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", type=int, default=16)
    opts = parser.parse_args()
    torch.manual_seed(0)
    ids = torch.stack([torch.randint(0, v, (opts.batch,)) for v in VOCAB], 1)
    dense = torch.rand(opts.batch, DENSE)
    for name, cls in (("hand_deepfm", HandDeepFM), ("hand_dcn", HandDCN)):
        model = cls()
        d = os.path.join(opts.out, name)
        os.makedirs(d, exist_ok=True)
        torch.jit.save(torch.jit.trace(model, (ids, dense)), os.path.join(d, "traced.pt"))
        torch.save((ids, dense), os.path.join(d, "inputs.pt"))
        print(name, d)


if __name__ == "__main__":
    main()
