#!/usr/bin/env python3
"""shift_study.py — what one batched lookup's index shift costs a forward on CUDA.

`batch_embedding` turns N lookups `emb_c(idx[:, c])` into one lookup into the concatenated tables
at `idx + shift`, where `shift` (each table's first row) is built from host ints and copied to the
device at every call in the original parameter layout. On the corpus `two_tower` (towers of 4 and
3 lookups) the forward measured 0.96x while the training step was 1.37x. This script writes the
corpus model and spellings of its towers' lookups side by side, as scripted archives with the
same parameters, for tools/gpu/ab_time.py to time against the original:

  members        the corpus model (one nn.Embedding per feature)
  per_step       what the rule writes: torch.tensor(first rows).to(idx.device, non_blocking=True)
  blocking       the same copy with non_blocking=False
  buffer         the shift a registered buffer, moved with the module (no copy per call)
  no_shift       no shift at all (wrong lookups; what the add and the copy cost together)

    python3 tools/gpu/shift_study.py --out DIR   (then ab_time.py --a DIR/members.pt --b DIR/X.pt)
"""

import argparse
import os
import sys
from typing import List

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "testdata", "models"))
from make_corpus import REGISTRY, Tower, TwoTower  # noqa: E402


class BatchedTower(nn.Module):
    """A corpus Tower whose lookups are one lookup into the concatenated tables."""

    def __init__(self, tower: Tower, spelling: str):
        super().__init__()
        self.embs = tower.embs
        self.mlp = tower.mlp
        self.spelling = spelling
        rows = [e.weight.size(0) for e in tower.embs]
        first = [sum(rows[:c]) for c in range(len(rows))]
        self.first: List[int] = first
        self.register_buffer("shift", torch.tensor(first, dtype=torch.long))

    def forward(self, sparse: Tensor, dense: Tensor) -> Tensor:
        tables = torch.cat([e.weight for e in self.embs], 0)
        if self.spelling == "per_step":
            idx = sparse + torch.tensor(self.first, dtype=torch.long).to(sparse.device, non_blocking=True)
        elif self.spelling == "blocking":
            idx = sparse + torch.tensor(self.first, dtype=torch.long).to(sparse.device)
        elif self.spelling == "buffer":
            idx = sparse + self.shift
        else:
            idx = sparse
        looked = F.embedding(tables, idx).flatten(1, 2)
        return F.normalize(self.mlp(torch.cat([dense, looked], 1)), p=2.0, dim=1)


class BatchedTwoTower(nn.Module):
    def __init__(self, m: TwoTower, spelling: str):
        super().__init__()
        self.user_tower = BatchedTower(m.user_tower, spelling)
        self.item_tower = BatchedTower(m.item_tower, spelling)
        self.temperature = m.temperature

    def forward(self, user_sparse: Tensor, user_dense: Tensor, item_sparse: Tensor,
                item_dense: Tensor) -> Tensor:
        u = self.user_tower(user_sparse, user_dense)
        v = self.item_tower(item_sparse, item_dense)
        return torch.matmul(u, v.t()) / self.temperature


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=4096)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    model, inputs, _ = REGISTRY["two_tower"](args.batch)
    torch.jit.save(torch.jit.script(model), os.path.join(args.out, "members.pt"))
    torch.save(inputs, os.path.join(args.out, "inputs.pt"))
    for spelling in ["per_step", "blocking", "buffer", "no_shift"]:
        torch.jit.save(torch.jit.script(BatchedTwoTower(model, spelling)),
                       os.path.join(args.out, spelling + ".pt"))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
