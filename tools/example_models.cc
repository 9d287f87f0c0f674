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

}  // namespace

std::vector<std::string> ExampleModelNames() { return {"waste", "towers", "unbind_mix"}; }

ExampleModel MakeExampleModel(const std::string& name, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed + 1);
  ExampleModel m;
  m.name = name;
  if (name == "waste") {
    torch::jit::Module mod("Waste");
    mod.register_parameter("weight", Param(gen, {16, 8}), false);
    mod.register_parameter("bias", Param(gen, {8}), false);
    mod.define(kWasteSource);
    m.module = mod;
    m.inputs = WasteInputs;
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
    m.module = mod;
    m.inputs = TowersInputs;
  } else if (name == "unbind_mix") {
    torch::jit::Module mod("UnbindMix");
    mod.register_parameter("scale", Param(gen, {72}), false);
    mod.define(kUnbindMixSource);
    m.module = mod;
    m.inputs = UnbindMixInputs;
  } else {
    throw std::invalid_argument("unknown example model '" + name + "'");
  }
  return m;
}

}  // namespace sentier
