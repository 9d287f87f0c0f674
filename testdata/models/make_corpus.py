#!/usr/bin/env python3
"""Builds Sentier's model corpus: recommendation architectures as TorchScript archives.

Every model is written the way PyTorch users write them (nn.ModuleList loops, outs.append(...),
split sizes in attributes, list and dict inputs), kept small (each archive under 0.5 MB, but
dlrm_criteo, which keeps the reference's 512-wide MLPs, and seed_scale, 512 sparse features, near
2 MB) but with a realistic structure (64 towers, 256 branches, 20 highway layers, ...). For each
model:

  DIR/<name>/scripted.pt   torch.jit.script(model), saved with torch.jit.save
  DIR/<name>/traced.pt     torch.jit.trace(model, inputs), where tracing keeps the semantics
  DIR/<name>/inputs.pt     torch.save(tuple of forward arguments) at batch size --batch

Usage:
  /usr/bin/python3 testdata/models/make_corpus.py --out DIR [--batch 16] [--models a,b] [--inputs_only]
                   [--production]

--production gives dlrm_criteo and seed_scale production-sized tables (hundreds of MB), for
benchmarks; it refuses to write under testdata/models.

Everything is deterministic: each model has a fixed seed; the weights are drawn after
torch.manual_seed(seed), the inputs after torch.manual_seed(seed + 1), so --inputs_only (e.g.
--batch 4096 for already saved archives) draws the same kind of inputs without the archives.
Modules stay in training mode (the default); no model draws random numbers in forward (no dropout
with p > 0), so scripted and traced twins give the same outputs.

Runs unchanged under torch 1.13 and torch 2.x (only torch.jit.script/trace/save, torch.save,
nn.*, F.*). The architectures are this project's own code; each class cites the paper and a
public reference implementation it follows.
"""

import argparse
import copy
import os
import sys
from typing import Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

Tensor = torch.Tensor


# --------------------------------------------------------------------------------------------
# Input helpers (all draw from the global generator, seeded by the caller).


def _dense(batch: int, dim: int) -> Tensor:
    return torch.randn(batch, dim)


def _ids(batch: int, vocab_sizes: List[int]) -> Tensor:
    """One int64 id per field, column f within [0, vocab_sizes[f])."""
    cols = [torch.randint(0, v, (batch,), dtype=torch.int64) for v in vocab_sizes]
    return torch.stack(cols, 1)


def _bags(batch: int, rows: int) -> Tuple[Tensor, Tensor]:
    """EmbeddingBag input: bags of 1-3 indices; offsets of length batch, monotone from 0."""
    lengths = torch.randint(1, 4, (batch,), dtype=torch.int64)
    offsets = torch.zeros(batch, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths, 0)[:-1]
    indices = torch.randint(0, rows, (int(lengths.sum().item()),), dtype=torch.int64)
    return indices, offsets


def _mlp(sizes: List[int], final_act: bool = False) -> nn.Sequential:
    layers: List[nn.Module] = []
    for k in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[k], sizes[k + 1]))
        if k < len(sizes) - 2 or final_act:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


# --------------------------------------------------------------------------------------------
# Models.


class DLRM(nn.Module):
    """DLRM: Naumov et al. 2019, "Deep Learning Recommendation Model for Personalization and
    Recommendation Systems", arXiv:1906.00091; reference code facebookresearch/dlrm
    (dlrm_s_pytorch.py: apply_mlp, apply_emb, interact_features with dot interaction).

    Bottom MLP over dense features, one EmbeddingBag(mode="sum") per sparse table, pairwise dot
    products of all feature vectors (strictly lower triangle), top MLP, sigmoid. With
    sparse_grads the tables are EmbeddingBag(sparse=True), as the reference code builds them
    (their gradients are sparse tensors, for SGD or SparseAdam).
    """

    def __init__(self, num_dense: int = 13, num_tables: int = 8, rows: int = 100, dim: int = 16,
                 sparse_grads: bool = False):
        super().__init__()
        self.bot_l = _mlp([num_dense, 32, dim], final_act=True)
        self.emb_l = nn.ModuleList([nn.EmbeddingBag(rows, dim, mode="sum", sparse=sparse_grads)
                                    for _ in range(num_tables)])
        n = num_tables + 1
        li = [i for i in range(n) for j in range(i)]
        lj = [j for i in range(n) for j in range(i)]
        self.register_buffer("li", torch.tensor(li, dtype=torch.int64))
        self.register_buffer("lj", torch.tensor(lj, dtype=torch.int64))
        self.top_l = _mlp([dim + len(li), 32, 16, 1])

    def forward(self, dense: Tensor, indices: List[Tensor], offsets: List[Tensor]) -> Tensor:
        x = self.bot_l(dense)
        ly: List[Tensor] = []
        i = 0
        for emb in self.emb_l:
            ly.append(emb(indices[i], offsets[i]))
            i += 1
        (batch_size, d) = x.shape
        T = torch.cat([x] + ly, dim=1).view(batch_size, -1, d)
        Z = torch.bmm(T, torch.transpose(T, 1, 2))
        Zflat = Z[:, self.li, self.lj]
        R = torch.cat([x, Zflat], dim=1)
        return torch.sigmoid(self.top_l(R))


class DCNv2(nn.Module):
    """DCN-v2: Wang et al. 2021, "DCN V2: Improved Deep & Cross Network and Practical Lessons for
    Web-scale Learning to Rank Systems", arXiv:2008.13535; reference code
    tensorflow/recommenders (tfrs.layers.dcn.Cross) and shenweichen/DeepCTR-Torch (CrossNet,
    parameterization="matrix").

    One nn.Embedding per sparse column (columns taken with torch.unbind), x0 = cat(dense, embs);
    full-rank cross layers x_{l+1} = x0 * (W x_l + b) + x_l in parallel with a deep MLP on x0;
    the two are concatenated into a linear head.
    """

    def __init__(self, num_dense: int = 13, vocab_sizes: Optional[List[int]] = None, dim: int = 8,
                 num_cross: int = 3):
        super().__init__()
        if vocab_sizes is None:
            vocab_sizes = [50, 80, 120, 60, 200, 90, 70, 150]
        self.embs = nn.ModuleList([nn.Embedding(v, dim) for v in vocab_sizes])
        d0 = num_dense + dim * len(vocab_sizes)
        self.cross = nn.ModuleList([nn.Linear(d0, d0) for _ in range(num_cross)])
        self.deep = _mlp([d0, 64, 32], final_act=True)
        self.head = nn.Linear(d0 + 32, 1)

    def forward(self, sparse: Tensor, dense: Tensor) -> Tensor:
        cols = torch.unbind(sparse, 1)
        feats: List[Tensor] = [dense]
        i = 0
        for emb in self.embs:
            feats.append(emb(cols[i]))
            i += 1
        x0 = torch.cat(feats, 1)
        xl = x0
        for layer in self.cross:
            xl = x0 * layer(xl) + xl
        deep = self.deep(x0)
        return torch.sigmoid(self.head(torch.cat([xl, deep], 1)))


class DeepFM(nn.Module):
    """DeepFM: Guo et al. 2017, "DeepFM: A Factorization-Machine based Neural Network for CTR
    Prediction", arXiv:1703.04247; reference code shenweichen/DeepCTR-Torch (models/deepfm.py,
    layers FM) and ChenglongChen/tensorflow-DeepFM.

    Per-field first-order weights (Embedding(v, 1)) and second-order embeddings (Embedding(v, k));
    FM term 0.5 * ((sum_f e_f)^2 - sum_f e_f^2); a deep MLP over the concatenated embeddings.
    """

    def __init__(self, vocab_sizes: Optional[List[int]] = None, dim: int = 8):
        super().__init__()
        if vocab_sizes is None:
            vocab_sizes = [60, 100, 80, 50, 120, 90, 70, 110, 55, 65]
        self.first_order = nn.ModuleList([nn.Embedding(v, 1) for v in vocab_sizes])
        self.embs = nn.ModuleList([nn.Embedding(v, dim) for v in vocab_sizes])
        self.bias = nn.Parameter(torch.zeros(1))
        self.dnn = _mlp([dim * len(vocab_sizes), 64, 32, 1])

    def forward(self, sparse: Tensor) -> Tensor:
        first: List[Tensor] = []
        i = 0
        for w in self.first_order:
            first.append(w(sparse[:, i]))
            i += 1
        embs: List[Tensor] = []
        i = 0
        for emb in self.embs:
            embs.append(emb(sparse[:, i]))
            i += 1
        linear = torch.cat(first, 1).sum(1, keepdim=True) + self.bias
        E = torch.stack(embs, 1)  # (B, F, k)
        square_of_sum = torch.pow(torch.sum(E, 1), 2)
        sum_of_square = torch.sum(E * E, 1)
        fm = 0.5 * torch.sum(square_of_sum - sum_of_square, 1, keepdim=True)
        deep = self.dnn(torch.cat(embs, 1))
        return torch.sigmoid(linear + fm + deep)


class DeepFMColumns(nn.Module):
    """DeepFM as CTR libraries deploy it (shenweichen/DeepCTR-Torch's BaseModel and DeepFM, traced
    as its users serve it): one [B, 26 + 13] float tensor with a column per feature, 26 sparse ids
    stored as floats and 13 dense values; each sparse field's column is sliced and cast
    (`X[:, a:b].long()`) before its own nn.Embedding (first-order weights of width 1 and
    second-order embeddings of width 8, one ModuleList each); the dense columns are sliced one by
    one too. FM interaction over the [B, 26, 8] embeddings, a linear part, and a deep MLP over the
    flattened embeddings and the dense columns.
    """

    def __init__(self, vocab_sizes: Optional[List[int]] = None, num_dense: int = 13, dim: int = 8):
        super().__init__()
        if vocab_sizes is None:
            vocab_sizes = [20 + 3 * k for k in range(26)]
        n = len(vocab_sizes)
        self.sparse_cols: List[Tuple[int, int]] = [(k, k + 1) for k in range(n)]
        self.dense_cols: List[Tuple[int, int]] = [(n + k, n + k + 1) for k in range(num_dense)]
        self.linear_embs = nn.ModuleList([nn.Embedding(v, 1) for v in vocab_sizes])
        self.embs = nn.ModuleList([nn.Embedding(v, dim) for v in vocab_sizes])
        self.dense_linear = nn.Linear(num_dense, 1)
        self.dnn = _mlp([n * dim + num_dense, 64, 32, 1])

    def forward(self, X: Tensor) -> Tensor:
        linear_terms: List[Tensor] = []
        i = 0
        for emb in self.linear_embs:
            a, b = self.sparse_cols[i]
            linear_terms.append(emb(X[:, a:b].long()))  # [B, 1, 1]
            i += 1
        embs: List[Tensor] = []
        i = 0
        for emb in self.embs:
            a, b = self.sparse_cols[i]
            embs.append(emb(X[:, a:b].long()))  # [B, 1, dim]
            i += 1
        dense: List[Tensor] = []
        for a, b in self.dense_cols:
            dense.append(X[:, a:b])
        dense_x = torch.cat(dense, -1)
        linear = torch.sum(torch.cat(linear_terms, -1), -1) + self.dense_linear(dense_x)
        E = torch.cat(embs, 1)  # [B, 26, dim]
        square_of_sum = torch.pow(torch.sum(E, 1, keepdim=True), 2)
        sum_of_square = torch.sum(E * E, 1, keepdim=True)
        fm = 0.5 * torch.sum(square_of_sum - sum_of_square, 2)
        deep = self.dnn(torch.cat([torch.flatten(E, 1), dense_x], -1))
        return torch.sigmoid(linear + fm + deep)


def _deepfm_columns_args(m: DeepFMColumns, batch: int):
    ids = _ids(batch, [e.num_embeddings for e in m.embs]).float()
    return (torch.cat([ids, _dense(batch, len(m.dense_cols))], 1),)


class WideDeep(nn.Module):
    """Wide & Deep: Cheng et al. 2016, "Wide & Deep Learning for Recommender Systems",
    arXiv:1606.07792; reference code tensorflow/models (official/recommendation, wide_deep) and
    shenweichen/DeepCTR-Torch (models/wdl.py).

    Wide part: a linear model over dense features plus hashed cross-product features of sparse
    field pairs (one weight per hash bucket); deep part: per-field embeddings concatenated with
    the dense features through an MLP; logits added, sigmoid.
    """

    def __init__(self, num_dense: int = 13, vocab_sizes: Optional[List[int]] = None, dim: int = 8,
                 hash_buckets: int = 200):
        super().__init__()
        if vocab_sizes is None:
            vocab_sizes = [50, 70, 90, 110, 130, 60]
        self.hash_buckets = hash_buckets
        self.register_buffer("cross_a", torch.tensor([0, 0, 1, 2, 3], dtype=torch.int64))
        self.register_buffer("cross_b", torch.tensor([1, 2, 3, 4, 5], dtype=torch.int64))
        self.wide_dense = nn.Linear(num_dense, 1)
        self.wide_cross = nn.Embedding(hash_buckets, 1)
        self.embs = nn.ModuleList([nn.Embedding(v, dim) for v in vocab_sizes])
        self.deep = _mlp([num_dense + dim * len(vocab_sizes), 64, 32, 1])

    def forward(self, dense: Tensor, sparse: Tensor) -> Tensor:
        crosses = (sparse[:, self.cross_a] * 7919 + sparse[:, self.cross_b]) % self.hash_buckets
        wide = self.wide_dense(dense) + self.wide_cross(crosses).sum(1)
        feats: List[Tensor] = [dense]
        i = 0
        for emb in self.embs:
            feats.append(emb(sparse[:, i]))
            i += 1
        deep = self.deep(torch.cat(feats, 1))
        return torch.sigmoid(wide + deep)


class MMoE(nn.Module):
    """MMoE: Ma et al. 2018, "Modeling Task Relationships in Multi-task Learning with
    Multi-gate Mixture-of-Experts", KDD 2018 (doi:10.1145/3219819.3220007); reference code
    shenweichen/DeepCTR-Torch (models/multitask/mmoe.py) and drawbridge/keras-mmoe.

    Eight experts (Linear + ReLU) on the shared input, one softmax gate per task mixing the
    stacked expert outputs, one tower per task.
    """

    def __init__(self, d_in: int = 32, num_experts: int = 8, d_expert: int = 16, num_tasks: int = 2):
        super().__init__()
        self.experts = nn.ModuleList(
            [nn.Sequential(nn.Linear(d_in, d_expert), nn.ReLU()) for _ in range(num_experts)])
        self.gates = nn.ModuleList([nn.Linear(d_in, num_experts) for _ in range(num_tasks)])
        self.towers = nn.ModuleList([_mlp([d_expert, 8, 1]) for _ in range(num_tasks)])

    def forward(self, x: Tensor) -> Tensor:
        expert_outs: List[Tensor] = []
        for expert in self.experts:
            expert_outs.append(expert(x))
        E = torch.stack(expert_outs, 1)  # (B, experts, d)
        preds: List[Tensor] = []
        for gate, tower in zip(self.gates, self.towers):
            g = torch.softmax(gate(x), dim=1)
            mixed = torch.bmm(g.unsqueeze(1), E).squeeze(1)
            preds.append(torch.sigmoid(tower(mixed)))
        return torch.cat(preds, 1)


class CGC(nn.Module):
    """Customized Gate Control layer of PLE for two tasks (the last extraction layer): task
    experts see their task's input, shared experts the shared input; each task's gate mixes its
    own and the shared experts."""

    def __init__(self, d_in: int, d_expert: int, n_specific: int, n_shared: int):
        super().__init__()
        self.task1_experts = nn.ModuleList(
            [nn.Sequential(nn.Linear(d_in, d_expert), nn.ReLU()) for _ in range(n_specific)])
        self.task2_experts = nn.ModuleList(
            [nn.Sequential(nn.Linear(d_in, d_expert), nn.ReLU()) for _ in range(n_specific)])
        self.shared_experts = nn.ModuleList(
            [nn.Sequential(nn.Linear(d_in, d_expert), nn.ReLU()) for _ in range(n_shared)])
        self.gate1 = nn.Linear(d_in, n_specific + n_shared)
        self.gate2 = nn.Linear(d_in, n_specific + n_shared)

    def run_experts(self, x1: Tensor, x2: Tensor, xs: Tensor) -> Tuple[List[Tensor], List[Tensor], List[Tensor]]:
        e1: List[Tensor] = []
        for expert in self.task1_experts:
            e1.append(expert(x1))
        e2: List[Tensor] = []
        for expert in self.task2_experts:
            e2.append(expert(x2))
        es: List[Tensor] = []
        for expert in self.shared_experts:
            es.append(expert(xs))
        return e1, e2, es

    def mix(self, gate_logits: Tensor, experts: List[Tensor]) -> Tensor:
        g = torch.softmax(gate_logits, dim=1).unsqueeze(2)  # (B, n, 1)
        return torch.sum(g * torch.stack(experts, 1), 1)

    def forward(self, x1: Tensor, x2: Tensor, xs: Tensor) -> Tuple[Tensor, Tensor]:
        e1, e2, es = self.run_experts(x1, x2, xs)
        y1 = self.mix(self.gate1(x1), e1 + es)
        y2 = self.mix(self.gate2(x2), e2 + es)
        return y1, y2


class ExtractionLayer(CGC):
    """A PLE extraction layer below the last one: CGC plus a shared gate over all experts."""

    def __init__(self, d_in: int, d_expert: int, n_specific: int, n_shared: int):
        super().__init__(d_in, d_expert, n_specific, n_shared)
        self.gate_shared = nn.Linear(d_in, 2 * n_specific + n_shared)

    def forward(self, x1: Tensor, x2: Tensor, xs: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        e1, e2, es = self.run_experts(x1, x2, xs)
        y1 = self.mix(self.gate1(x1), e1 + es)
        y2 = self.mix(self.gate2(x2), e2 + es)
        ys = self.mix(self.gate_shared(xs), e1 + e2 + es)
        return y1, y2, ys


class PLE(nn.Module):
    """PLE: Tang et al. 2020, "Progressive Layered Extraction (PLE): A Novel Multi-Task Learning
    (MTL) Model for Personalized Recommendations", RecSys 2020 (doi:10.1145/3383313.3412236);
    reference code shenweichen/DeepCTR-Torch (models/multitask/ple.py).

    Two tasks, two levels: an extraction layer (2 specific experts per task, 2 shared experts,
    per-task gates and a shared gate, all fed the same input) and a final CGC layer; one tower
    per task.
    """

    def __init__(self, d_in: int = 32, d_expert: int = 16):
        super().__init__()
        self.level1 = ExtractionLayer(d_in, d_expert, 2, 2)
        self.level2 = CGC(d_expert, d_expert, 2, 2)
        self.tower1 = _mlp([d_expert, 8, 1])
        self.tower2 = _mlp([d_expert, 8, 1])

    def forward(self, x: Tensor) -> Tensor:
        h1, h2, hs = self.level1(x, x, x)
        y1, y2 = self.level2(h1, h2, hs)
        return torch.cat([torch.sigmoid(self.tower1(y1)), torch.sigmoid(self.tower2(y2))], 1)


class Tower(nn.Module):
    """One side of a two-tower model: per-field embeddings and dense features through an MLP,
    L2-normalized."""

    def __init__(self, vocab_sizes: List[int], d_dense: int, dim: int, d_out: int):
        super().__init__()
        self.embs = nn.ModuleList([nn.Embedding(v, dim) for v in vocab_sizes])
        self.mlp = _mlp([d_dense + dim * len(vocab_sizes), 64, d_out])

    def forward(self, sparse: Tensor, dense: Tensor) -> Tensor:
        feats: List[Tensor] = [dense]
        i = 0
        for emb in self.embs:
            feats.append(emb(sparse[:, i]))
            i += 1
        return F.normalize(self.mlp(torch.cat(feats, 1)), p=2.0, dim=1)


class TwoTower(nn.Module):
    """Two-tower retrieval: Covington et al. 2016, "Deep Neural Networks for YouTube
    Recommendations" (RecSys 2016), Huang et al. 2013 (DSSM), Yi et al. 2019, "Sampling-Bias-
    Corrected Neural Modeling for Large Corpus Item Recommendations" (in-batch softmax); reference
    code tensorflow/recommenders (tfrs.tasks.Retrieval).

    User and item towers, L2-normalized, in-batch logits u @ v^T / temperature.
    """

    def __init__(self):
        super().__init__()
        self.user_tower = Tower([200, 50, 30, 12], d_dense=8, dim=16, d_out=32)
        self.item_tower = Tower([150, 40, 25], d_dense=6, dim=16, d_out=32)
        self.temperature = 0.05

    def forward(self, user_sparse: Tensor, user_dense: Tensor, item_sparse: Tensor,
                item_dense: Tensor) -> Tensor:
        u = self.user_tower(user_sparse, user_dense)
        v = self.item_tower(item_sparse, item_dense)
        return torch.matmul(u, v.t()) / self.temperature


class InteractingLayer(nn.Module):
    """AutoInt's interacting layer: multi-head self-attention over fields with a residual
    projection (the paper's W_Query, W_Key, W_Value, W_Res have no bias)."""

    def __init__(self, d_in: int, d_head: int, heads: int):
        super().__init__()
        self.heads = heads
        self.d_head = d_head
        self.w_query = nn.Linear(d_in, d_head * heads, bias=False)
        self.w_key = nn.Linear(d_in, d_head * heads, bias=False)
        self.w_value = nn.Linear(d_in, d_head * heads, bias=False)
        self.w_res = nn.Linear(d_in, d_head * heads, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        b = x.size(0)
        f = x.size(1)
        q = self.w_query(x).view(b, f, self.heads, self.d_head).transpose(1, 2)
        k = self.w_key(x).view(b, f, self.heads, self.d_head).transpose(1, 2)
        v = self.w_value(x).view(b, f, self.heads, self.d_head).transpose(1, 2)
        att = torch.softmax(torch.matmul(q, k.transpose(2, 3)), dim=-1)  # (B, H, F, F)
        out = torch.matmul(att, v).transpose(1, 2).reshape(b, f, self.heads * self.d_head)
        return F.relu(out + self.w_res(x))


class AutoInt(nn.Module):
    """AutoInt: Song et al. 2019, "AutoInt: Automatic Feature Interaction Learning via
    Self-Attentive Neural Networks", arXiv:1810.11921; reference code shichence/AutoInt and
    shenweichen/DeepCTR-Torch (layers InteractingLayer).

    Per-field embeddings stacked to (B, F, d), two interacting layers (multi-head self-attention
    over fields written with Linear projections, matmul and softmax, plus residual), a linear head
    over the flattened result.
    """

    def __init__(self, vocab_sizes: Optional[List[int]] = None, dim: int = 16):
        super().__init__()
        if vocab_sizes is None:
            vocab_sizes = [80, 60, 120, 50, 100, 70, 90, 110]
        self.embs = nn.ModuleList([nn.Embedding(v, dim) for v in vocab_sizes])
        self.layers = nn.ModuleList([InteractingLayer(dim, 8, 2), InteractingLayer(16, 8, 2)])
        self.head = nn.Linear(16 * len(vocab_sizes), 1)

    def forward(self, sparse: Tensor) -> Tensor:
        embs: List[Tensor] = []
        i = 0
        for emb in self.embs:
            embs.append(emb(sparse[:, i]))
            i += 1
        x = torch.stack(embs, 1)
        for layer in self.layers:
            x = layer(x)
        return torch.sigmoid(self.head(torch.flatten(x, 1)))


class DIN(nn.Module):
    """DIN: Zhou et al. 2018, "Deep Interest Network for Click-Through Rate Prediction",
    arXiv:1706.06978; reference code zhougr1993/DeepInterestNetwork and shenweichen/DeepCTR-Torch
    (layers LocalActivationUnit, AttentionSequencePoolingLayer).

    The candidate item's embedding attends over the behaviour sequence: an MLP on
    [q, k, q - k, q * k] gives one weight per step (masked, not softmax-normalized, as in the
    paper); the weighted sum, the user profile and the candidate feed the output MLP. PReLU
    stands in for the paper's Dice activation.
    """

    def __init__(self, num_items: int = 200, dim: int = 16, d_user: int = 8):
        super().__init__()
        self.item_emb = nn.Embedding(num_items, dim)
        self.att = nn.Sequential(nn.Linear(4 * dim, 32), nn.PReLU(), nn.Linear(32, 16), nn.PReLU(),
                                 nn.Linear(16, 1))
        self.mlp = nn.Sequential(nn.Linear(d_user + 2 * dim, 64), nn.PReLU(), nn.Linear(64, 32),
                                 nn.PReLU(), nn.Linear(32, 1))

    def forward(self, user: Tensor, target: Tensor, history: Tensor, mask: Tensor) -> Tensor:
        q = self.item_emb(target)  # (B, d)
        k = self.item_emb(history)  # (B, T, d)
        qe = q.unsqueeze(1).expand_as(k)
        scores = self.att(torch.cat([qe, k, qe - k, qe * k], dim=2)).squeeze(2)  # (B, T)
        scores = scores * mask
        pooled = torch.sum(scores.unsqueeze(2) * k, 1)
        return torch.sigmoid(self.mlp(torch.cat([user, pooled, q], 1)))


class Towers(nn.Module):
    """Per-feature towers: one small MLP per dense feature group, the shape that horizontal
    fusion targets in production rankers (public reference: PyTorch's own horizontal-fusion pass,
    pytorch/pytorch torch/_inductor/fx_passes/group_batch_fusion.py, batches exactly such
    per-feature Linear/LayerNorm/activation groups; cf. the per-feature modules of DHEN, Zhang et
    al. 2022, arXiv:2203.11014).

    x (B, 64 * d) is split into 64 pieces of d; tower i is Linear(d, h) -> tanh -> LayerNorm(h)
    -> Linear(h, h2) -> relu, the towers' outputs are concatenated. Written with three
    ModuleLists iterated together and a counter indexing the pieces.
    """

    def __init__(self, num: int = 64, d: int = 8, h: int = 16, h2: int = 8):
        super().__init__()
        self.d = d
        self.l1 = nn.ModuleList([nn.Linear(d, h) for _ in range(num)])
        self.ln = nn.ModuleList([nn.LayerNorm(h) for _ in range(num)])
        self.l2 = nn.ModuleList([nn.Linear(h, h2) for _ in range(num)])

    def forward(self, x: Tensor) -> Tensor:
        parts = torch.split(x, self.d, 1)
        outs: List[Tensor] = []
        i = 0
        for l1, ln, l2 in zip(self.l1, self.ln, self.l2):
            h = torch.tanh(l1(parts[i]))
            h = ln(h)
            outs.append(torch.relu(l2(h)))
            i += 1
        return torch.cat(outs, 1)


class Wide(nn.Module):
    """A 256-branch wide model: one small Linear per input slice (very wide per-feature layers
    as in large rankers, e.g. DHEN, Zhang et al. 2022, arXiv:2203.11014; the case batched by
    pytorch/pytorch torch/_inductor/fx_passes/group_batch_fusion.py).

    x (B, 256 * d) split into 256 slices; branch i is Linear(d, d_out) -> SiLU; concatenated.
    """

    __constants__ = ["d"]

    def __init__(self, branches: int = 256, d: int = 4, d_out: int = 4):
        super().__init__()
        self.d = d
        self.branches = nn.ModuleList([nn.Linear(d, d_out) for _ in range(branches)])

    def forward(self, x: Tensor) -> Tensor:
        parts = torch.split(x, self.d, dim=1)
        outs: List[Tensor] = []
        i = 0
        for branch in self.branches:
            outs.append(F.silu(branch(parts[i])))
            i += 1
        return torch.cat(outs, dim=1)


class Highway(nn.Module):
    """Highway network: Srivastava et al. 2015, "Highway Networks", arXiv:1505.00387 (also the
    self-gating layers of recommendation MLPs); reference: the highway layers of
    allenai/allennlp (modules/highway.py), written here with separate gate and hidden Linears.

    20 layers: t = sigmoid(gate(x)); h = relu(lin(x)); x = t * h + (1 - t) * x.
    """

    def __init__(self, d: int = 32, layers: int = 20):
        super().__init__()
        self.gates = nn.ModuleList([nn.Linear(d, d) for _ in range(layers)])
        self.lins = nn.ModuleList([nn.Linear(d, d) for _ in range(layers)])

    def forward(self, x: Tensor) -> Tensor:
        for gate, lin in zip(self.gates, self.lins):
            t = torch.sigmoid(gate(x))
            h = F.relu(lin(x))
            x = t * h + (1 - t) * x
        return x


class TransformerSeq(nn.Module):
    """Transformer block over a behaviour sequence, as in BST: Chen et al. 2019, "Behavior
    Sequence Transformer for E-commerce Recommendation in Alibaba", arXiv:1905.06874 (Vaswani et
    al. 2017 encoder layer); reference: torch.nn.TransformerEncoderLayer.

    One TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
    batch_first=True) over (B, T, 32), mean pooling over T, a linear head.
    """

    def __init__(self):
        super().__init__()
        self.encoder = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64,
                                                  dropout=0.0, batch_first=True)
        self.head = nn.Linear(32, 1)

    def forward(self, seq: Tensor) -> Tensor:
        h = self.encoder(seq)
        return self.head(h.mean(1))


class ListInput(nn.Module):
    """Per-feature projections over a list input (one dense tensor per feature), the input
    convention of TorchRec-style KeyedTensor consumers (pytorch/torchrec) and DeepCTR's
    per-feature dense inputs: xs[i] -> Linear -> relu, concatenated, linear head."""

    def __init__(self, num: int = 16, d: int = 8, h: int = 16):
        super().__init__()
        self.proj = nn.ModuleList([nn.Linear(d, h) for _ in range(num)])
        self.head = nn.Linear(num * h, 1)

    def forward(self, xs: List[Tensor]) -> Tensor:
        outs: List[Tensor] = []
        i = 0
        for layer in self.proj:
            outs.append(F.relu(layer(xs[i])))
            i += 1
        return self.head(torch.cat(outs, 1))


class DictInput(nn.Module):
    """Named-feature model over a dict input, the convention of TorchRec's KeyedTensor.to_dict()
    and of serving stacks that pass feature maps (pytorch/torchrec); wide-and-deep shaped
    (Cheng et al. 2016, arXiv:1606.07792): the raw features in a fixed key order (self.keys) feed
    a linear wide part, a per-key Linear + relu (nn.ModuleDict) feeds the deep part."""

    def __init__(self):
        super().__init__()
        dims = {"user_dense": 8, "item_dense": 6, "context": 4, "ctr_7d": 4, "price": 2, "age": 1}
        self.keys: List[str] = list(dims.keys())
        self.proj = nn.ModuleDict({k: nn.Linear(dims[k], 8) for k in self.keys})
        self.wide = nn.Linear(sum(dims.values()), 1)
        self.head = nn.Linear(8 * len(dims), 1)

    def forward(self, feats: Dict[str, Tensor]) -> Tensor:
        raw: List[Tensor] = []
        for k in self.keys:
            raw.append(feats[k])
        wide = self.wide(torch.cat(raw, 1))
        deep: List[Tensor] = []
        for name, layer in self.proj.items():
            deep.append(F.relu(layer(feats[name])))
        return torch.sigmoid(wide + self.head(torch.cat(deep, 1)))


class SparseDict(nn.Module):
    """Per-feature id tensors in a dict (multi-hot features of fixed length, one key per
    feature: the layout of TorchRec's KeyedJaggedTensor.to_dict() for padded features, and of
    serving stacks that pass feature maps; pytorch/torchrec), one nn.Embedding per key in an
    nn.ModuleDict, sum-pooled as an EmbeddingBag(mode="sum") would (facebookresearch/dlrm),
    concatenated with the dense features into an MLP (Cheng et al. 2016, arXiv:1606.07792)."""

    def __init__(self, dim: int = 8):
        super().__init__()
        vocab = {"user_id": 120, "item_id": 200, "category": 30, "city": 50, "device": 12}
        self.keys: List[str] = list(vocab.keys())
        self.embs = nn.ModuleDict({k: nn.Embedding(v, dim) for k, v in vocab.items()})
        self.mlp = _mlp([6 + dim * len(vocab), 32, 1])

    def forward(self, dense: Tensor, ids: Dict[str, Tensor]) -> Tensor:
        pooled: List[Tensor] = [dense]
        for name, emb in self.embs.items():
            pooled.append(emb(ids[name]).sum(1))
        return torch.sigmoid(self.mlp(torch.cat(pooled, 1)))


class YouTubeDNN(nn.Module):
    """Candidate generation of Covington, Adams and Sargin 2016, "Deep Neural Networks for YouTube
    Recommendations" (RecSys '16): variable-length bags of ids (watched videos, searched tokens)
    are embedded and averaged into fixed vectors (the paper's "watch vector" and "search
    vector"), concatenated with a geographic embedding and dense features (age, gender), and fed
    through a tower of ReLU layers whose output scores the candidate videos. Here the bags have
    fixed length L (padded histories truncated to L): history [B, S, L] holds S behaviour
    sequences, one nn.Embedding per sequence in a ModuleList, each averaged over its L ids.
    """

    def __init__(self, vocab: Tuple[int, ...] = (300, 120, 40, 200), dim: int = 16,
                 videos: int = 100):
        super().__init__()
        self.seq_embs = nn.ModuleList([nn.Embedding(v, dim) for v in vocab])
        self.geo = nn.Embedding(50, dim)
        self.tower = _mlp([dim * len(vocab) + dim + 3, 64, 32], final_act=True)
        self.scores = nn.Linear(32, videos)

    def forward(self, history: Tensor, geo: Tensor, dense: Tensor) -> Tensor:
        parts: List[Tensor] = []
        i = 0
        for emb in self.seq_embs:
            parts.append(emb(history[:, i]).mean(1))
            i += 1
        parts.append(self.geo(geo))
        parts.append(dense)
        return self.scores(self.tower(torch.cat(parts, 1)))


class GatedBag(nn.Module):
    """One field of GatedBags: a mean-pooled table and its gate."""

    def __init__(self, rows: int, dim: int):
        super().__init__()
        self.bag = nn.EmbeddingBag(rows, dim, mode="mean")
        self.gate = nn.Parameter(torch.zeros(dim))

    def forward(self, ids: Tensor, offsets: Tensor) -> Tensor:
        return self.bag(ids, offsets) * torch.sigmoid(self.gate)


class GatedBags(nn.Module):
    """Field importance on pooled embeddings: every field's mean-pooled bag of ids is scaled by a
    learned gate before the fields are concatenated into an MLP. FiBiNET's SENET layer (Huang et
    al. 2019, arXiv:1905.09433; shenweichen/DeepCTR-Torch, layers/interaction.py SENETLayer)
    reweights fields per example; here the gate is a static per-field parameter, the simpler form
    many production models use. Each field is its own module (table and gate) in a ModuleList over
    List[Tensor] ids and offsets, so every pooled lookup is consumed right where it is made.
    """

    def __init__(self, fields: int = 6, rows: int = 80, dim: int = 8):
        super().__init__()
        self.fields = nn.ModuleList([GatedBag(rows, dim) for _ in range(fields)])
        self.mlp = _mlp([fields * dim, 32, 1])

    def forward(self, indices: List[Tensor], offsets: List[Tensor]) -> Tensor:
        ys: List[Tensor] = []
        i = 0
        for field in self.fields:
            ys.append(field(indices[i], offsets[i]))
            i += 1
        return torch.sigmoid(self.mlp(torch.cat(ys, 1)))


class WeightedFeatures(nn.Module):
    """Weighted sparse features: each id comes with a score (TorchRec's weighted features, the
    id-score lists of Meta's rankers: KeyedJaggedTensor weights fed to an EmbeddingBagCollection
    with is_weighted=True, pytorch/torchrec), written by hand: ids and scores [B, F, L] padded to
    L per feature, one nn.Embedding per feature in a ModuleList, each bag pooled as
    (emb(ids) * scores.unsqueeze(-1)).sum(1); cat with the dense features into an MLP."""

    def __init__(self, vocab: Tuple[int, ...] = (150, 80, 60, 200, 40), dim: int = 8):
        super().__init__()
        self.embs = nn.ModuleList([nn.Embedding(v, dim) for v in vocab])
        self.mlp = _mlp([4 + dim * len(vocab), 32, 1])

    def forward(self, dense: Tensor, ids: Tensor, scores: Tensor) -> Tensor:
        pooled: List[Tensor] = [dense]
        f = 0
        for emb in self.embs:
            pooled.append((emb(ids[:, f]) * scores[:, f].unsqueeze(-1)).sum(1))
            f += 1
        return torch.sigmoid(self.mlp(torch.cat(pooled, 1)))


class DataDependentIf(nn.Module):
    """Missing-value imputation behind a data-dependent `if` (a common serving-side guard; no
    specific paper): only when the batch has a NaN are the NaNs replaced by learned defaults
    (the Criteo pipeline of facebookresearch/dlrm fills missing dense values with a constant
    offline instead). Then 4 feature groups (split with an int attribute) get a LayerNorm
    each and an MLP; a linear skip connection reads the raw groups glued back together."""

    def __init__(self, groups: int = 4, d: int = 8):
        super().__init__()
        self.d = d
        self.fill = nn.Parameter(torch.zeros(groups * d))
        self.norms = nn.ModuleList([nn.LayerNorm(d) for _ in range(groups)])
        self.mlp = _mlp([groups * d, 32, 16], final_act=True)
        self.head = nn.Linear(16, 1)
        self.skip = nn.Linear(groups * d, 1)

    def forward(self, x: Tensor) -> Tensor:
        if bool(torch.isnan(x).any()):
            x = torch.where(torch.isnan(x), self.fill.expand_as(x), x)
        parts = torch.split(x, self.d, 1)
        normed: List[Tensor] = []
        i = 0
        for ln in self.norms:
            normed.append(ln(parts[i]))
            i += 1
        h = self.mlp(torch.cat(normed, 1))
        raw = torch.cat(parts, 1)
        return self.head(h) + self.skip(raw)


class BatchNormTowers(nn.Module):
    """Per-feature towers followed by an MLP with BatchNorm1d (buffers: running statistics,
    updated in training mode), the BN-MLP of e.g. PNN/FiBiNET implementations
    (shenweichen/DeepCTR-Torch DNN(use_bn=True); Ioffe & Szegedy 2015, arXiv:1502.03167).

    x (B, 64) split into 8 groups of d (an int attribute), Linear(8, 16) + ReLU per group, concatenated, then Linear -> BatchNorm1d -> ReLU twice and a linear head, sigmoid.
    """

    def __init__(self, groups: int = 8, d: int = 8, h: int = 16):
        super().__init__()
        self.d = d
        self.towers = nn.ModuleList([nn.Sequential(nn.Linear(d, h), nn.ReLU()) for _ in range(groups)])
        self.mlp = nn.Sequential(nn.Linear(groups * h, 64), nn.BatchNorm1d(64), nn.ReLU(),
                                 nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x: Tensor) -> Tensor:
        parts = torch.split(x, self.d, 1)
        outs: List[Tensor] = []
        i = 0
        for tower in self.towers:
            outs.append(tower(parts[i]))
            i += 1
        return torch.sigmoid(self.mlp(torch.cat(outs, 1)))


class FeatureGroups(nn.Module):
    """Dense feature groups of unequal widths (sizes in a List[int] attribute), each projected
    to a common width and stacked into a (B, F, d) field tensor for field-wise pooling: the
    vector-valued-field embedding step of field-interaction models (cf. AutoInt's field
    embeddings, Song et al. 2019, arXiv:1810.11921; FiBiNET, Huang et al. 2019,
    arXiv:1905.09433); no specific reference implementation.

    8 groups of widths [8, 8, 16, 8, 4, 16, 8, 8]; Linear(width, 16) + ReLU per group; stack,
    mean over fields, linear head.
    """

    def __init__(self, d: int = 16):
        super().__init__()
        self.sizes: List[int] = [8, 8, 16, 8, 4, 16, 8, 8]
        self.proj = nn.ModuleList([nn.Linear(w, d) for w in self.sizes])
        self.head = nn.Linear(d, 1)

    def forward(self, x: Tensor) -> Tensor:
        groups = torch.split(x, self.sizes, 1)
        fields: List[Tensor] = []
        i = 0
        for proj in self.proj:
            fields.append(torch.relu(proj(groups[i])))
            i += 1
        return self.head(torch.stack(fields, 1).mean(1))


class Functional(nn.Module):
    """Feature towers written with torch.nn.functional on explicit nn.Parameter weights (one
    stacked parameter per layer, row i for tower i), the style of hand-written modules that
    keep per-tower weights in one tensor (no specific paper; the tower shape is that of
    Towers above, cf. DHEN, arXiv:2203.11014).

    x (B, 6 * 8) chunked into 6 pieces; tower i: F.linear -> F.layer_norm -> F.gelu -> F.linear
    -> F.relu; concatenated; F.linear head.
    """

    __constants__ = ["n", "h"]

    def __init__(self, n: int = 6, d: int = 8, h: int = 16, h2: int = 8):
        super().__init__()
        self.n = n
        self.h = h
        self.w1 = nn.Parameter(torch.randn(n, h, d) / d ** 0.5)
        self.b1 = nn.Parameter(torch.zeros(n, h))
        self.gamma = nn.Parameter(torch.ones(n, h))
        self.beta = nn.Parameter(torch.zeros(n, h))
        self.w2 = nn.Parameter(torch.randn(n, h2, h) / h ** 0.5)
        self.b2 = nn.Parameter(torch.zeros(n, h2))
        self.w_out = nn.Parameter(torch.randn(1, n * h2) / (n * h2) ** 0.5)
        self.b_out = nn.Parameter(torch.zeros(1))

    def forward(self, x: Tensor) -> Tensor:
        parts = torch.chunk(x, self.n, 1)
        outs: List[Tensor] = []
        for i in range(self.n):
            h = F.linear(parts[i], self.w1[i], self.b1[i])
            h = F.layer_norm(h, [self.h], self.gamma[i], self.beta[i])
            h = F.gelu(h)
            h = F.linear(h, self.w2[i], self.b2[i])
            outs.append(F.relu(h))
        return F.linear(torch.cat(outs, 1), self.w_out, self.b_out)


class OptionalInput(nn.Module):
    """Per-field towers with an optional feature-presence mask (forward(x, mask=None)): absent
    features are zeroed when a mask is given (a generic serving convention, no specific paper;
    the per-field layers follow FiBiNET-style field-wise processing, Huang et al. 2019,
    arXiv:1905.09433). 6 fields of 8, Linear + relu per field, linear head."""

    __constants__ = ["d"]

    def __init__(self, fields: int = 6, d: int = 8, h: int = 8):
        super().__init__()
        self.d = d
        self.fields = nn.ModuleList([nn.Linear(d, h) for _ in range(fields)])
        self.head = nn.Linear(fields * h, 1)

    def forward(self, x: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        if mask is not None:
            x = x * mask
        parts = torch.split(x, self.d, 1)
        outs: List[Tensor] = []
        i = 0
        for layer in self.fields:
            outs.append(F.relu(layer(parts[i])))
            i += 1
        return self.head(torch.cat(outs, 1))


class TupleOutput(nn.Module):
    """An FM + deep model over 4 dense field vectors that returns a tuple (logit, field view):
    the same pieces are both concatenated (deep input) and stacked (FM interactions), as in
    DeepFM/NFM code that keeps a flat and a (B, F, k) view of the fields (Guo et al. 2017,
    arXiv:1703.04247; He & Chua 2017, NFM, arXiv:1708.05027)."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.deep = _mlp([4 * d, 32, 1])

    def forward(self, x: Tensor) -> Tuple[Tensor, Tensor]:
        a, b, c, e = torch.chunk(x, 4, 1)
        flat = torch.cat([a, b, c, e], 1)
        fields = torch.stack([a, b, c, e], 1)  # (B, 4, d)
        fm = 0.5 * torch.sum(torch.sum(fields, 1) ** 2 - torch.sum(fields * fields, 1), 1, keepdim=True)
        return self.deep(flat) + fm, fields


# Table sizes of the 26 categorical features of the Criteo Kaggle Display Advertising Challenge
# data set, in the order of facebookresearch/dlrm's data loader (its --arch-embedding-size for
# --data-set=kaggle). DLRMCriteo keeps their order of size on small tables.
CRITEO_KAGGLE_ROWS = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593,
                      3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105,
                      142572)

# Production-sized tables for dlrm_criteo and seed_scale (make_corpus.py --production): for
# benchmarks only, never written into the repository.
PRODUCTION = False


def criteo_rows(production: bool) -> List[int]:
    """Rows of DLRMCriteo's 26 tables: the Criteo counts capped at 100k (production), or small
    tables growing with the count's number of bits (4 to 37 rows: a 3-row table gets 4, the
    10M-row one 37)."""
    if production:
        return [min(n, 100000) for n in CRITEO_KAGGLE_ROWS]
    return [min(40, 1 + 3 * n.bit_length() // 2) for n in CRITEO_KAGGLE_ROWS]


def _relu_mlp(sizes: List[int], sigmoid_last: bool) -> nn.Sequential:
    """Linear layers with ReLU after each, the last one's activation a Sigmoid when asked."""
    layers: List[nn.Module] = []
    for k in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[k], sizes[k + 1], bias=True))
        last = k == len(sizes) - 2
        layers.append(nn.Sigmoid() if last and sigmoid_last else nn.ReLU())
    return nn.Sequential(*layers)


class DLRMCriteo(nn.Module):
    """DLRM in its Criteo configuration: Naumov et al. 2019, "Deep Learning Recommendation Model
    for Personalization and Recommendation Systems", arXiv:1906.00091; reference code
    facebookresearch/dlrm (dlrm_s_pytorch.py run on the Kaggle Criteo data:
    --arch-sparse-feature-size=16 --arch-mlp-bot=13-512-256-64-16 --arch-mlp-top=512-256-1,
    dot interaction).

    Bottom MLP 13-512-256-64-16 (ReLU after every layer), 26 tables
    nn.EmbeddingBag(rows_k, 16, mode="sum", sparse=True) of different sizes (criteo_rows), dot
    products of the 27 feature vectors (strictly lower triangle: 351 pairs), top MLP
    367-512-256-1 with a sigmoid last. Called as the reference's users deploy it, with the
    per-table offsets and indices stacked into [26, B] tensors (lS_o[k], lS_i[k] for table k: one
    index per bag) and looked up in an enumerate loop over the tables.
    """

    def __init__(self, rows: Optional[List[int]] = None, m_spa: int = 16,
                 ln_bot: Tuple[int, ...] = (13, 512, 256, 64, 16),
                 ln_top: Tuple[int, ...] = (512, 256, 1)):
        super().__init__()
        if rows is None:
            rows = criteo_rows(False)
        self.bot_l = _relu_mlp(list(ln_bot), sigmoid_last=False)
        self.emb_l = nn.ModuleList(
            [nn.EmbeddingBag(n, m_spa, mode="sum", sparse=True) for n in rows])
        num_vectors = len(rows) + 1
        pairs = [(i, j) for i in range(num_vectors) for j in range(i)]
        self.register_buffer("li", torch.tensor([p[0] for p in pairs], dtype=torch.int64))
        self.register_buffer("lj", torch.tensor([p[1] for p in pairs], dtype=torch.int64))
        self.top_l = _relu_mlp([ln_bot[-1] + len(pairs)] + list(ln_top), sigmoid_last=True)

    def apply_emb(self, lS_o: Tensor, lS_i: Tensor) -> List[Tensor]:
        ly: List[Tensor] = []
        for k, emb in enumerate(self.emb_l):
            ly.append(emb(lS_i[k], lS_o[k]))
        return ly

    def interact_features(self, x: Tensor, ly: List[Tensor]) -> Tensor:
        (batch_size, d) = x.shape
        T = torch.cat([x] + ly, dim=1).view((batch_size, -1, d))
        Z = torch.bmm(T, torch.transpose(T, 1, 2))
        Zflat = Z[:, self.li, self.lj]
        return torch.cat([x, Zflat], dim=1)

    def forward(self, dense_x: Tensor, lS_o: Tensor, lS_i: Tensor) -> Tensor:
        x = self.bot_l(dense_x)
        ly = self.apply_emb(lS_o, lS_i)
        z = self.interact_features(x, ly)
        return self.top_l(z)


class FeatureConfig(NamedTuple):
    name: str
    rows: int
    width: int
    pooling: str  # EmbeddingBag mode: "sum" or "mean"
    weighted: bool  # ids come with scores (per_sample_weights; "sum" pooling only)


def _mix32(x: int) -> int:
    """A fixed 32-bit integer mix (xor-shift and multiply), so that the feature configs depend on
    neither Python's nor torch's random generators."""
    x &= 0xFFFFFFFF
    x = (((x >> 16) ^ x) * 0x45D9F3B) & 0xFFFFFFFF
    x = (((x >> 16) ^ x) * 0x45D9F3B) & 0xFFFFFFFF
    return (x >> 16) ^ x


_SEED_SCALE_WIDTHS = (8,) * 12 + (16,) * 5 + (32,) * 2 + (64,)
_SEED_SCALE_GROUPS = ("user", "item", "ctx", "query", "ad", "creative", "page", "geo")


def seed_scale_features(num: int = 512, production: bool = False) -> List[FeatureConfig]:
    """The sparse features of SeedScale, drawn from a hash of the feature number: widths 8 (60%),
    16 (25%), 32 (10%) and 64 (5%); "mean" pooling for a fifth, the rest "sum", a sixth of those
    weighted; 2-12 rows each, or 1k-96k rows (production, log-spread)."""
    features: List[FeatureConfig] = []
    for k in range(num):
        h = _mix32(1000003 * k + 17)
        width = _SEED_SCALE_WIDTHS[h % len(_SEED_SCALE_WIDTHS)]
        if production:
            scale = (h >> 12) % 7
            rows = (1000 << scale) + (h >> 16) % (500 << scale)
        else:
            rows = 2 + (h >> 8) % 11
        pooling = "mean" if (h >> 20) % 5 == 0 else "sum"
        weighted = pooling == "sum" and (h >> 24) % 6 == 0
        group = _SEED_SCALE_GROUPS[k % len(_SEED_SCALE_GROUPS)]
        name = "%s_%s_%03d" % (group, "idscore" if weighted else "id", k)
        features.append(FeatureConfig(name, rows, width, pooling, weighted))
    return features


class SeedScale(nn.Module):
    """A ranker at the feature scale of production ("seed scale": hundreds of sparse features
    and dozens of dense ones): DCN-v2, Wang et al. 2021, "DCN V2: Improved Deep & Cross Network
    and Practical Lessons for Web-scale Learning to Rank Systems", arXiv:2008.13535 (its low-rank
    cross layers), over pooled sparse features and per-feature dense towers as in
    DHEN, Zhang et al. 2022, arXiv:2203.11014; reference code pytorch/torchrec
    (EmbeddingBagCollection and a separate weighted collection for id-score features,
    torchrec.modules.crossnet.LowRankCrossNet).

    512 sparse features from a config list (seed_scale_features: name, rows, width 8/16/32/64,
    pooling sum/mean, weighted), one nn.EmbeddingBag(rows, width, mode=pooling, sparse=True) per
    feature in an nn.ModuleDict keyed by name -- the weighted ones (per_sample_weights) in a
    second ModuleDict, as TorchRec keeps weighted features in their own collection; 50 dense
    towers (Linear(8, 16) -> ReLU -> Linear(16, 8)) on the pieces of dense [B, 400]; x0 = cat of
    the pooled embeddings and the tower outputs (d0 = 7848); two low-rank cross layers
    x_{l+1} = x0 * U(V x_l) + x_l (V: d0 -> 4 without bias, U: 4 -> d0 with the bias b_l); a
    linear head to one logit, sigmoid (the paper's cross-network-only model). The rank is low and
    the head a single layer to keep the archives near 2 MB.
    """

    __jit_ignored_attributes__ = ["features"]

    def __init__(self, production: bool = False, num_features: int = 512, num_towers: int = 50,
                 tower_in: int = 8, tower_hidden: int = 16, tower_out: int = 8,
                 cross_layers: int = 2, cross_rank: int = 4):
        super().__init__()
        self.features = seed_scale_features(num_features, production)
        self.tower_in = tower_in
        self.embs = nn.ModuleDict()
        self.weighted_embs = nn.ModuleDict()
        for f in self.features:
            bag = nn.EmbeddingBag(f.rows, f.width, mode=f.pooling, sparse=True)
            if f.weighted:
                self.weighted_embs[f.name] = bag
            else:
                self.embs[f.name] = bag
        self.towers = nn.ModuleList([
            nn.Sequential(nn.Linear(tower_in, tower_hidden), nn.ReLU(),
                          nn.Linear(tower_hidden, tower_out))
            for _ in range(num_towers)])
        d0 = sum(f.width for f in self.features) + num_towers * tower_out
        self.cross_v = nn.ModuleList(
            [nn.Linear(d0, cross_rank, bias=False) for _ in range(cross_layers)])
        self.cross_u = nn.ModuleList([nn.Linear(cross_rank, d0) for _ in range(cross_layers)])
        self.head = nn.Linear(d0, 1)

    def forward(self, dense: Tensor, ids: Dict[str, Tensor], offsets: Dict[str, Tensor],
                weights: Dict[str, Tensor]) -> Tensor:
        pooled: List[Tensor] = []
        for name, emb in self.embs.items():
            pooled.append(emb(ids[name], offsets[name]))
        for name, emb in self.weighted_embs.items():
            pooled.append(emb(ids[name], offsets[name], per_sample_weights=weights[name]))
        pieces = torch.split(dense, self.tower_in, dim=1)
        i = 0
        for tower in self.towers:
            pooled.append(tower(pieces[i]))
            i += 1
        x0 = torch.cat(pooled, dim=1)
        xl = x0
        for v, u in zip(self.cross_v, self.cross_u):
            xl = x0 * u(v(xl)) + xl
        return torch.sigmoid(self.head(xl))


# --------------------------------------------------------------------------------------------
# Registry: name -> builder(batch) -> (module, example_args, traceable). Builders seed the
# global generator: weights after manual_seed(seed), inputs after manual_seed(seed + 1).



# --------------------------------------------------------------------------------------------
# Models in the style of public CTR and multi-task libraries, written here from their published
# shape (feature-config objects, a dict of feature tensors, nn.ModuleDict embeddings, a `.long()`
# of every id and a `.float()` of every dense value): the embedding layer iterates over Python
# feature-config objects, so these models do not script; they are deployed traced, in training
# mode. Features are Criteo-like: 26 sparse fields C1..C26 (int64 ids of shape [B]), 13 dense
# fields I1..I13 (float32 of shape [B]), embedding width 16. Dropout layers are kept with p = 0
# (the corpus draws no random numbers in forward), so the graph holds their ops.


class SparseFeat(NamedTuple):
    """A sparse field as feature-config objects describe it."""
    name: str
    vocabulary_size: int
    embedding_dim: int = 16


class DenseFeat(NamedTuple):
    """A dense field of `dimension` values."""
    name: str
    dimension: int = 1


def criteo_like_features(vocab: int = 40, dim: int = 16):
    sparse = [SparseFeat("C%d" % (k + 1), vocab + 2 * k, dim) for k in range(26)]
    dense = [DenseFeat("I%d" % (k + 1)) for k in range(13)]
    return sparse, dense


class FeatureEmbedder(nn.Module):
    """The embedding layer of such libraries: one nn.Embedding per sparse field in an
    nn.ModuleDict keyed by the field's name, looked up on `X[name].long()`; dense values read as
    `X[name].float()`. Returns the per-field embeddings as a list of [B, 1, D] tensors and the dense
    values as a list of [B, 1] tensors, in the feature configs' order."""

    def __init__(self, sparse, dense, dim: Optional[int] = None):
        super().__init__()
        self.sparse = list(sparse)
        self.dense = list(dense)
        self.embedding_dict = nn.ModuleDict({
            f.name: nn.Embedding(f.vocabulary_size, dim or f.embedding_dim) for f in self.sparse})
        for emb in self.embedding_dict.values():
            nn.init.normal_(emb.weight, std=1e-1)

    def forward(self, X: Dict[str, Tensor]):
        sparse_embs = [self.embedding_dict[f.name](X[f.name].long()).unsqueeze(1) for f in self.sparse]
        dense_values = [X[f.name].float().view(-1, f.dimension) for f in self.dense]
        return sparse_embs, dense_values


def _dnn(sizes: List[int], bn: bool = False) -> nn.Sequential:
    layers: List[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers.append(nn.Linear(a, b))
        if bn:
            layers.append(nn.BatchNorm1d(b))
        layers.append(nn.ReLU())
        layers.append(nn.Dropout(0.0))
    return nn.Sequential(*layers)


def _flat_input(sparse_embs: List[Tensor], dense_values: List[Tensor]) -> Tensor:
    return torch.cat([torch.flatten(torch.cat(sparse_embs, 1), 1), torch.cat(dense_values, -1)], -1)


class CtrDeepFM(nn.Module):
    """DeepFM (Guo et al. 2017, arXiv:1703.04247) in the style of public CTR libraries
    (e.g. shenweichen/DeepCTR-Torch's DeepFM over its input_from_feature_columns): a linear part
    (1-wide embeddings per field and a linear over the dense values), an FM over the [B, 26, 16]
    field embeddings and a DNN, each field looked up on its own dict entry."""

    def __init__(self):
        super().__init__()
        sparse, dense = criteo_like_features()
        self.linear_embedder = FeatureEmbedder(sparse, dense, dim=1)
        self.embedder = FeatureEmbedder(sparse, dense)
        self.dense_linear = nn.Linear(len(dense), 1, bias=False)
        self.dnn = _dnn([26 * 16 + 13, 64, 32])
        self.out = nn.Linear(32, 1, bias=False)

    def forward(self, X: Dict[str, Tensor]) -> Tensor:
        linear_embs, dense_values = self.linear_embedder(X)
        linear = torch.sum(torch.cat(linear_embs, -1), -1) + self.dense_linear(torch.cat(dense_values, -1))
        sparse_embs, dense_values = self.embedder(X)
        E = torch.cat(sparse_embs, 1)
        square_of_sum = torch.pow(torch.sum(E, 1, keepdim=True), 2)
        sum_of_square = torch.sum(E * E, 1, keepdim=True)
        fm = 0.5 * torch.sum(square_of_sum - sum_of_square, 2)
        deep = self.out(self.dnn(_flat_input(sparse_embs, dense_values)))
        return torch.sigmoid(linear + fm + deep)


class CtrDCN(nn.Module):
    """DCN (Wang et al. 2017, arXiv:1708.05123) in the style of public CTR libraries: the
    flattened field embeddings and dense values through a 3-layer cross network (vector kernels)
    and a DNN side by side, joined by a linear."""

    def __init__(self, cross_layers: int = 3):
        super().__init__()
        sparse, dense = criteo_like_features()
        self.embedder = FeatureEmbedder(sparse, dense)
        dim = 26 * 16 + 13
        self.kernels = nn.ParameterList([nn.Parameter(torch.randn(dim, 1) * 0.05) for _ in range(cross_layers)])
        self.biases = nn.ParameterList([nn.Parameter(torch.zeros(dim, 1)) for _ in range(cross_layers)])
        self.dnn = _dnn([dim, 64, 32])
        self.out = nn.Linear(dim + 32, 1, bias=False)

    def forward(self, X: Dict[str, Tensor]) -> Tensor:
        sparse_embs, dense_values = self.embedder(X)
        x = _flat_input(sparse_embs, dense_values)
        x0 = x.unsqueeze(2)
        xl = x0
        for i in range(len(self.kernels)):
            xl_w = torch.tensordot(xl, self.kernels[i], dims=([1], [0]))
            xl = torch.matmul(x0, xl_w) + self.biases[i] + xl
        cross = torch.squeeze(xl, 2)
        return torch.sigmoid(self.out(torch.cat([cross, self.dnn(x)], -1)))


class CtrAutoInt(nn.Module):
    """AutoInt (Song et al. 2019, arXiv:1810.11921) in the style of public CTR libraries: every
    dense field gets its own Linear(1, 16, bias=False) on its dict value, joined with the sparse
    embeddings into [B, 39, 16]; one multi-head self-attention interacting layer with a residual,
    and a DNN over the flattened result."""

    def __init__(self, heads: int = 2):
        super().__init__()
        sparse, dense = criteo_like_features()
        self.embedder = FeatureEmbedder(sparse, dense)
        self.dense_names = [f.name for f in dense]
        self.dense_embs = nn.ModuleDict({f.name: nn.Linear(1, 16, bias=False) for f in dense})
        self.heads = heads
        self.w_query = nn.Linear(16, 16, bias=False)
        self.w_key = nn.Linear(16, 16, bias=False)
        self.w_value = nn.Linear(16, 16, bias=False)
        self.w_res = nn.Linear(16, 16, bias=False)
        self.dnn = _dnn([39 * 16, 32])
        self.out = nn.Linear(32, 1)

    def forward(self, X: Dict[str, Tensor]) -> Tensor:
        sparse_embs, dense_values = self.embedder(X)
        dense_embs = [self.dense_embs[name](v).unsqueeze(1) for name, v in zip(self.dense_names, dense_values)]
        E = torch.cat(sparse_embs + dense_embs, 1)  # [B, 39, 16]
        B, F_, D = E.shape
        q = self.w_query(E).view(B, F_, self.heads, D // self.heads).transpose(1, 2)
        k = self.w_key(E).view(B, F_, self.heads, D // self.heads).transpose(1, 2)
        v = self.w_value(E).view(B, F_, self.heads, D // self.heads).transpose(1, 2)
        att = torch.softmax(torch.matmul(q, k.transpose(-1, -2)), -1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(B, F_, D)
        y = torch.relu(y + self.w_res(E))
        return torch.sigmoid(self.out(self.dnn(torch.flatten(y, 1))))


class CtrMMoE(nn.Module):
    """MMoE (Ma et al. 2018, KDD) in the style of public multi-task libraries (e.g. the
    MMoE of torch-rechub or DeepCTR-Torch): experts that are MLPs with BatchNorm, ReLU and
    Dropout, one softmax gate per task, the per-task gated sum of the experts and a tower per
    task, over the shared field embeddings and dense values."""

    def __init__(self, num_experts: int = 4, tasks: int = 2):
        super().__init__()
        sparse, dense = criteo_like_features()
        self.embedder = FeatureEmbedder(sparse, dense)
        dim = 26 * 16 + 13
        self.experts = nn.ModuleList([_dnn([dim, 32, 16], bn=True) for _ in range(num_experts)])
        self.gates = nn.ModuleList([nn.Sequential(nn.Linear(dim, num_experts), nn.Softmax(dim=1))
                                    for _ in range(tasks)])
        self.towers = nn.ModuleList([nn.Sequential(_dnn([16, 8]), nn.Linear(8, 1)) for _ in range(tasks)])

    def forward(self, X: Dict[str, Tensor]) -> List[Tensor]:
        sparse_embs, dense_values = self.embedder(X)
        x = _flat_input(sparse_embs, dense_values)
        expert_outs = torch.stack([e(x) for e in self.experts], 1)  # [B, E, 16]
        outs: List[Tensor] = []
        for gate, tower in zip(self.gates, self.towers):
            g = gate(x).unsqueeze(-1)  # [B, E, 1]
            outs.append(torch.sigmoid(tower(torch.sum(g * expert_outs, 1))))
        return outs


class CtrESMM(nn.Module):
    """ESMM (Ma et al. 2018, arXiv:1804.07931) in the style of public multi-task libraries: CTR
    and CVR towers over shared embeddings; pCTCVR = pCTR * pCVR. The batch size is read from a
    lookup's shape, as such code often does."""

    def __init__(self):
        super().__init__()
        sparse, dense = criteo_like_features()
        self.embedder = FeatureEmbedder(sparse, dense)
        self.first = sparse[0].name
        dim = 26 * 16 + 13
        self.ctr = nn.Sequential(_dnn([dim, 32]), nn.Linear(32, 1))
        self.cvr = nn.Sequential(_dnn([dim, 32]), nn.Linear(32, 1))

    def forward(self, X: Dict[str, Tensor]) -> Tuple[Tensor, Tensor]:
        batch = self.embedder.embedding_dict[self.first](X[self.first].long()).shape[0]
        sparse_embs, dense_values = self.embedder(X)
        x = _flat_input(sparse_embs, dense_values).view(batch, -1)
        p_ctr = torch.sigmoid(self.ctr(x))
        p_cvr = torch.sigmoid(self.cvr(x))
        return p_ctr, p_ctr * p_cvr


def _ctr_args(m: nn.Module, batch: int):
    embedder: FeatureEmbedder = m.embedder
    X: Dict[str, Tensor] = {}
    for f in embedder.sparse:
        X[f.name] = torch.randint(0, f.vocabulary_size, (batch,), dtype=torch.int64)
    for f in embedder.dense:
        X[f.name] = torch.rand(batch)
    return (X,)


def _seeded(seed: int, make_module, make_args, traceable: bool, scriptable: bool = True):
    def build(batch: int):
        torch.manual_seed(seed)
        module = make_module()
        torch.manual_seed(seed + 1)
        args = make_args(module, batch)
        return module, args, traceable, scriptable
    return build


def _dlrm_args(m: DLRM, batch: int):
    indices: List[Tensor] = []
    offsets: List[Tensor] = []
    for emb in m.emb_l:
        idx, off = _bags(batch, emb.num_embeddings)
        indices.append(idx)
        offsets.append(off)
    return (_dense(batch, 13), indices, offsets)


def _vocab(embs: nn.ModuleList) -> List[int]:
    return [e.num_embeddings for e in embs]


def _din_args(m: DIN, batch: int, steps: int = 10):
    lengths = torch.randint(1, steps + 1, (batch,))
    mask = (torch.arange(steps).unsqueeze(0) < lengths.unsqueeze(1)).float()
    n = m.item_emb.num_embeddings
    return (_dense(batch, 8), torch.randint(0, n, (batch,), dtype=torch.int64),
            torch.randint(0, n, (batch, steps), dtype=torch.int64), mask)


def _two_tower_args(m: TwoTower, batch: int):
    return (_ids(batch, _vocab(m.user_tower.embs)), _dense(batch, 8),
            _ids(batch, _vocab(m.item_tower.embs)), _dense(batch, 6))


def _sparse_dict_args(m: SparseDict, batch: int, hot: int = 3):
    return (_dense(batch, 6),
            {k: torch.randint(0, m.embs[k].num_embeddings, (batch, hot), dtype=torch.int64)
             for k in m.keys})


def _youtube_dnn_args(m: YouTubeDNN, batch: int, length: int = 8):
    history = torch.stack([torch.randint(0, e.num_embeddings, (batch, length), dtype=torch.int64)
                           for e in m.seq_embs], 1)
    return (history, torch.randint(0, m.geo.num_embeddings, (batch,), dtype=torch.int64),
            _dense(batch, 3))


def _gated_bags_args(m: GatedBags, batch: int):
    indices: List[Tensor] = []
    offsets: List[Tensor] = []
    for field in m.fields:
        idx, off = _bags(batch, field.bag.num_embeddings)
        indices.append(idx)
        offsets.append(off)
    return (indices, offsets)


def _weighted_features_args(m: WeightedFeatures, batch: int, length: int = 4):
    ids = torch.stack([torch.randint(0, e.num_embeddings, (batch, length), dtype=torch.int64)
                       for e in m.embs], 1)
    return (_dense(batch, 4), ids, torch.rand(batch, len(m.embs), length))


def _dict_args(m: DictInput, batch: int):
    return ({k: _dense(batch, m.proj[k].in_features) for k in m.keys},)


def _dlrm_criteo_args(m: DLRMCriteo, batch: int):
    """One index per bag: lS_i[k] holds B indices into table k, lS_o[k] = arange(B)."""
    lS_i = torch.stack([torch.randint(0, emb.num_embeddings, (batch,), dtype=torch.int64)
                        for emb in m.emb_l])
    lS_o = torch.arange(batch, dtype=torch.int64).repeat(len(m.emb_l), 1)
    return (_dense(batch, 13), lS_o, lS_i)


def _seed_scale_args(m: SeedScale, batch: int):
    ids: Dict[str, Tensor] = {}
    offsets: Dict[str, Tensor] = {}
    weights: Dict[str, Tensor] = {}
    for f in m.features:
        ids[f.name], offsets[f.name] = _bags(batch, f.rows)
        if f.weighted:
            weights[f.name] = torch.rand(ids[f.name].numel())
    return (_dense(batch, len(m.towers) * m.tower_in), ids, offsets, weights)


REGISTRY = {
    "dlrm": _seeded(101, DLRM, _dlrm_args, True),
    "dlrm_sparse": _seeded(125, lambda: DLRM(sparse_grads=True), _dlrm_args, True),
    "gated_bags": _seeded(126, GatedBags, _gated_bags_args, True),
    "dcn_v2": _seeded(102, DCNv2, lambda m, b: (_ids(b, _vocab(m.embs)), _dense(b, 13)), True),
    "deepfm": _seeded(103, DeepFM, lambda m, b: (_ids(b, _vocab(m.embs)),), True),
    "wide_deep": _seeded(104, WideDeep, lambda m, b: (_dense(b, 13), _ids(b, _vocab(m.embs))), True),
    "mmoe": _seeded(105, MMoE, lambda m, b: (_dense(b, 32),), True),
    "ple": _seeded(106, PLE, lambda m, b: (_dense(b, 32),), True),
    "two_tower": _seeded(107, TwoTower, _two_tower_args, True),
    "autoint": _seeded(108, AutoInt, lambda m, b: (_ids(b, _vocab(m.embs)),), True),
    "din": _seeded(109, DIN, _din_args, True),
    "towers": _seeded(110, Towers, lambda m, b: (_dense(b, 64 * 8),), True),
    "wide": _seeded(111, Wide, lambda m, b: (_dense(b, 256 * 4),), True),
    "highway": _seeded(112, Highway, lambda m, b: (_dense(b, 32),), True),
    "transformer": _seeded(113, TransformerSeq, lambda m, b: (torch.randn(b, 10, 32),), True),
    "list_input": _seeded(114, ListInput, lambda m, b: ([_dense(b, 8) for _ in range(16)],), True),
    "dict_input": _seeded(115, DictInput, _dict_args, True),
    # Tracing would record only the branch the sample takes.
    "data_dependent_if": _seeded(116, DataDependentIf, lambda m, b: (_dense(b, 32),), False),
    "batchnorm": _seeded(117, BatchNormTowers, lambda m, b: (_dense(b, 64),), True),
    "functional": _seeded(118, Functional, lambda m, b: (_dense(b, 48),), True),
    "feature_groups": _seeded(121, FeatureGroups, lambda m, b: (_dense(b, 76),), True),
    # Tracing with mask=None would drop the mask; tracing with a mask would make it required.
    "optional_input": _seeded(119, OptionalInput, lambda m, b: (_dense(b, 48), None), False),
    "tuple_output": _seeded(120, TupleOutput, lambda m, b: (_dense(b, 32),), True),
    "sparse_dict": _seeded(122, SparseDict, _sparse_dict_args, True),
    "youtube_dnn": _seeded(123, YouTubeDNN, _youtube_dnn_args, True),
    "weighted_features": _seeded(124, WeightedFeatures, _weighted_features_args, True),
    "dlrm_criteo": _seeded(127, lambda: DLRMCriteo(criteo_rows(PRODUCTION)), _dlrm_criteo_args,
                           True),
    "seed_scale": _seeded(128, lambda: SeedScale(production=PRODUCTION), _seed_scale_args, True),
    "deepfm_columns": _seeded(129, DeepFMColumns, _deepfm_columns_args, True),
    # Public-library style (feature-config objects): traced only, as deployed.
    "ctr_deepfm": _seeded(130, CtrDeepFM, _ctr_args, True, scriptable=False),
    "ctr_dcn": _seeded(131, CtrDCN, _ctr_args, True, scriptable=False),
    "ctr_autoint": _seeded(132, CtrAutoInt, _ctr_args, True, scriptable=False),
    "ctr_mmoe": _seeded(133, CtrMMoE, _ctr_args, True, scriptable=False),
    "ctr_esmm": _seeded(134, CtrESMM, _ctr_args, True, scriptable=False),
}


# --------------------------------------------------------------------------------------------


def _flatten(out) -> List[Tensor]:
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        res: List[Tensor] = []
        for o in out:
            res.extend(_flatten(o))
        return res
    if isinstance(out, dict):
        res = []
        for k in sorted(out):
            res.extend(_flatten(out[k]))
        return res
    raise TypeError("unexpected output type %s" % type(out))


def _same(a, b) -> bool:
    xs, ys = _flatten(a), _flatten(b)
    return len(xs) == len(ys) and all(
        x.shape == y.shape and torch.allclose(x, y, rtol=1e-5, atol=1e-6) for x, y in zip(xs, ys))


def _restore(script_module, state: Dict[str, Tensor]) -> None:
    """Resets parameters and buffers (BatchNorm running stats change when a model runs in
    training mode, e.g. while tracing) to the freshly built values."""
    with torch.no_grad():
        for name, t in script_module.state_dict().items():
            t.copy_(state[name])


def _kb(path: str) -> str:
    return "%.1f" % (os.path.getsize(path) / 1024.0)


def write_archives(name: str, module: nn.Module, args, model_dir: str, traceable: bool,
                   files: List[str], trace_strict: bool = True, scriptable: bool = True) -> None:
    """Writes model_dir/scripted.pt and, where tracing keeps the semantics, traced.pt (else removes
    a stale one), each checked against the eager module on `args` (copies: a module may write to
    its inputs) and saved with the freshly built parameters and buffers. Appends to `files`."""
    state = copy.deepcopy(module.state_dict())
    with torch.no_grad():
        expected = copy.deepcopy(module)(*copy.deepcopy(args))
    if not scriptable:  # traced only (the model iterates over Python objects in forward)
        _write_traced(name, module, args, model_dir, expected, state, files, trace_strict)
        return
    _save_checked(name, "scripted", torch.jit.script(copy.deepcopy(module)), args, expected, state,
                  model_dir, files)
    traced_path = os.path.join(model_dir, "traced.pt")
    if traceable:
        _write_traced(name, module, args, model_dir, expected, state, files, trace_strict)
    elif os.path.exists(traced_path):
        os.remove(traced_path)


def _write_traced(name: str, module: nn.Module, args, model_dir: str, expected, state,
                  files: List[str], trace_strict: bool) -> None:
    """traced.pt, checked against the eager module, with the freshly built state."""
    traced = torch.jit.trace(copy.deepcopy(module), copy.deepcopy(tuple(args)), strict=trace_strict)
    _save_checked(name, "traced", traced, args, expected, state, model_dir, files)


def _save_checked(name: str, kind: str, compiled, args, expected, state, model_dir: str,
                  files: List[str]) -> None:
    """model_dir/<kind>.pt: `compiled` checked against the eager module's output on `args`, then
    saved with the freshly built parameters and buffers."""
    with torch.no_grad():
        got = compiled(*copy.deepcopy(args))
    if not _same(expected, got):
        raise RuntimeError("%s: %s output differs from eager" % (name, kind))
    _restore(compiled, state)
    path = os.path.join(model_dir, kind + ".pt")
    torch.jit.save(compiled, path)
    files.append("%s.pt %s KB" % (kind, _kb(path)))


def make_one(name: str, out_dir: str, batch: int, inputs_only: bool) -> None:
    module, args, traceable, scriptable = REGISTRY[name](batch)
    model_dir = os.path.join(out_dir, name)
    os.makedirs(model_dir, exist_ok=True)
    inputs_path = os.path.join(model_dir, "inputs.pt")
    torch.save(tuple(args), inputs_path)
    files = ["inputs.pt %s KB" % _kb(inputs_path)]
    if not inputs_only:
        write_archives(name, module, args, model_dir, traceable, files,
                       trace_strict=scriptable, scriptable=scriptable)
    print("%-18s %s" % (name, ", ".join(files)))


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--batch", type=int, default=16, help="batch size of inputs.pt")
    parser.add_argument("--models", default="", help="comma-separated subset (default: all)")
    parser.add_argument("--inputs_only", action="store_true", help="write only inputs.pt")
    parser.add_argument("--production", action="store_true",
                        help="production-sized tables for dlrm_criteo (Criteo counts capped at "
                             "100k) and seed_scale (1k-96k rows): for benchmarks, not for "
                             "testdata/models")
    opts = parser.parse_args(argv)
    names = [n for n in opts.models.split(",") if n] or list(REGISTRY)
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        print("unknown model(s): %s; known: %s" % (", ".join(unknown), ", ".join(REGISTRY)),
              file=sys.stderr)
        return 2
    if opts.batch < 2:
        print("--batch must be >= 2 (BatchNorm in training mode needs two rows)", file=sys.stderr)
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.abspath(opts.out)
    if opts.production and (out == here or out.startswith(here + os.sep)):
        print("--production archives are for benchmarks: write them outside %s" % here,
              file=sys.stderr)
        return 2
    global PRODUCTION
    PRODUCTION = opts.production
    torch.set_num_threads(1)
    print("torch %s -> %s (batch %d%s)" % (torch.__version__, opts.out, opts.batch,
                                          ", production tables" if PRODUCTION else ""))
    for name in names:
        make_one(name, opts.out, opts.batch, opts.inputs_only)
    return 0


def run_with_pinned_hash_seed(main_fn, script: str) -> None:
    """Runs main_fn(argv) and exits with its code. TorchScript writes a module's __constants__ in
    set order, which depends on Python's string hash seed: the seed is fixed (by re-running
    `script` once) so that archives are byte-identical from run to run, not only equal in
    weights."""
    if os.environ.get("PYTHONHASHSEED") != "0":
        env = dict(os.environ, PYTHONHASHSEED="0")
        os.execve(sys.executable, [sys.executable, os.path.abspath(script)] + sys.argv[1:], env)
    sys.exit(main_fn(sys.argv[1:]))


if __name__ == "__main__":
    run_with_pinned_hash_seed(main, __file__)
