// example_models.cc — the models of example_models.h, as TorchScript source.
#include "tools/example_models.h"

#include <stdexcept>

namespace sentier {
namespace {

// Scripted code as users write it: a split glued back, a list comprehension over pieces (a
// prim::Loop until unrolled), nested splits indexed with [], and per-column selects.
constexpr char kWasteSource[] = R"TS(
def forward(self, x):
    parts = torch.split(x, 4, 1)
    y = torch.cat(parts, 1)
    acts = [torch.relu(p) for p in torch.split(y, 4, 1)]
    z = torch.cat(acts, 1)
    halves = torch.split(z, [8, 8], 1)
    quarters = torch.split(halves[0], [4, 4], 1)
    w = torch.cat([quarters[0], quarters[1], halves[1]], 1)
    cols = [w[:, i].unsqueeze(1) for i in range(4)]
    head = torch.cat(cols, 1)
    out = torch.matmul(w, self.weight) + self.bias
    return out, head
)TS";

constexpr char kTowerSource[] = R"TS(
def forward(self, x):
    h = torch.relu(torch.linear(x, self.weight, self.bias))
    parts = torch.chunk(h, 2, 1)
    return torch.cat(parts, 1)
)TS";

constexpr char kTowersSource[] = R"TS(
def forward(self, x):
    a, b, c, d = torch.split(x, 8, 1)
    ya = self.t0.forward(a)
    yb = self.t1.forward(b)
    yc = self.t2.forward(c)
    yd = self.t3.forward(d)
    return torch.cat([ya, yb, yc, yd], 1)
)TS";

constexpr char kUnbindMixSource[] = R"TS(
def forward(self, x):
    rows = torch.unbind(x, 1)
    s = torch.stack(rows, 1)
    flat = torch.cat(torch.unbind(s, 1), 1)
    y = torch.cat([flat[:, :], torch.cat([flat, flat], 1)], 1)
    return torch.tanh(y) * self.scale
)TS";

at::Tensor Param(at::Generator& gen, std::vector<int64_t> shape) {
  return at::randn(shape, gen) * 0.1;
}

std::vector<c10::IValue> WasteInputs(int64_t batch) {
  at::Generator gen = at::detail::createCPUGenerator(11);
  return {at::randn({batch, 16}, gen)};
}
std::vector<c10::IValue> TowersInputs(int64_t batch) {
  at::Generator gen = at::detail::createCPUGenerator(12);
  return {at::randn({batch, 32}, gen)};
}
std::vector<c10::IValue> UnbindMixInputs(int64_t batch) {
  at::Generator gen = at::detail::createCPUGenerator(13);
  return {at::randn({batch, 3, 8}, gen)};
}

// ---- Horizontal shapes (generated source; every model is also valid Python). ----

std::string Num(int i) { return std::to_string(i); }

// Feature towers: x [B, 32*n] split per feature; each tower Linear(32,64) -> tanh ->
// LayerNorm(64) -> Linear(64,32) -> relu; outputs concatenated.
std::string TowersSource(int n) {
  std::string s = "def forward(self, x):\n    xs = torch.split(x, 32, 1)\n";
  for (int i = 0; i < n; ++i) {
    std::string k = Num(i);
    s += "    a" + k + " = torch.tanh(torch.linear(xs[" + k + "], self.w1_" + k + ", self.b1_" + k + "))\n";
    s += "    n" + k + " = torch.layer_norm(a" + k + ", [64], self.g_" + k + ", self.be_" + k + ", 1e-5)\n";
    s += "    h" + k + " = torch.relu(torch.linear(n" + k + ", self.w2_" + k + ", self.b2_" + k + "))\n";
  }
  s += "    return torch.cat([";
  for (int i = 0; i < n; ++i) s += (i ? ", h" : "h") + Num(i);
  s += "], 1)\n";
  return s;
}

// The same towers written batched by hand (parameters stacked once, outside the graph).
constexpr char kTowersBatchedSource[] = R"TS(
def forward(self, x):
    n = self.w1.size(0)
    xs = x.view(x.size(0), n, 32).transpose(0, 1)
    a = torch.tanh(torch.baddbmm(self.b1.unsqueeze(1), xs, self.w1.transpose(1, 2)))
    m = torch.layer_norm(a, [64], None, None, 1e-5)
    m = torch.addcmul(self.be.unsqueeze(1), m, self.g.unsqueeze(1))
    h = torch.relu(torch.baddbmm(self.b2.unsqueeze(1), m, self.w2.transpose(1, 2)))
    return h.transpose(0, 1).flatten(1, 2)
)TS";

// Optimus' test shapes.
std::string SplitLinearsSource() {  // split into 5 pieces -> 5 linears(100->50) -> cat -> sin
  std::string s = "def forward(self, x):\n    xs = torch.split(x, 100, 1)\n";
  for (int i = 0; i < 5; ++i) {
    s += "    y" + Num(i) + " = torch.linear(xs[" + Num(i) + "], self.w" + Num(i) + ", self.b" + Num(i) + ")\n";
  }
  s += "    return torch.sin(torch.cat([y0, y1, y2, y3, y4], 1))\n";
  return s;
}

std::string SameInputLinearsSource() {  // 10 linears on one input, twice
  std::string s = "def forward(self, x):\n";
  for (int r = 0; r < 2; ++r) {
    std::string in = r == 0 ? "x" : "z";
    for (int i = 0; i < 10; ++i) {
      s += "    y" + Num(r) + "_" + Num(i) + " = torch.linear(" + in + ", self.w" + Num(r) + "_" + Num(i) + ", self.b" + Num(r) + "_" + Num(i) + ")\n";
    }
    s += std::string("    ") + (r == 0 ? "z" : "out") + " = torch.cat([";
    for (int i = 0; i < 10; ++i) s += (i ? ", y" : "y") + Num(r) + "_" + Num(i);
    s += "], 1)\n";
  }
  s += "    return out\n";
  return s;
}

constexpr char kSplitLayerNormsSource[] = R"TS(
def forward(self, x):
    xs = torch.split(x, 10, 1)
    ys = [torch.layer_norm(xs[0], [10], self.g0, self.b0, 1e-5),
          torch.layer_norm(xs[1], [10], self.g1, self.b1, 1e-5),
          torch.layer_norm(xs[2], [10], self.g2, self.b2, 1e-5),
          torch.layer_norm(xs[3], [10], self.g3, self.b3, 1e-5),
          torch.layer_norm(xs[4], [10], self.g4, self.b4, 1e-5)]
    return torch.cat(ys, 1)
)TS";

constexpr char kSplitPointwiseSource[] = R"TS(
def forward(self, x):
    xs = torch.split(x, 2, 1)
    s = [torch.sigmoid(xs[0]), torch.sigmoid(xs[1]), torch.sigmoid(xs[2]), torch.sigmoid(xs[3])]
    r = [torch.relu(xs[4]), torch.relu(xs[5]), torch.relu(xs[6]), torch.relu(xs[7])]
    a = [torch.add(xs[8], xs[9]), torch.add(xs[10], xs[11]), torch.add(xs[12], xs[13])]
    m = [torch.mul(xs[14], xs[15]), torch.mul(xs[16], xs[17]), torch.mul(xs[18], xs[19])]
    d = [torch.sub(s[0], r[0]), torch.sub(s[1], r[1]), torch.sub(s[2], r[2])]
    q = [torch.div(a[0], 1.5 + s[3]), torch.div(a[1], 1.5 + r[3]), torch.div(a[2], 1.5 + m[0])]
    return torch.cat(d + q + [m[1], m[2]], 1)
)TS";

constexpr char kClampBranchesSource[] = R"TS(
def forward(self, x):
    xs = torch.split(x, 8, 1)
    b = [torch.detach(torch.nan_to_num(torch.clamp(xs[0], -1000.1, 1000.1), 0.0)),
         torch.detach(torch.nan_to_num(torch.clamp(xs[1], -1000.1, 1000.1), 0.0)),
         torch.detach(torch.nan_to_num(torch.clamp(xs[2], -1000.1, 1000.1), 0.0)),
         torch.detach(torch.nan_to_num(torch.clamp(xs[3], -1000.1, 1000.1), 0.0))]
    return torch.stack(b, 0) * self.scale
)TS";

std::string AccumulatedLinearsSource() {  // 10 Linear(10,10) accumulated with +=
  std::string s = "def forward(self, x):\n    acc = torch.zeros_like(x)\n";
  for (int i = 0; i < 10; ++i) {
    s += "    acc += torch.linear(x, self.w" + Num(i) + ", self.b" + Num(i) + ")\n";
  }
  s += "    return acc\n";
  return s;
}

std::string HighwaySource() {  // 20 layers of highway self-gating, d = 16
  std::string s = "def forward(self, x):\n";
  for (int i = 0; i < 20; ++i) {
    std::string k = Num(i);
    s += "    g = torch.sigmoid(torch.linear(x, self.wg" + k + ", self.bg" + k + "))\n";
    s += "    x = g * torch.relu(torch.linear(x, self.wh" + k + ", self.bh" + k + ")) + (1.0 - g) * x\n";
  }
  s += "    return x\n";
  return s;
}

std::vector<c10::IValue> RandInputs(uint64_t seed, std::vector<int64_t> shape, int64_t batch) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  shape.insert(shape.begin(), batch);
  return {at::randn(shape, gen)};
}

}  // namespace

std::vector<std::string> ExampleModelNames() {
  return {"waste",          "towers",           "unbind_mix",       "feature_towers",
          "split_linears",  "same_input_linears", "split_layernorms", "split_pointwise",
          "clamp_branches", "accumulated_linears", "highway"};
}

torch::jit::Module MakeFeatureTowers(int n, uint64_t seed, bool batched) {
  at::Generator gen = at::detail::createCPUGenerator(seed + 100);
  torch::jit::Module mod(batched ? "FeatureTowersBatched" : "FeatureTowers");
  std::vector<at::Tensor> w1, b1, g, be, w2, b2;
  for (int i = 0; i < n; ++i) {
    w1.push_back(Param(gen, {64, 32}));
    b1.push_back(Param(gen, {64}));
    g.push_back(1.0 + Param(gen, {64}));
    be.push_back(Param(gen, {64}));
    w2.push_back(Param(gen, {32, 64}));
    b2.push_back(Param(gen, {32}));
  }
  if (batched) {
    mod.register_parameter("w1", at::stack(w1), false);
    mod.register_parameter("b1", at::stack(b1), false);
    mod.register_parameter("g", at::stack(g), false);
    mod.register_parameter("be", at::stack(be), false);
    mod.register_parameter("w2", at::stack(w2), false);
    mod.register_parameter("b2", at::stack(b2), false);
    mod.define(kTowersBatchedSource);
    return mod;
  }
  for (int i = 0; i < n; ++i) {
    std::string k = Num(i);
    mod.register_parameter("w1_" + k, w1[i], false);
    mod.register_parameter("b1_" + k, b1[i], false);
    mod.register_parameter("g_" + k, g[i], false);
    mod.register_parameter("be_" + k, be[i], false);
    mod.register_parameter("w2_" + k, w2[i], false);
    mod.register_parameter("b2_" + k, b2[i], false);
  }
  mod.define(TowersSource(n));
  return mod;
}

namespace {

// The scripted waste models and the feature towers into `m`; false for other names.
bool MakeSplitCatModel(const std::string& name, uint64_t seed, at::Generator& gen, ExampleModel* m) {
  if (name == "waste") {
    torch::jit::Module mod("Waste");
    mod.register_parameter("weight", Param(gen, {16, 8}), false);
    mod.register_parameter("bias", Param(gen, {8}), false);
    mod.define(kWasteSource);
    m->module = mod;
    m->inputs = WasteInputs;
  } else if (name == "towers") {
    torch::jit::Module mod("Towers");
    for (int i = 0; i < 4; ++i) {
      // One class per tower (distinct names), as four separately scripted modules would be.
      torch::jit::Module tower("Tower" + std::to_string(i));
      tower.register_parameter("weight", Param(gen, {6, 8}), false);
      tower.register_parameter("bias", Param(gen, {6}), false);
      tower.define(kTowerSource);
      mod.register_module("t" + std::to_string(i), tower);
    }
    mod.define(kTowersSource);
    m->module = mod;
    m->inputs = TowersInputs;
  } else if (name == "unbind_mix") {
    torch::jit::Module mod("UnbindMix");
    mod.register_parameter("scale", Param(gen, {72}), false);
    mod.define(kUnbindMixSource);
    m->module = mod;
    m->inputs = UnbindMixInputs;
  } else if (name == "feature_towers") {
    m->module = MakeFeatureTowers(8, seed, /*batched=*/false);
    m->inputs = [](int64_t b) { return RandInputs(21, {8 * 32}, b); };
  } else if (name == "feature_towers_64") {
    // The size of the reference measurement: 64 towers, input [B, 2048].
    m->module = MakeFeatureTowers(64, seed, /*batched=*/false);
    m->inputs = [](int64_t b) { return RandInputs(21, {64 * 32}, b); };
  } else if (name == "feature_towers_64_hand") {
    m->module = MakeFeatureTowers(64, seed, /*batched=*/true);
    m->inputs = [](int64_t b) { return RandInputs(21, {64 * 32}, b); };
  } else {
    return false;
  }
  return true;
}

// The horizontal shapes of Optimus' own tests into `m`; false for other names.
bool MakeHorizontalModel(const std::string& name, at::Generator& gen, ExampleModel* m) {
  if (name == "split_linears") {
    torch::jit::Module mod("SplitLinears");
    for (int i = 0; i < 5; ++i) {
      mod.register_parameter("w" + Num(i), Param(gen, {50, 100}), false);
      mod.register_parameter("b" + Num(i), Param(gen, {50}), false);
    }
    mod.define(SplitLinearsSource());
    m->module = mod;
    m->inputs = [](int64_t b) { return RandInputs(22, {500}, b); };
  } else if (name == "same_input_linears") {
    torch::jit::Module mod("SameInputLinears");
    for (int r = 0; r < 2; ++r) {
      for (int i = 0; i < 10; ++i) {
        std::string k = Num(r) + "_" + Num(i);
        mod.register_parameter("w" + k, Param(gen, {8, r == 0 ? 16 : 80}), false);
        mod.register_parameter("b" + k, Param(gen, {8}), false);
      }
    }
    mod.define(SameInputLinearsSource());
    m->module = mod;
    m->inputs = [](int64_t b) { return RandInputs(23, {16}, b); };
  } else if (name == "split_layernorms") {
    torch::jit::Module mod("SplitLayerNorms");
    for (int i = 0; i < 5; ++i) {
      mod.register_parameter("g" + Num(i), 1.0 + Param(gen, {10}), false);
      mod.register_parameter("b" + Num(i), Param(gen, {10}), false);
    }
    mod.define(kSplitLayerNormsSource);
    m->module = mod;
    m->inputs = [](int64_t b) { return RandInputs(24, {50}, b); };
  } else if (name == "split_pointwise") {
    torch::jit::Module mod("SplitPointwise");
    mod.define(kSplitPointwiseSource);
    m->module = mod;
    m->inputs = [](int64_t b) { return RandInputs(25, {40}, b); };
  } else if (name == "clamp_branches") {
    torch::jit::Module mod("ClampBranches");
    mod.register_parameter("scale", 1.0 + Param(gen, {8}), false);
    mod.define(kClampBranchesSource);
    m->module = mod;
    m->inputs = [](int64_t b) { return RandInputs(26, {32}, b); };
  } else if (name == "accumulated_linears") {
    torch::jit::Module mod("AccumulatedLinears");
    for (int i = 0; i < 10; ++i) {
      mod.register_parameter("w" + Num(i), Param(gen, {10, 10}), false);
      mod.register_parameter("b" + Num(i), Param(gen, {10}), false);
    }
    mod.define(AccumulatedLinearsSource());
    m->module = mod;
    m->inputs = [](int64_t b) { return RandInputs(27, {10}, b); };
  } else if (name == "highway") {
    torch::jit::Module mod("Highway");
    for (int i = 0; i < 20; ++i) {
      for (const char* p : {"wg", "wh"}) mod.register_parameter(p + Num(i), Param(gen, {16, 16}), false);
      for (const char* p : {"bg", "bh"}) mod.register_parameter(p + Num(i), Param(gen, {16}), false);
    }
    mod.define(HighwaySource());
    m->module = mod;
    m->inputs = [](int64_t b) { return RandInputs(28, {16}, b); };
  } else {
    return false;
  }
  return true;
}

}  // namespace

ExampleModel MakeExampleModel(const std::string& name, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed + 1);
  ExampleModel m;
  m.name = name;
  if (!MakeSplitCatModel(name, seed, gen, &m) && !MakeHorizontalModel(name, gen, &m)) {
    throw std::invalid_argument("unknown example model '" + name + "'");
  }
  return m;
}

}  // namespace sentier
