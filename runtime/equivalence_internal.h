// equivalence_internal.h — what the files of the equivalence checker share, and nothing public:
// the models run on a device (equivalence_device.cc), the comparison of their outputs and
// gradients (equivalence_compare.cc) and the timing of their steps (equivalence_timing.cc), which
// equivalence_checker.cc puts together into EquivalenceChecker::Check. Only those files include
// it; the public API is runtime/equivalence_checker.h.
#ifndef SENTIER_RUNTIME_EQUIVALENCE_INTERNAL_H_
#define SENTIER_RUNTIME_EQUIVALENCE_INTERNAL_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/api/module.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "passes/sample_inputs.h"
#include "runtime/equivalence_checker.h"

namespace sentier {
namespace equivalence_internal {

struct RunResult {
  NamedTensors outputs;
  NamedTensors grads;
  // The module's buffers after the run ("buffer <name> after the run"): what a training step
  // leaves in BatchNorm's running statistics is compared too.
  NamedTensors state;
  std::vector<bool> grad_defined;  // per grads entry: autograd produced one (else zeros stand in)
  // Gradients autograd produced as sparse tensors (`nn.EmbeddingBag(sparse=True)`): compared
  // densified; a rewrite that changes the layout changes what an optimizer such as SparseAdam
  // accepts, and is reported.
  std::set<std::string> sparse_grads;
};

// What every step of a check reads: both models, the samples (conformed), the options and the
// device.
struct CheckSubject {
  const torch::jit::Module& reference;
  const torch::jit::Module& candidate;
  const std::vector<c10::IValue>& samples;
  const CheckOptions& options;
  c10::Device device;
};

// --- equivalence_device.cc: models and inputs on a device, and one run of a model ---

// A private copy of `m` on `device`: parameters, buffers and tensor constants baked into its
// graphs all moved (on CUDA the archive is serialized and loaded back with that map location,
// which moves all three), floating parameters and buffers cast to `dtype` (integer buffers such
// as BatchNorm's num_batches_tracked keep theirs), every parameter a fresh leaf that requires
// grad exactly when `training`; a buffer keeps requires_grad as the original has it.
torch::jit::Module ModelOnDevice(const torch::jit::Module& m, c10::ScalarType dtype,
                                 const c10::Device& device, bool training);

std::vector<c10::IValue> InputsOnDevice(const std::vector<c10::IValue>& inputs, c10::ScalarType dtype,
                                        const c10::Device& device);

// One run of a private copy of `original` (ModelOnDevice) on fresh copies of `inputs`, in `dtype`
// on `device`: its outputs, and with `training` the gradients of a fixed random projection of
// its floating outputs (drawn from `seed`) with respect to every floating input, parameter and
// grad-requiring buffer, stacked parameters' split back under their members' names; inputs
// marked in `buffer_inputs` (buffers passed as inputs) take no gradient.
// InvalidArgument with LibTorch's message when it does not run.
absl::StatusOr<RunResult> Run(const torch::jit::Module& original,
                              const std::vector<c10::IValue>& inputs, c10::ScalarType dtype,
                              const c10::Device& device, bool training, uint64_t seed,
                              const std::vector<bool>& buffer_inputs = {});

// The reference failed on the first trial: bad input, or (on CUDA) a model that only runs on the
// CPU — it creates CPU tensors in forward, say. The two are told apart by a CPU run.
absl::Status ReferenceFailure(const torch::jit::Module& reference, const std::vector<c10::IValue>& inputs,
                              const c10::Device& device, const absl::Status& failure);

// --- equivalence_compare.cc: the comparison ---

// Runs the reference, the reference in float64 on the CPU and the candidate on every trial's
// inputs, and compares outputs and gradients. The reference failing on the samples is the
// check's error (ReferenceFailure); on another trial, that trial is skipped.
absl::Status CompareOnTrials(const CheckSubject& s, CheckReport* report);

// Verdict: the first failing finding, in one sentence.
void SetVerdict(CheckReport* report);

// --- equivalence_timing.cc: the timing ---

// Timing: executor timing that stops making progress, or that the reference itself fails, is
// done again in the interpreter for both models, and the report says so (timing, timing_fallback).
absl::Status TimeBothOrFallBack(const CheckSubject& s, CheckReport* report);

}  // namespace equivalence_internal
}  // namespace sentier

#endif  // SENTIER_RUNTIME_EQUIVALENCE_INTERNAL_H_
