// cuda_kernels.cc — Kineto-based kernel counting (CUDA builds only; see the header).
#include "runtime/cuda_kernels.h"
#include "passes/torch_error.h"

#ifdef SENTIER_WITH_CUDA
#include <set>

#include <ATen/ATen.h>

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>
#endif

namespace sentier {

#ifdef SENTIER_WITH_CUDA
namespace {

void Step(torch::jit::Module& module, const std::vector<c10::IValue>& inputs, bool training) {
  c10::IValue out = module.forward(inputs);
  if (!training) return;
  std::vector<at::Tensor> ts;
  if (out.isTensor()) ts.push_back(out.toTensor());
  if (out.isTuple()) {
    for (const auto& e : out.toTupleRef().elements()) {
      if (e.isTensor()) ts.push_back(e.toTensor());
    }
  }
  at::Tensor loss;
  for (const at::Tensor& t : ts) {
    if (t.requires_grad()) loss = loss.defined() ? loss + t.sum() : t.sum();
  }
  if (loss.defined()) loss.backward();
}

}  // namespace

absl::StatusOr<int64_t> CountCudaKernels(torch::jit::Module& module,
                                         const std::vector<c10::IValue>& inputs, bool training) {
  using torch::profiler::impl::ActivityType;
  using torch::profiler::impl::ProfilerConfig;
  using torch::profiler::impl::ProfilerState;
  try {
    Step(module, inputs, training);  // warm-up
    torch::cuda::synchronize();
    ProfilerConfig config(ProfilerState::KINETO);
    std::set<ActivityType> activities = {ActivityType::CPU, ActivityType::CUDA};
    torch::autograd::profiler::prepareProfiler(config, activities);
    torch::autograd::profiler::enableProfiler(config, activities);
    Step(module, inputs, training);
    torch::cuda::synchronize();
    auto result = torch::autograd::profiler::disableProfiler();
    int64_t kernels = 0;
    for (const auto& e : result->events()) {
      if (e.deviceType() == c10::DeviceType::CUDA) ++kernels;
    }
    return kernels;
  } catch (const std::exception& e) {
    std::string what = e.what();
    return absl::InternalError(TorchErrorMessage(what));
  }
}
#else
absl::StatusOr<int64_t> CountCudaKernels(torch::jit::Module&, const std::vector<c10::IValue>&,
                                         bool) {
  return absl::UnimplementedError("CUDA kernel counts need a CUDA build of LibTorch");
}
#endif

}  // namespace sentier
