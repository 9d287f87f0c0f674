// step_memory.cc — peak bytes of one step (see the header).
#include "runtime/step_memory.h"
#include "passes/torch_error.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>

#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <unistd.h>

#ifdef SENTIER_WITH_CUDA
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/cuda.h>
#endif

namespace sentier {
namespace {

// Sums the allocations and frees reported for one device type. Installed as the thread's
// PROFILER_STATE debug info, which the autograd engine hands on to its worker threads, so it is
// called from several threads: guarded by a mutex.
//
// LibTorch 1.13 declares reportMemoryUsage with int64_t totals, 2.x with size_t: both overloads
// are declared (neither marked override), and whichever matches the base class overrides it.
class PeakReporter : public c10::MemoryReportingInfoBase {
 public:
  explicit PeakReporter(c10::DeviceType type) : type_(type) {}

  void reportMemoryUsage(void* /*ptr*/, int64_t alloc_size, int64_t /*total_allocated*/,
                         int64_t /*total_reserved*/, c10::Device device) {
    Add(alloc_size, device);
  }
  void reportMemoryUsage(void* /*ptr*/, int64_t alloc_size, size_t /*total_allocated*/,
                         size_t /*total_reserved*/, c10::Device device) {
    Add(alloc_size, device);
  }
  bool memoryProfilingEnabled() const { return true; }

  int64_t peak() const {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }

 private:
  void Add(int64_t bytes, const c10::Device& device) {
    if (device.type() != type_) return;
    std::lock_guard<std::mutex> lock(mu_);
    current_ += bytes;
    peak_ = std::max(peak_, current_);
  }

  c10::DeviceType type_;
  mutable std::mutex mu_;
  int64_t current_ = 0;
  int64_t peak_ = 0;
};

absl::Status StepError(const std::exception& e) {
  std::string what = e.what();
  return absl::InternalError(TorchErrorMessage(what));
}

}  // namespace

absl::StatusOr<int64_t> PeakStepBytes(const c10::Device& device, const std::function<void()>& step) {
  try {
#ifdef SENTIER_WITH_CUDA
    if (device.is_cuda()) {
      c10::DeviceIndex index = device.has_index() ? device.index() : 0;
      // The allocator's statistics exist once it has served the device ("invalid device
      // argument" before that): one tiny allocation first.
      (void)at::empty({1}, at::TensorOptions().device(c10::Device(c10::kCUDA, index)));
      torch::cuda::synchronize(index);
      int64_t before = c10::cuda::CUDACachingAllocator::getDeviceStats(index).allocated_bytes[0].current;
      c10::cuda::CUDACachingAllocator::resetPeakStats(index);
      step();
      torch::cuda::synchronize(index);
      int64_t peak = c10::cuda::CUDACachingAllocator::getDeviceStats(index).allocated_bytes[0].peak;
      return std::max<int64_t>(0, peak - before);
    }
#endif
    auto reporter = std::make_shared<PeakReporter>(device.type());
    {
      c10::DebugInfoGuard guard(c10::DebugInfoKind::PROFILER_STATE, reporter);
      step();
    }
    return reporter->peak();
  } catch (const std::exception& e) {
    return StepError(e);
  }
}

int64_t DeviceMemoryBytes(const c10::Device& device) {
#ifdef SENTIER_WITH_CUDA
  if (device.is_cuda()) {
    if (!torch::cuda::is_available()) return -1;
    const int index = device.has_index() ? device.index() : 0;
    return static_cast<int64_t>(at::cuda::getDeviceProperties(index)->totalGlobalMem);
  }
#endif
  if (!device.is_cpu()) return -1;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size : -1;
}

}  // namespace sentier
