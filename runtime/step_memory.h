// step_memory.h — peak memory of one step of a model: how many bytes beyond what was allocated
// when the step began were allocated at once, at most, on the step's device.
//
//   absl::StatusOr<int64_t> peak = PeakStepBytes(device, [&] { RunOneTrainingStep(); });
//
// On CUDA (CUDA builds, SENTIER_WITH_CUDA) the caching allocator's own statistics: the peak of
// allocated bytes during the step minus the bytes allocated before it, the figure
// torch.cuda.max_memory_allocated() reports. Elsewhere (the CPU) every allocation and free the
// allocator reports to the profiler interface during the step is summed in order and the
// running maximum is the peak. Memory freed during the step but allocated before it is not seen
// on the CPU (so the CPU figure can only be too high, never too low); what the step's own
// buffers need at once is counted exactly. Works with LibTorch 1.13 and 2.x.
#ifndef SENTIER_RUNTIME_STEP_MEMORY_H_
#define SENTIER_RUNTIME_STEP_MEMORY_H_

#include <cstdint>
#include <functional>

#include <c10/core/Device.h>

#include "absl/status/statusor.h"

namespace sentier {

// PeakStepBytes: runs `step` once and returns its peak (see the header comment). An exception
// thrown by `step` becomes InternalError with its first line.
absl::StatusOr<int64_t> PeakStepBytes(const c10::Device& device, const std::function<void()>& step);

// DeviceMemoryBytes: the device's memory (CUDA: the card's total; the CPU: the machine's
// physical memory); -1 where it cannot be told (a CUDA device in a build without CUDA).
int64_t DeviceMemoryBytes(const c10::Device& device);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_STEP_MEMORY_H_
