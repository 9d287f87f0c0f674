// equivalence_checker.h — proves (on numbers) that an optimized model computes what the original
// computes: outputs, and in training mode the gradients of every floating input and parameter.
//
// Tolerance that is strict and fair: both models run in the checked dtype, and the reference
// also in float64 (where it cannot, because the model pins its own dtype, the judgement is in the
// checked dtype: CheckReport::own_dtype_judgement). For every output (and gradient) the candidate's relative norm error against
// the float64 reference must be within a small factor of the reference's own error on that
// tensor or of the reference's typical (median) error over the outputs, or gradients, of the
// same trial, whichever is larger, plus a floor for the dtype. The median matters in bf16,
// where one tensor's own error is a noisy sample (figures in bench/RESULTS.md). Reordered reductions (bmm vs mm) pass; wrong rewrites (a swapped cat, an
// off-by-one section) are orders of magnitude off and fail. NaN must match NaN exactly.
//
//   EquivalenceChecker checker(options);
//   absl::StatusOr<CheckReport> r = checker.Check(reference, candidate, samples);
//   if (!r.ok()) ...            // bad input: the reference does not run on the samples
//   else if (!r->equivalent)    // r->first_failure names the output or gradient
//
// NOTE: models run on the CPU unless the device is CUDA, with the process-wide LibTorch switches
// of runtime/torch_settings.h (executor optimizations off: the graph as written is compared),
// which every tool applies once at start (ApplyTorchSettings); the checker flips none.
#ifndef SENTIER_RUNTIME_EQUIVALENCE_CHECKER_H_
#define SENTIER_RUNTIME_EQUIVALENCE_CHECKER_H_

#include <memory>
#include <map>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/api/module.h>

#include "absl/status/statusor.h"
#include "runtime/options_enums.h"

namespace sentier {

struct CheckOptions {
  Device device = Device::kCpu;
  c10::ScalarType dtype = c10::kFloat;  // float inputs and parameters are cast to this
  bool inference = true;            // compare outputs
  bool training = true;             // compare gradients (inputs and parameters)
  int trials = 3;                   // sample inputs + (trials - 1) random sets, plus batch x2
  uint64_t seed = 0;
  double factor = 4.0;              // candidate error may be this many times the reference's
  bool time = false;                // median step time and peak step memory of each model: both
                                    // warmed up, then 20 steps of each, alternated (A B, B A, ...)
  bool timing_only = false;         // only time both models (no comparison, no counts): the
                                    // report says nothing about equivalence
  bool time_reference = true;       // with time: false times the candidate alone (the
                                    // reference's figures stay -1), e.g. when they are known
  bool count_ops = true;            // count aten ops per forward of both (CPU proxy for kernels)
  // How timed steps run (runtime/options_enums.h): the interpreter, or the graph executor with
  // its optimizations on, as users run artifacts (CheckStepTiming says where that is available).
  StepTiming timing = StepTiming::kInterpreter;
  // executor timing: a step that does not finish within this many seconds (torch 2.11's CUDA
  // fuser can fail to return from compiling a fusion group) is given up on, its thread left
  // behind (runtime/progress_deadline.h), and both models are timed in the interpreter instead
  // (CheckReport::timing_fallback); so are they when a step of the reference throws with the
  // executor (LibTorch 1.13 asserts on some graphs with aten::stack). A step of the candidate
  // that throws with the executor fails the check's timing with an error naming the candidate.
  double executor_stall_s = kDefaultExecutorStallS;
  // false: the models' shapes are their own (an exported program's are static): no trial at
  // twice the batch.
  bool batch_x2 = true;
  std::vector<bool> fixed_inputs;   // fixed_inputs[i]: argument i does not follow the batch (a
                                    // parameter passed as an input): not doubled at batch x2
  std::vector<bool> buffer_inputs;  // buffer_inputs[i]: argument i is a buffer passed as an input
                                    // (a batch norm's running statistics): no gradient taken
};

// CheckFinding: one compared tensor.
struct CheckFinding {
  std::string what;   // "output[0]", "grad of input 1", "grad of param t0.weight"
  std::string trial;  // "samples", "random 1", "batch x2"
  double max_abs_error = 0.0;  // max |candidate - reference| in the checked dtype
  double rel_error = 0.0;      // ||candidate - ref64|| / ||ref64||
  double ref_rel_error = 0.0;  // ||reference - ref64|| / ||ref64||
  double ref_level = 0.0;      // median ref_rel_error over the outputs (or gradients) of the trial
  double tolerance = 0.0;      // what rel_error had to stay under
  bool ok = true;
  std::string note;            // shape/NaN/run failures
};

struct CheckReport {
  bool equivalent = true;
  std::string first_failure;  // one sentence naming the tensor, errors, tolerance and trial
  std::vector<CheckFinding> findings;
  std::vector<std::string> skipped_trials;  // trials the reference itself could not run, and why
  // Non-empty where the reference could not run in float64 (a model that pins its dtype itself:
  // `x.float()` meeting float64 weights): why. The candidate was then judged in the checked dtype
  // against the reference in that dtype, within twice the dtype's floor (RelativeToleranceFloor).
  std::string own_dtype_judgement;
  int64_t aten_ops_reference = -1;  // top-level aten ops per forward (CPU proxy for kernels)
  int64_t aten_ops_candidate = -1;
  double reference_ms = -1.0;       // median forward time (with --time), device synchronized
  double candidate_ms = -1.0;
  double reference_train_ms = -1.0;  // median forward + backward time (training mode)
  double candidate_train_ms = -1.0;
  // Peak bytes one step allocates beyond what was allocated before it (with --time; see
  // runtime/step_memory.h): a forward, and in training mode a forward + backward.
  int64_t reference_peak_bytes = -1;
  int64_t candidate_peak_bytes = -1;
  int64_t reference_train_peak_bytes = -1;
  int64_t candidate_train_peak_bytes = -1;
  // CUDA kernels per forward and per training step (Kineto; CUDA builds and devices only).
  int64_t cuda_kernels_forward_reference = -1;
  int64_t cuda_kernels_forward_candidate = -1;
  int64_t cuda_kernels_step_reference = -1;
  int64_t cuda_kernels_step_candidate = -1;
  std::string count_error;  // why an aten-op or CUDA-kernel count is missing (-1), if one is
  // How the figures above were timed: CheckOptions::timing, or the interpreter when executor
  // timing made no progress (then timing_fallback says so).
  StepTiming timing = StepTiming::kInterpreter;
  std::string timing_fallback;
  // Where the check's time went, in ms: "compare" (the trials), "count_ops", "cuda_kernels",
  // "time" (warm-ups and the alternated timing); a phase that did not run is absent.
  std::map<std::string, double> phase_ms;
};

// CheckStepTiming: whether this LibTorch can time steps that way. executor needs LibTorch 2.x:
// 1.13's profiling executor asserts inside its autodiff on graphs with aten::stack, which batched
// forms contain. InvalidArgument naming the version otherwise.
absl::Status CheckStepTiming(StepTiming timing);
// StepTimingFromFlag: a tool's --timing value, parsed and checked against this LibTorch; "auto"
// (the tools' default) is executor on LibTorch 2.x and interpreter on 1.x. The error
// (InvalidArgument) names the flag: "--timing must be auto, interpreter or executor, not 'x'",
// or "--timing: <why this LibTorch cannot>".
absl::StatusOr<StepTiming> StepTimingFromFlag(absl::string_view text);

class EquivalenceChecker {
 public:
  explicit EquivalenceChecker(CheckOptions options) : options_(std::move(options)) {}

  // CheckGraphs: the same judgement for two bare graphs (IR files, generated graphs) taking the
  // same inputs: each is run as the forward of a module without parameters, so the gradients
  // compared are those of every floating input.
  absl::StatusOr<CheckReport> CheckGraphs(const std::shared_ptr<torch::jit::Graph>& reference,
                                          const std::shared_ptr<torch::jit::Graph>& candidate,
                                          const std::vector<c10::IValue>& inputs) const;

  // Check: `samples` are forward's arguments (any structure; see passes/sample_inputs.h), conformed
  // to its schema first. InvalidArgumentError when they do not fit or the reference cannot run
  // on them (bad input); FailedPreconditionError "the original model fails on cuda: ..." when the
  // device is CUDA and the reference runs on the CPU but not there (the message quotes the
  // interpreter's error); UnavailableError "the optimized model's forward made no progress ..."
  // when, timed with the executor, the candidate's step stalls while the reference's finished.
  absl::StatusOr<CheckReport> Check(const torch::jit::Module& reference,
                                    const torch::jit::Module& candidate,
                                    const std::vector<c10::IValue>& samples) const;

 private:
  CheckOptions options_;
};

// RunsOnDevice: one step of `module` (a forward, and with `training` a backward) on `device`,
// with parameters, buffers, graph constants and inputs moved there. OK when it runs;
// FailedPreconditionError "the original model fails on cuda: <the interpreter's message>" when it
// runs on the CPU but not on `device`; InvalidArgumentError when it does not run at all.
absl::Status RunsOnDevice(const torch::jit::Module& module, const std::vector<c10::IValue>& samples,
                          Device device, bool training);

// RelativeTolerance: the floor of the relative norm error for a dtype.
double RelativeToleranceFloor(c10::ScalarType dtype);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_EQUIVALENCE_CHECKER_H_
