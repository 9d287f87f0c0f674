// step_memory_test.cc — PeakStepBytes counts what a step's own buffers need at once.
#include "runtime/step_memory.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/cuda.h>

#include "gtest/gtest.h"

namespace sentier {
namespace {

constexpr int64_t kMiB = 1 << 20;

// Buffers of 1 MiB and 2 MiB alive together, then one of 4 MiB after both are gone.
void OverlappingThenAlone(const c10::Device& device) {
  auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  {
    at::Tensor a = at::empty({kMiB / 4}, opts);
    at::Tensor b = at::empty({2 * kMiB / 4}, opts);
    a.fill_(1);
    b.fill_(2);
  }
  at::Tensor c = at::empty({4 * kMiB / 4}, opts);
  c.fill_(3);
}

TEST(StepMemoryTest, CpuPeakIsWhatIsAliveAtOnce) {
  c10::Device cpu(c10::kCPU);
  auto peak = PeakStepBytes(cpu, [&] { OverlappingThenAlone(cpu); });
  ASSERT_TRUE(peak.ok()) << peak.status();
  EXPECT_EQ(*peak, 4 * kMiB);

  auto both = PeakStepBytes(cpu, [&] {
    auto opts = at::TensorOptions().dtype(at::kFloat);
    at::Tensor a = at::empty({3 * kMiB / 4}, opts);
    at::Tensor b = at::empty({3 * kMiB / 4}, opts);
  });
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(*both, 6 * kMiB);
}

TEST(StepMemoryTest, MemoryAllocatedBeforeTheStepIsNotCounted) {
  at::Tensor before = at::ones({8 * kMiB / 4});
  auto peak = PeakStepBytes(c10::Device(c10::kCPU), [&] { before.mul_(2); });
  ASSERT_TRUE(peak.ok());
  EXPECT_LT(*peak, 1024);  // the scalar 2 wrapped in a tensor, not the 8 MiB buffer
  EXPECT_EQ(before[0].item<float>(), 2.0f);
}

TEST(StepMemoryTest, BackwardAllocationsAreCounted) {
  at::Tensor w = at::randn({256, 256}).requires_grad_(true);
  at::Tensor x = at::randn({1024, 256});
  auto forward_only = PeakStepBytes(c10::Device(c10::kCPU), [&] {
    c10::AutoGradMode no_grad(false);
    (void)at::mm(x, w).sum();
  });
  auto with_backward = PeakStepBytes(c10::Device(c10::kCPU), [&] { at::mm(x, w).sum().backward(); });
  ASSERT_TRUE(forward_only.ok());
  ASSERT_TRUE(with_backward.ok());
  EXPECT_GE(*forward_only, 1024 * 256 * 4);  // the product
  EXPECT_GE(*with_backward, *forward_only + 256 * 256 * 4);  // plus w's gradient
}

TEST(StepMemoryTest, AThrowingStepIsAnError) {
  auto peak = PeakStepBytes(c10::Device(c10::kCPU), [] { (void)at::mm(at::ones({2, 3}), at::ones({2, 3})); });
  ASSERT_FALSE(peak.ok());
  EXPECT_EQ(peak.status().code(), absl::StatusCode::kInternal);
}

TEST(StepMemoryTest, CudaPeakIsWhatIsAliveAtOnce) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  c10::Device cuda(c10::kCUDA, 0);
  auto peak = PeakStepBytes(cuda, [&] { OverlappingThenAlone(cuda); });
  ASSERT_TRUE(peak.ok()) << peak.status();
  EXPECT_EQ(*peak, 4 * kMiB);
}

}  // namespace
}  // namespace sentier
