// equivalence_checker_test.cc — correct rewrites pass (fp32 and bf16); planted bugs all fail.
#include "runtime/equivalence_checker.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/version.h>
#include <torch/cuda.h>

#include "absl/strings/str_replace.h"
#include "runtime/progress_deadline.h"
#include "runtime/torch_settings.h"

namespace sentier {
namespace {

// The LibTorch switches every Sentier tool runs with (runtime/torch_settings.h).
const bool kTorchSettings = (ApplyTorchSettings(), true);

constexpr char kReference[] = R"TS(
def forward(self, x):
    a, b = torch.split(x, [8, 8], 1)
    ya = torch.relu(torch.linear(a, self.w0, self.b0))
    yb = torch.relu(torch.linear(b, self.w1, self.b1))
    return torch.cat([ya, yb], 1)
)TS";

// The same computation batched by hand: stacked inputs and weights, one baddbmm.
constexpr char kBatched[] = R"TS(
def forward(self, x):
    a, b = torch.split(x, [8, 8], 1)
    xs = torch.stack([a, b], 0)
    w = torch.stack([self.w0, self.w1], 0).transpose(1, 2)
    bias = torch.stack([self.b0, self.b1], 0).unsqueeze(1)
    y = torch.relu(torch.baddbmm(bias, xs, w))
    return torch.cat([y[0], y[1]], 1)
)TS";

torch::jit::Module Make(const std::string& source) {
  at::Generator gen = at::detail::createCPUGenerator(42);
  torch::jit::Module m("Planted");
  m.register_parameter("w0", at::randn({8, 8}, gen), false);
  m.register_parameter("w1", at::randn({8, 8}, gen), false);
  m.register_parameter("b0", at::randn({8}, gen), false);
  m.register_parameter("b1", at::randn({8}, gen), false);
  m.define(source);
  return m;
}

std::vector<c10::IValue> Samples() {
  at::Generator gen = at::detail::createCPUGenerator(7);
  return {at::randn({32, 16}, gen)};
}

TEST(EquivalenceCheckerTest, CorrectBatchedRewritePassesInFloat32AndBFloat16) {
  for (c10::ScalarType dtype : {c10::kFloat, c10::kBFloat16}) {
    CheckOptions opts;
    opts.dtype = dtype;
    auto r = EquivalenceChecker(opts).Check(Make(kReference), Make(kBatched), Samples());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->equivalent) << c10::toString(dtype) << ": " << r->first_failure;
    EXPECT_GT(r->findings.size(), 10u);  // outputs and 4 parameter + 1 input gradients, 4 trials
  }
}

struct Planted {
  const char* name;
  const char* from;
  const char* to;
  const char* base = kReference;  // the source the bug is planted in
  const char* names = "";         // what the first failure must name (gradient-only bugs)
};

class PlantedBugTest : public ::testing::TestWithParam<Planted> {};

TEST_P(PlantedBugTest, IsRejected) {
  std::string base = GetParam().base;
  std::string bad = absl::StrReplaceAll(base, {{GetParam().from, GetParam().to}});
  ASSERT_NE(bad, base) << "the planted bug changed nothing";
  std::vector<Device> devices = {Device::kCpu};
  if (torch::cuda::is_available()) devices.push_back(Device::kCuda);
  for (Device device : devices) {
    for (c10::ScalarType dtype : {c10::kFloat, c10::kBFloat16}) {
      CheckOptions opts;
      opts.device = device;
      opts.dtype = dtype;
      auto r = EquivalenceChecker(opts).Check(Make(kReference), Make(bad), Samples());
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_FALSE(r->equivalent) << GetParam().name << " on " << DeviceName(device) << ", " << c10::toString(dtype);
      EXPECT_FALSE(r->first_failure.empty());
      EXPECT_NE(r->first_failure.find(GetParam().names), std::string::npos) << r->first_failure;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Bugs, PlantedBugTest,
    ::testing::Values(
        Planted{"swapped_cat_order", "torch.cat([ya, yb], 1)", "torch.cat([yb, ya], 1)"},
        Planted{"off_by_one_section", "a, b = torch.split(x, [8, 8], 1)",
                "a, b = x[:, 1:9], x[:, 8:16]"},
        Planted{"wrong_dim", "torch.cat([ya, yb], 1)", "torch.cat([ya, yb], 0)"},
        Planted{"dropped_bias", "torch.linear(b, self.w1, self.b1)", "torch.linear(b, self.w1, None)"},
        Planted{"transposed_weight", "torch.linear(a, self.w0, self.b0)",
                "torch.linear(a, self.w0.t(), self.b0)"},
        Planted{"wrong_activation", "yb = torch.relu(", "yb = torch.tanh("},
        // Gradient-only bugs: every output is exact, a parameter's gradient is not.
        Planted{"detached_weight", "torch.linear(a, self.w0, self.b0)",
                "torch.linear(a, self.w0.detach(), self.b0)", kReference,
                "grad of param w0 on samples inputs: no gradient in the candidate"},
        Planted{"halved_bias_gradient", "torch.linear(b, self.w1, self.b1)",
                "torch.linear(b, self.w1, self.b1.detach() * 0.5 + self.b1 * 0.5)", kReference,
                "grad of param b1 differs"},
        Planted{"stack_of_detached_weights", "torch.stack([self.w0, self.w1], 0)",
                "torch.stack([self.w0.detach(), self.w1.detach()], 0)", kBatched,
                "grad of param w0"}),
    [](const ::testing::TestParamInfo<Planted>& info) { return std::string(info.param.name); });

// A model that pins float32 itself (`x.float()`, as CTR libraries cast dense values) cannot run
// in float64: its float32 input meets float64 weights. The checker judges it in float32 against
// the reference in float32, never blames the candidate, and still catches every planted bug.
std::string Pinned(const std::string& source) {
  return absl::StrReplaceAll(source, {{"def forward(self, x):\n", "def forward(self, x):\n    x = x.float()\n"}});
}

TEST(EquivalenceCheckerTest, PinnedFloat32IsJudgedInItsOwnDtype) {
  const std::vector<Device> devices = torch::cuda::is_available() ? std::vector<Device>{Device::kCpu, Device::kCuda}
                                                                   : std::vector<Device>{Device::kCpu};
  for (Device device : devices) {
    CheckOptions opts;
    opts.device = device;
    auto same = EquivalenceChecker(opts).Check(Make(Pinned(kReference)), Make(Pinned(kReference)), Samples());
    ASSERT_TRUE(same.ok()) << same.status();
    EXPECT_TRUE(same->equivalent) << same->first_failure;
    EXPECT_NE(same->own_dtype_judgement.find("does not run in float64"), std::string::npos)
        << same->own_dtype_judgement;
    auto batched = EquivalenceChecker(opts).Check(Make(Pinned(kReference)), Make(Pinned(kBatched)), Samples());
    ASSERT_TRUE(batched.ok()) << batched.status();
    EXPECT_TRUE(batched->equivalent) << batched->first_failure;
  }
  // A model that runs in float64 keeps the float64-referenced judgement.
  auto plain = EquivalenceChecker(CheckOptions()).Check(Make(kReference), Make(kBatched), Samples());
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->own_dtype_judgement.empty());
}

class PinnedPlantedBugTest : public ::testing::TestWithParam<Planted> {};

TEST_P(PinnedPlantedBugTest, IsRejectedInTheModelsOwnDtype) {
  std::string base = Pinned(GetParam().base);
  std::string bad = absl::StrReplaceAll(base, {{GetParam().from, GetParam().to}});
  ASSERT_NE(bad, base) << "the planted bug changed nothing";
  auto r = EquivalenceChecker(CheckOptions()).Check(Make(base), Make(bad), Samples());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->own_dtype_judgement.empty());
  EXPECT_FALSE(r->equivalent) << GetParam().name;
  EXPECT_NE(r->first_failure.find(GetParam().names), std::string::npos) << r->first_failure;
  EXPECT_EQ(r->first_failure.find("candidate run"), std::string::npos) << r->first_failure;
}

INSTANTIATE_TEST_SUITE_P(
    Bugs, PinnedPlantedBugTest,
    ::testing::Values(
        Planted{"swapped_cat_order", "torch.cat([ya, yb], 1)", "torch.cat([yb, ya], 1)"},
        Planted{"dropped_bias", "torch.linear(b, self.w1, self.b1)", "torch.linear(b, self.w1, None)"},
        Planted{"wrong_activation", "yb = torch.relu(", "yb = torch.tanh("},
        Planted{"slightly_scaled_output", "return torch.cat([ya, yb], 1)", "return torch.cat([ya, yb * 1.001], 1)"},
        Planted{"detached_weight", "torch.linear(a, self.w0, self.b0)",
                "torch.linear(a, self.w0.detach(), self.b0)", kReference,
                "grad of param w0 on samples inputs: no gradient in the candidate"},
        Planted{"halved_bias_gradient", "torch.linear(b, self.w1, self.b1)",
                "torch.linear(b, self.w1, self.b1.detach() * 0.5 + self.b1 * 0.5)", kReference,
                "grad of param b1 differs"},
        Planted{"stack_of_detached_weights", "torch.stack([self.w0, self.w1], 0)",
                "torch.stack([self.w0.detach(), self.w1.detach()], 0)", kBatched, "grad of param w0"}),
    [](const ::testing::TestParamInfo<Planted>& info) { return std::string(info.param.name); });

// CUDA: reordered reductions of cuBLAS (bmm vs mm) must pass; a planted bug must still fail.
TEST(EquivalenceCheckerTest, CudaBatchedRewritePassesAndPlantedBugFails) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: CUDA test skipped";
  for (c10::ScalarType dtype : {c10::kFloat, c10::kBFloat16}) {
    CheckOptions opts;
    opts.device = Device::kCuda;
    opts.dtype = dtype;
    auto r = EquivalenceChecker(opts).Check(Make(kReference), Make(kBatched), Samples());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->equivalent) << c10::toString(dtype) << ": " << r->first_failure;
    std::string bad = absl::StrReplaceAll(kReference, {{"torch.cat([ya, yb], 1)", "torch.cat([yb, ya], 1)"}});
    auto b = EquivalenceChecker(opts).Check(Make(kReference), Make(bad), Samples());
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_FALSE(b->equivalent) << c10::toString(dtype);
  }
}

// gelu after a transpose: its gradient arrives non-contiguous, which LibTorch 1.13.1's oneDNN
// gelu_backward misreads (garbage that differs between runs). The checker must judge the model
// against itself as equivalent, every time.
TEST(EquivalenceCheckerTest, GeluOverTransposeIsEquivalentToItself) {
  constexpr char kGelu[] = R"TS(
def forward(self, x):
    a, b = torch.split(x, [8, 8], 1)
    return torch.gelu(torch.linear(a, self.w0, self.b0).t()), torch.gelu(b.t() * 2.0)
)TS";
  for (int seed = 0; seed < 3; ++seed) {
    CheckOptions opts;
    opts.seed = seed;
    auto r = EquivalenceChecker(opts).Check(Make(kGelu), Make(kGelu), Samples());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->equivalent) << r->first_failure;
  }
  // The process settings make gelu_backward read a non-contiguous gradient right; the two paths
  // may still round differently (vectorized or not), hence the tolerance torch_settings.cc uses.
  at::Generator gen = at::detail::createCPUGenerator(11);
  at::Tensor x = at::randn({8, 8}, gen);
  at::Tensor grad = at::randn({8, 8}, gen).t();
  EXPECT_TRUE(at::allclose(at::gelu_backward(grad, x, "none"),
                           at::gelu_backward(grad.contiguous(), x, "none"), 1e-5, 1e-6));
}

// A candidate that fails where the reference runs is not equivalent (exit 1 in sentier_check),
// not an error of the check, also when timing is on (as it is on CUDA by default).
TEST(EquivalenceCheckerTest, CandidateThatDoesNotRunIsNotEquivalent) {
  std::string bad = absl::StrReplaceAll(kReference, {{"torch.split(x, [8, 8], 1)", "torch.split(x, [9, 8], 1)"}});
  std::vector<Device> devices = {Device::kCpu};
  if (torch::cuda::is_available()) devices.push_back(Device::kCuda);
  for (Device device : devices) {
    CheckOptions opts;
    opts.device = device;
    opts.time = true;
    auto r = EquivalenceChecker(opts).Check(Make(kReference), Make(bad), Samples());
    ASSERT_TRUE(r.ok()) << DeviceName(device) << ": " << r.status();
    EXPECT_FALSE(r->equivalent) << DeviceName(device);
    EXPECT_NE(r->first_failure.find("candidate run"), std::string::npos) << r->first_failure;
  }
}

// Sparse gradients (nn.EmbeddingBag(sparse=True), as DLRM's tables are written) are compared
// densified: a model checks against itself. A candidate that computes the same values with a
// dense gradient is not equivalent: an optimizer for sparse gradients (SparseAdam) would refuse
// it.
torch::jit::Module EmbeddingBagModel(bool sparse) {
  at::Generator gen = at::detail::createCPUGenerator(3);
  torch::jit::Module m("Bags");
  m.register_parameter("w", at::randn({10, 4}, gen), false);
  m.define(absl::StrReplaceAll(R"TS(
def forward(self, ids):
    flat = ids.reshape(-1)
    off = torch.arange(0, flat.size(0), ids.size(1))
    return torch.embedding_bag(self.w, flat, off, False, 0, SPARSE, None, False)[0]
)TS", {{"SPARSE", sparse ? "True" : "False"}}));
  return m;
}

TEST(EquivalenceCheckerTest, SparseGradientsAreComparedAndTheirLayoutKept) {
  at::Generator gen = at::detail::createCPUGenerator(5);
  std::vector<c10::IValue> ids = {at::randint(0, 10, {8, 3}, gen, at::TensorOptions().dtype(at::kLong))};
  auto same = EquivalenceChecker(CheckOptions()).Check(EmbeddingBagModel(true), EmbeddingBagModel(true), ids);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(same->equivalent) << same->first_failure;
  auto dense = EquivalenceChecker(CheckOptions()).Check(EmbeddingBagModel(true), EmbeddingBagModel(false), ids);
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_FALSE(dense->equivalent);
  EXPECT_NE(dense->first_failure.find("sparse in the reference, dense in the candidate"), std::string::npos)
      << dense->first_failure;
}

// Timing as users run artifacts (the graph executor's optimizations on) needs LibTorch 2.x; there
// (the suite's 2.11) it times both models, on 1.13 it is refused with the reason. The interpreter
// is always available.
TEST(EquivalenceCheckerTest, ExecutorTimingNeedsLibTorch2) {
  EXPECT_TRUE(CheckStepTiming(StepTiming::kInterpreter).ok());
  absl::Status executor = CheckStepTiming(StepTiming::kExecutor);
  if (TORCH_VERSION_MAJOR < 2) {
    EXPECT_EQ(executor.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(executor.message()).find("needs LibTorch 2.x"), std::string::npos) << executor;
    return;
  }
  ASSERT_TRUE(executor.ok()) << executor;
  CheckOptions opts;
  opts.time = true;
  opts.timing = StepTiming::kExecutor;
  if (torch::cuda::is_available()) opts.device = Device::kCuda;
  auto r = EquivalenceChecker(opts).Check(Make(kReference), Make(kBatched), Samples());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->equivalent) << r->first_failure;
  EXPECT_GT(r->reference_ms, 0.0);
  EXPECT_GT(r->candidate_ms, 0.0);
  EXPECT_GT(r->candidate_train_ms, 0.0);
  EXPECT_EQ(r->timing, StepTiming::kExecutor);
  EXPECT_EQ(r->timing_fallback, "");
  EXPECT_FALSE(torch::jit::getGraphExecutorOptimize()) << "the executor's switch is put back";
}

// Executor timing whose step makes no progress within the stall limit (here 0 s: no step is
// that fast) is given up on; both models are timed in the interpreter, and the report says so.
// The thread left behind finishes its steps on its own copy of the model.
TEST(EquivalenceCheckerTest, ExecutorTimingWithoutProgressFallsBackToTheInterpreter) {
  CheckOptions opts;
  opts.time = true;
  opts.timing = StepTiming::kExecutor;
  opts.executor_stall_s = 0.0;
  if (torch::cuda::is_available()) opts.device = Device::kCuda;
  auto r = EquivalenceChecker(opts).Check(Make(kReference), Make(kBatched), Samples());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->equivalent) << r->first_failure;
  EXPECT_EQ(r->timing, StepTiming::kInterpreter);
  EXPECT_NE(r->timing_fallback.find("made no progress within 0 s"), std::string::npos) << r->timing_fallback;
  EXPECT_NE(r->timing_fallback.find("timed in the interpreter"), std::string::npos) << r->timing_fallback;
  EXPECT_GT(r->reference_ms, 0.0);
  EXPECT_GT(r->candidate_ms, 0.0);
  EXPECT_GT(r->reference_train_ms, 0.0);
  EXPECT_GT(r->candidate_train_ms, 0.0);
  EXPECT_FALSE(torch::jit::getGraphExecutorOptimize()) << "this thread's switch is untouched";
  EXPECT_TRUE(WaitForAbandonedThreads(absl::Seconds(120))) << "the thread left behind did not end";
}

TEST(EquivalenceCheckerTest, ReferenceThatDoesNotRunIsBadInput) {
  std::vector<c10::IValue> wrong = {at::randn({4, 5})};
  auto r = EquivalenceChecker(CheckOptions()).Check(Make(kReference), Make(kReference), wrong);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sentier

namespace sentier {
namespace {

// A model that creates a CPU tensor inside forward runs on the CPU and fails on CUDA: the job
// must be told "the original model fails on cuda: <the interpreter's message>" (and validate on
// the CPU), not get a bare "operation failed in the TorchScript interpreter".
TEST(RunsOnDeviceTest, CpuTensorCreatedInForwardFailsOnCudaWithTheCause) {
  torch::jit::Module m("CpuOnly");
  m.register_parameter("w", at::randn({4, 4}), false);
  m.define(R"TS(
def forward(self, x):
    return torch.linear(x, self.w) + torch.ones([x.size(0), 4])
)TS");
  std::vector<c10::IValue> samples = {at::randn({3, 4})};
  EXPECT_TRUE(RunsOnDevice(m, samples, Device::kCpu, /*training=*/true).ok());
  absl::Status wrong = RunsOnDevice(m, {at::randn({3, 5})}, Device::kCpu, true);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument) << wrong;
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: the CUDA half is skipped";
  absl::Status cuda = RunsOnDevice(m, samples, Device::kCuda, true);
  EXPECT_EQ(cuda.code(), absl::StatusCode::kFailedPrecondition) << cuda;
  EXPECT_NE(cuda.message().find("the original model fails on cuda: "), absl::string_view::npos) << cuda;
  EXPECT_NE(cuda.message().find("device"), absl::string_view::npos) << cuda;  // the cause, quoted
  EXPECT_EQ(cuda.message().find("The following operation failed"), absl::string_view::npos) << cuda;
}

}  // namespace
}  // namespace sentier
