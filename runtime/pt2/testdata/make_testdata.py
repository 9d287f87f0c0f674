"""Writes the exported programs runtime/pt2's tests read (torch 2.11, CPU):

  towers.pt2    split -> 4 Linear -> cat -> BatchNorm1d (training) -> split -> relu -> cat, an Embedding over
                `.long()` indices: the program's parameters, buffers, an in-place buffer update,
                a Tensor[] result and casts;
  indexing.pt2  a lifted tensor constant, an index with an optional-tensor list, a Linear without
                bias, view/reshape sizes, dropout (p = 0: the checker compares models that draw no
                random numbers), two outputs;
  feature_towers.pt2  slices of the input through a ModuleList of Linear + tanh, then cat (the
                gradient-only planted rules apply to it: no batch norm zeroes the bias gradients);
  escape.pt2    towers.pt2 with one more entry whose name climbs out of the root folder;
  *.expected.pt the outputs torch computes on the archive's sample inputs.

Run: .venv/bin/python runtime/pt2/testdata/make_testdata.py (from the repository root).
"""
import os
import zipfile

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


class Towers(nn.Module):
    def __init__(self):
        super().__init__()
        self.lins = nn.ModuleList([nn.Linear(4, 3) for _ in range(4)])
        self.bn = nn.BatchNorm1d(12)
        self.emb = nn.Embedding(10, 4)

    def forward(self, x, idx):
        parts = torch.split(x, 4, dim=1)
        y = torch.cat([lin(p) for lin, p in zip(self.lins, parts)], dim=1)
        y = self.bn(y)
        y = torch.cat([F.relu(p) for p in torch.split(y, 3, dim=1)], dim=1)
        e = self.emb(idx.long()).sum(1)
        return y.sum(1, keepdim=True) + e.float().sum(1, keepdim=True)


class FeatureTowers(nn.Module):
    def __init__(self):
        super().__init__()
        self.towers = nn.ModuleList([nn.Linear(4, 4) for _ in range(4)])

    def forward(self, x):
        outs = []
        for i, tower in enumerate(self.towers):
            outs.append(torch.tanh(tower(x[:, 4 * i:4 * (i + 1)])))
        return torch.cat(outs, dim=1)


class Indexing(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3, bias=False)
        self.register_buffer("cols", torch.tensor([0, 2]))

    def forward(self, x):
        y = self.lin(x).view(2, -1, 3).reshape(-1, 3)
        scale = torch.tensor([1.0, 2.0, 3.0])
        return y * scale + y[:, self.cols].sum(), F.dropout(y, 0.0, True).mean()


def export(name, module, args, expected):
    torch.manual_seed(1)
    program = torch.export.export(module.train(), args, strict=False)
    path = os.path.join(HERE, name + ".pt2")
    torch.export.save(program, path)
    if expected is not None:
        torch.save(expected, os.path.join(HERE, name + ".expected.pt"))
    return path


def main():
    torch.manual_seed(0)
    towers = Towers()
    x, idx = torch.randn(8, 16), torch.randint(0, 10, (8, 3))
    expected = Towers()
    expected.load_state_dict(towers.state_dict())
    out = expected.train()(x, idx)
    path = export("towers", towers, (x, idx), (out.detach(),))
    torch.manual_seed(0)
    export("indexing", Indexing(), (torch.randn(8, 4),), None)
    torch.manual_seed(0)
    export("feature_towers", FeatureTowers(), (torch.randn(8, 16),), None)
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(os.path.join(HERE, "escape.pt2"), "w") as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info))
        dst.writestr("towers/../evil", b"x")


if __name__ == "__main__":
    main()
