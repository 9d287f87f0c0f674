// cuda_kernels.h — CUDA kernels launched by one step of a model, counted with the Kineto profiler.
//
//   absl::StatusOr<int64_t> n = CountCudaKernels(module, inputs, /*training=*/true);
//
// Only in builds with CUDA (the CMake build against a CUDA LibTorch defines SENTIER_WITH_CUDA);
// elsewhere it returns UnimplementedError and callers report no kernel counts. The module and
// inputs must already be on the GPU; a step is a forward, or a forward and a backward of the
// summed outputs. One warm-up step runs first and is not counted.
#ifndef SENTIER_RUNTIME_CUDA_KERNELS_H_
#define SENTIER_RUNTIME_CUDA_KERNELS_H_

#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/api/module.h>

#include "absl/status/statusor.h"

namespace sentier {

absl::StatusOr<int64_t> CountCudaKernels(torch::jit::Module& module,
                                         const std::vector<c10::IValue>& inputs, bool training);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_CUDA_KERNELS_H_
