// models.cc — the models of models.h, as generated TorchScript source (also valid Python).
#include "bench/models.h"

#include <cmath>
#include <stdexcept>

namespace sentier {
namespace bench {
namespace {

std::string Num(int i) { return std::to_string(i); }

// "a0, a1, ..., a{n-1}"
std::string List(const std::string& prefix, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + prefix + Num(i);
  return s;
}

// Linear weights scaled by 1/sqrt(fan_in) (activations keep their scale through deep stacks).
at::Tensor Weight(at::Generator& gen, int64_t out, int64_t in) {
  return at::randn({out, in}, gen) * (1.0 / std::sqrt(static_cast<double>(in)));
}
at::Tensor Bias(at::Generator& gen, int64_t n) { return at::randn({n}, gen) * 0.01; }

void AddLinear(torch::jit::Module& m, at::Generator& gen, const std::string& w,
               const std::string& b, int64_t out, int64_t in) {
  m.register_parameter(w, Weight(gen, out, in), false);
  m.register_parameter(b, Bias(gen, out), false);
}

// ---------------------------------------------------------------------------------------------
// (a) DLRM-like: 13 dense features of width 16, each through its own tower Linear(16,32) ->
// relu; 8 sparse features looked up in tables of 50k x 32 with 4 ids per row (an embedding bag
// as embedding + sum); pairwise-dot interaction (bmm) of the 21 feature vectors; top MLP.
constexpr int kDlrmDense = 13, kDlrmSparse = 8, kDlrmRows = 50000, kDlrmIds = 4, kDim = 32;

std::string DlrmSource() {
  std::string s = "def forward(self, dense, " + List("idx", kDlrmSparse) + "):\n";
  s += "    ds = torch.split(dense, 16, 1)\n";
  for (int i = 0; i < kDlrmDense; ++i) {
    s += "    t" + Num(i) + " = torch.relu(torch.linear(ds[" + Num(i) + "], self.tw" + Num(i) +
         ", self.tb" + Num(i) + "))\n";
  }
  for (int j = 0; j < kDlrmSparse; ++j) {
    s += "    e" + Num(j) + " = torch.embedding(self.emb" + Num(j) + ", idx" + Num(j) + ").sum(1)\n";
  }
  s += "    feats = torch.stack([" + List("t", kDlrmDense) + ", " + List("e", kDlrmSparse) + "], 1)\n";
  s += "    inter = torch.bmm(feats, feats.transpose(1, 2)).flatten(1)\n";
  s += "    z = torch.cat([inter, " + List("t", kDlrmDense) + "], 1)\n";
  s += "    z = torch.relu(torch.linear(z, self.w1, self.b1))\n";
  s += "    z = torch.relu(torch.linear(z, self.w2, self.b2))\n";
  s += "    return torch.sigmoid(torch.linear(z, self.w3, self.b3))\n";
  return s;
}

torch::jit::Module MakeDlrm(at::Generator& gen) {
  torch::jit::Module m("BenchDlrm");
  for (int i = 0; i < kDlrmDense; ++i) AddLinear(m, gen, "tw" + Num(i), "tb" + Num(i), kDim, 16);
  for (int j = 0; j < kDlrmSparse; ++j) {
    m.register_parameter("emb" + Num(j), at::randn({kDlrmRows, kDim}, gen) * 0.1, false);
  }
  const int64_t f = kDlrmDense + kDlrmSparse;
  AddLinear(m, gen, "w1", "b1", 512, f * f + kDlrmDense * kDim);
  AddLinear(m, gen, "w2", "b2", 256, 512);
  AddLinear(m, gen, "w3", "b3", 1, 256);
  m.define(DlrmSource());
  return m;
}

// Dense [B, 16 * dense] floats plus `sparse` Long index tensors [B, ids] in [0, rows).
std::vector<c10::IValue> RecInputs(uint64_t seed, int dense, int sparse, int64_t rows, int ids,
                                   int64_t batch) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<c10::IValue> in = {at::randn({batch, 16 * dense}, gen)};
  for (int j = 0; j < sparse; ++j) {
    in.push_back(at::randint(0, rows, {batch, ids}, gen, at::TensorOptions().dtype(at::kLong)));
  }
  return in;
}

// ---------------------------------------------------------------------------------------------
// (b) DCN-like (DCN-v2 full-rank cross): 13 per-feature towers Linear(16,32) -> relu and 4
// sparse lookups give x0 [B, 544]; 3 cross layers x_{l+1} = x0 * (x_l @ W_l + b_l) + x_l beside
// a deep MLP (544 -> 512 -> 256); cat -> Linear -> sigmoid.
constexpr int kDcnDense = 13, kDcnSparse = 4, kDcnRows = 50000, kDcnIds = 4, kDcnCross = 3;
constexpr int kDcnWidth = kDcnDense * kDim + kDcnSparse * kDim;  // 544

std::string DcnSource() {
  std::string s = "def forward(self, dense, " + List("idx", kDcnSparse) + "):\n";
  s += "    ds = torch.split(dense, 16, 1)\n";
  for (int i = 0; i < kDcnDense; ++i) {
    s += "    t" + Num(i) + " = torch.relu(torch.linear(ds[" + Num(i) + "], self.tw" + Num(i) +
         ", self.tb" + Num(i) + "))\n";
  }
  for (int j = 0; j < kDcnSparse; ++j) {
    s += "    e" + Num(j) + " = torch.embedding(self.emb" + Num(j) + ", idx" + Num(j) + ").sum(1)\n";
  }
  s += "    x0 = torch.cat([" + List("t", kDcnDense) + ", " + List("e", kDcnSparse) + "], 1)\n";
  s += "    xl = x0\n";
  for (int l = 0; l < kDcnCross; ++l) {
    s += "    xl = x0 * (torch.matmul(xl, self.cw" + Num(l) + ") + self.cb" + Num(l) + ") + xl\n";
  }
  s += "    d = torch.relu(torch.linear(x0, self.dw0, self.db0))\n";
  s += "    d = torch.relu(torch.linear(d, self.dw1, self.db1))\n";
  s += "    z = torch.cat([xl, d], 1)\n";
  s += "    return torch.sigmoid(torch.linear(z, self.ow, self.ob))\n";
  return s;
}

torch::jit::Module MakeDcn(at::Generator& gen) {
  torch::jit::Module m("BenchDcn");
  for (int i = 0; i < kDcnDense; ++i) AddLinear(m, gen, "tw" + Num(i), "tb" + Num(i), kDim, 16);
  for (int j = 0; j < kDcnSparse; ++j) {
    m.register_parameter("emb" + Num(j), at::randn({kDcnRows, kDim}, gen) * 0.1, false);
  }
  for (int l = 0; l < kDcnCross; ++l) {
    // matmul(x, W): W is [in, out]; small, so the cross terms stay near 1.
    m.register_parameter("cw" + Num(l), at::randn({kDcnWidth, kDcnWidth}, gen) * (0.1 / std::sqrt(double(kDcnWidth))), false);
    m.register_parameter("cb" + Num(l), 1.0 + Bias(gen, kDcnWidth), false);
  }
  AddLinear(m, gen, "dw0", "db0", 512, kDcnWidth);
  AddLinear(m, gen, "dw1", "db1", 256, 512);
  AddLinear(m, gen, "ow", "ob", 1, kDcnWidth + 256);
  m.define(DcnSource());
  return m;
}

// ---------------------------------------------------------------------------------------------
// (c) MMoE: 8 identical experts (512 -> 256 -> relu -> 128 -> relu) on the same input, 3 tasks,
// each with a softmax gate over the experts and a tower (128 -> 64 -> relu -> 1 -> sigmoid).
constexpr int kExperts = 8, kTasks = 3, kMmoeIn = 512;

std::string MmoeSource() {
  std::string s = "def forward(self, x):\n";
  for (int i = 0; i < kExperts; ++i) {
    std::string k = Num(i);
    s += "    h" + k + " = torch.relu(torch.linear(x, self.ew1_" + k + ", self.eb1_" + k + "))\n";
    s += "    x" + k + " = torch.relu(torch.linear(h" + k + ", self.ew2_" + k + ", self.eb2_" + k + "))\n";
  }
  s += "    experts = torch.stack([" + List("x", kExperts) + "], 1)\n";
  for (int t = 0; t < kTasks; ++t) {
    std::string k = Num(t);
    s += "    g" + k + " = torch.softmax(torch.linear(x, self.gw" + k + ", self.gb" + k + "), 1)\n";
    s += "    m" + k + " = (g" + k + ".unsqueeze(2) * experts).sum(1)\n";
    s += "    u" + k + " = torch.relu(torch.linear(m" + k + ", self.tw1_" + k + ", self.tb1_" + k + "))\n";
    s += "    o" + k + " = torch.sigmoid(torch.linear(u" + k + ", self.tw2_" + k + ", self.tb2_" + k + "))\n";
  }
  s += "    return " + List("o", kTasks) + "\n";
  return s;
}

torch::jit::Module MakeMmoe(at::Generator& gen) {
  torch::jit::Module m("BenchMmoe");
  for (int i = 0; i < kExperts; ++i) {
    AddLinear(m, gen, "ew1_" + Num(i), "eb1_" + Num(i), 256, kMmoeIn);
    AddLinear(m, gen, "ew2_" + Num(i), "eb2_" + Num(i), 128, 256);
  }
  for (int t = 0; t < kTasks; ++t) {
    AddLinear(m, gen, "gw" + Num(t), "gb" + Num(t), kExperts, kMmoeIn);
    AddLinear(m, gen, "tw1_" + Num(t), "tb1_" + Num(t), 64, 128);
    AddLinear(m, gen, "tw2_" + Num(t), "tb2_" + Num(t), 1, 64);
  }
  m.define(MmoeSource());
  return m;
}

// ---------------------------------------------------------------------------------------------
// (d) Highway self-gating, 20 layers, d = 256 (Optimus' test shape at a realistic width).
constexpr int kHighwayLayers = 20, kHighwayDim = 256;

std::string HighwaySource() {
  std::string s = "def forward(self, x):\n";
  for (int i = 0; i < kHighwayLayers; ++i) {
    std::string k = Num(i);
    s += "    g = torch.sigmoid(torch.linear(x, self.wg" + k + ", self.bg" + k + "))\n";
    s += "    x = g * torch.relu(torch.linear(x, self.wh" + k + ", self.bh" + k + ")) + (1.0 - g) * x\n";
  }
  s += "    return x\n";
  return s;
}

torch::jit::Module MakeHighway(at::Generator& gen) {
  torch::jit::Module m("BenchHighway");
  for (int i = 0; i < kHighwayLayers; ++i) {
    AddLinear(m, gen, "wg" + Num(i), "bg" + Num(i), kHighwayDim, kHighwayDim);
    AddLinear(m, gen, "wh" + Num(i), "bh" + Num(i), kHighwayDim, kHighwayDim);
  }
  m.define(HighwaySource());
  return m;
}

// ---------------------------------------------------------------------------------------------
// (e) Long split/cat chains over feature groups: x [B, 1024] in 8 groups of 128; 4 stages of
// split -> per-group Linear(128,128) -> split [64, 64] -> relu / sigmoid -> cat, then cat of the
// groups, split in 4 with a nested split of the first piece, glued back, residual add.
constexpr int kChainStages = 4, kChainGroups = 8, kChainGroup = 128;
constexpr int kChainWidth = kChainGroups * kChainGroup;  // 1024

std::string SplitCatChainsSource() {
  std::string s = "def forward(self, x):\n    h = x\n";
  for (int st = 0; st < kChainStages; ++st) {
    std::string S = Num(st);
    s += "    gs = torch.split(h, " + Num(kChainGroup) + ", 1)\n";
    for (int g = 0; g < kChainGroups; ++g) {
      std::string k = S + "_" + Num(g);
      s += "    y = torch.linear(gs[" + Num(g) + "], self.sw" + k + ", self.sb" + k + ")\n";
      s += "    a, b = torch.split(y, [64, 64], 1)\n";
      s += "    p" + Num(g) + " = torch.cat([torch.relu(a), torch.sigmoid(b)], 1)\n";
    }
    s += "    c = torch.cat([" + List("p", kChainGroups) + "], 1)\n";
    s += "    q = torch.split(c, 256, 1)\n";
    s += "    r = torch.split(q[0], [128, 128], 1)\n";
    s += "    h = torch.cat([r[0], r[1], q[1], q[2], q[3]], 1) + h\n";
  }
  s += "    return torch.layer_norm(h, [" + Num(kChainWidth) + "], self.ln_g, self.ln_b, 1e-5)\n";
  return s;
}

torch::jit::Module MakeSplitCatChains(at::Generator& gen) {
  torch::jit::Module m("BenchSplitCatChains");
  for (int st = 0; st < kChainStages; ++st) {
    for (int g = 0; g < kChainGroups; ++g) {
      std::string k = Num(st) + "_" + Num(g);
      m.register_parameter("sw" + k, Weight(gen, kChainGroup, kChainGroup) * 0.5, false);
      m.register_parameter("sb" + k, Bias(gen, kChainGroup), false);
    }
  }
  m.register_parameter("ln_g", 1.0 + Bias(gen, kChainWidth), false);
  m.register_parameter("ln_b", Bias(gen, kChainWidth), false);
  m.define(SplitCatChainsSource());
  return m;
}

// ---------------------------------------------------------------------------------------------
// (f) Illustrative wide model: 256 tiny parallel branches (Linear(8,8) -> relu -> split [4, 4]
// -> cat) over an input of 256 x 8 features, all concatenated, then Linear(2048, 64).
constexpr int kWideBranches = 256, kWidePiece = 8;

std::string WideBranchesSource() {
  std::string s = "def forward(self, x):\n";
  s += "    xs = torch.split(x, " + Num(kWidePiece) + ", 1)\n";
  for (int i = 0; i < kWideBranches; ++i) {
    std::string k = Num(i);
    s += "    u, v = torch.split(torch.relu(torch.linear(xs[" + k + "], self.w" + k + ", self.b" + k + ")), [4, 4], 1)\n";
    s += "    z" + k + " = torch.cat([u, v], 1)\n";
  }
  s += "    out = torch.cat([" + List("z", kWideBranches) + "], 1)\n";
  s += "    return torch.linear(out, self.ow, self.ob)\n";
  return s;
}

torch::jit::Module MakeWideBranches(at::Generator& gen) {
  torch::jit::Module m("BenchWideBranches");
  for (int i = 0; i < kWideBranches; ++i) {
    AddLinear(m, gen, "w" + Num(i), "b" + Num(i), kWidePiece, kWidePiece);
  }
  AddLinear(m, gen, "ow", "ob", 64, kWideBranches * kWidePiece);
  m.define(WideBranchesSource());
  return m;
}

std::vector<c10::IValue> DenseInputs(uint64_t seed, int64_t width, int64_t batch) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return {at::randn({batch, width}, gen)};
}

}  // namespace

std::vector<std::string> BenchModelNames() {
  return {"dlrm", "dcn", "mmoe", "highway256", "split_cat_chains", "wide_branches"};
}

std::string BenchModelSource(const std::string& name) {
  if (name == "dlrm") return DlrmSource();
  if (name == "dcn") return DcnSource();
  if (name == "mmoe") return MmoeSource();
  if (name == "highway256") return HighwaySource();
  if (name == "split_cat_chains") return SplitCatChainsSource();
  if (name == "wide_branches") return WideBranchesSource();
  throw std::invalid_argument("unknown bench model '" + name + "'");
}

BenchModel MakeBenchModel(const std::string& name, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed + 1000);
  BenchModel m;
  m.name = name;
  m.source = BenchModelSource(name);
  if (name == "dlrm") {
    m.description = "DLRM-like: 13 dense towers Linear(16,32), 8 tables 50k x 32 (4 ids), bmm interaction, MLP 857-512-256-1";
    m.module = MakeDlrm(gen);
    m.gpu_batch = 4096;
    m.inputs = [](int64_t b) { return RecInputs(31, kDlrmDense, kDlrmSparse, kDlrmRows, kDlrmIds, b); };
  } else if (name == "dcn") {
    m.description = "DCN-v2-like: 13 dense towers, 4 tables 50k x 32, 3 full-rank cross layers (544), deep MLP 512-256";
    m.module = MakeDcn(gen);
    m.gpu_batch = 4096;
    m.inputs = [](int64_t b) { return RecInputs(32, kDcnDense, kDcnSparse, kDcnRows, kDcnIds, b); };
  } else if (name == "mmoe") {
    m.description = "MMoE: 8 experts 512-256-128 on one input, 3 tasks (softmax gate + tower 128-64-1)";
    m.module = MakeMmoe(gen);
    m.gpu_batch = 8192;
    m.inputs = [](int64_t b) { return DenseInputs(33, kMmoeIn, b); };
  } else if (name == "highway256") {
    m.description = "highway self-gating, 20 layers, d = 256";
    m.module = MakeHighway(gen);
    m.gpu_batch = 8192;
    m.inputs = [](int64_t b) { return DenseInputs(34, kHighwayDim, b); };
  } else if (name == "split_cat_chains") {
    m.description = "split/cat chains: 4 stages x 8 groups (Linear(128,128), split, relu/sigmoid, cat), nested splits, residual, LayerNorm(1024)";
    m.module = MakeSplitCatChains(gen);
    m.gpu_batch = 4096;
    m.inputs = [](int64_t b) { return DenseInputs(35, kChainWidth, b); };
  } else if (name == "wide_branches") {
    m.description = "illustrative: 256 branches Linear(8,8) -> relu -> split/cat, cat, Linear(2048,64)";
    m.module = MakeWideBranches(gen);
    m.gpu_batch = 2048;
    m.inputs = [](int64_t b) { return DenseInputs(36, kWideBranches * kWidePiece, b); };
  } else {
    throw std::invalid_argument("unknown bench model '" + name + "'");
  }
  return m;
}

}  // namespace bench
}  // namespace sentier
