// gate.h — the gate: keeps only the rewrites that pay, by timing them (--gate=on; sentierd on CUDA).
//
// RunGate optimizes a fresh copy of the model with the whole rule set and times
// a step of the result against the original (EquivalenceChecker with timing: forward, or forward
// + backward in training mode, median of repeated runs, device synchronized). Then, greedily, it
// tries the set without each rule that fired, one at a time in load order, and drops a rule when
// the model is faster without it (by more than the noise margin). When even the best set is not
// faster than the original, the selection is empty and the caller publishes the original.
// A selection that is faster is confirmed by timing it and the original once more, back to
// back; unconfirmed, the original is kept. A decisive gain (the step, and with inference_too the
// forward, at most 1/kDecisiveGain of the original's) is not timed again: two timings of one
// graph were seen to differ by up to 1.3x, never by 1.5x, and on a model of thousands of kernels
// that timing of the original is most of the gate's time (256 branches on the H200: 12-16 s).
// With inference_too, the forward must not be slower either, judged on both timings together
// (the geometric mean of the two forward ratios): on a forward of a few tenths of a millisecond
// one timing alone can be 10% off either way, and it must neither publish a slower forward nor
// refuse a selection on one unlucky timing. Where the two split (one reads slower, the other
// not) and together they would refuse, a third timing is taken and the median of the three
// decides: a refusal needs most timings to read slower.
//
// Timing with the executor (GateRunOptions::timing) that makes no progress in the original's step
// (torch 2.11's fuser can fail to return), or that the original model fails, is given up on: the
// selection starts over, timed in the interpreter, and says why (timing, timing_fallback). When
// the optimized model's step is the one that makes no progress, users would meet the same wait:
// the selection is empty (executor_stall says why). A rule set whose
// result fails with the executor fails the selection, naming the optimized model.
//
// Peak memory is a constraint, not a score: a set whose step needs more peak memory than the
// original's (the training step's; with inference_too the forward's as well), by more than
// the memory margin, is not acceptable however fast. Under the default policy each peak is weighed
// against its own step's time (the training step's peak against the training step alone, as the
// job's validation judges it), not against the score. When the whole set is over, every batching
// (group) rule is left out, and those that fired are added back one at a time, in load order,
// where they fire, the set stays within bounds and gets faster; the greedy pass for speed then only accepts sets
// within bounds. When no set is within bounds, the selection is not `faster` and the caller
// publishes the original.
//
//   auto sel = RunGate(model_path, samples, *rules, options);
//   // sel->rules: the subset to apply; sel->log: one line per measurement
#ifndef SENTIER_RUNTIME_GATE_H_
#define SENTIER_RUNTIME_GATE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "absl/status/statusor.h"
#include "passes/optimizer.h"
#include "passes/rule_set.h"
#include "runtime/model_format.h"
#include "runtime/options_enums.h"
#include "runtime/verdict.h"

namespace sentier {

struct GateRunOptions {
  Device device = Device::kCpu;  // where to time
  bool training = true;         // time forward + backward (else forward only)
  bool inference_too = false;   // with training: score = training step + forward, and the
                                // selection must not make the forward slower either
  bool verify_each = true;      // check every measured set for equivalence (else only time
                                // them; the caller must then validate the final artifact)
  VerdictMargins margins;       // speed and peak-memory margins (runtime/verdict.h)
  StepTiming timing = StepTiming::kInterpreter;  // how steps are timed (CheckOptions::timing)
  double executor_stall_s = kDefaultExecutorStallS;  // CheckOptions::executor_stall_s
  // How every measured set is optimized: the options the published artifact will be made with
  // (layout, rounds), so that the gate judges that artifact. Each trial puts its own module and
  // sample inputs in place of `self` and `sample_inputs`; `after_pass` is not called.
  OptimizeOptions optimize;
};

// A gain this large (the original's time over the selection's) is not confirmed by timing again.
inline constexpr double kDecisiveGain = 1.5;

// JudgedStepMs: the time the memory policy weighs a step's peak against, from a score: the
// training step alone where the forward is in the score (training with inference_too).
inline double JudgedStepMs(double score_ms, double forward_ms, bool forward_in_score) {
  return forward_in_score ? score_ms - forward_ms : score_ms;
}

struct GateSelection {
  std::shared_ptr<const RuleSet> rules;  // what to apply (empty when nothing pays)
  bool faster = false;                   // the selected set beats the original
  bool stacked_parameters = false;       // the layout the sets were measured in (GateRunOptions)
  StepTiming timing = StepTiming::kInterpreter;  // how they were timed (GateRunOptions)
  // Set when GateRunOptions asked for executor timing and a step made no progress
  // (CheckOptions::executor_stall_s): why the selection was made in the interpreter instead.
  std::string timing_fallback;
  // Set when a measured set's optimized model made no progress in a step under the executor
  // while the original's steps finished (torch 2.11's CUDA fuser): the selection is empty and
  // says why.
  std::string executor_stall;
  bool none_fired = false;               // no rule applies to this model at all
  double original_ms = 0.0;              // score: training step (+ forward with inference_too)
  double optimized_ms = 0.0;             // with the selected set
  double original_forward_ms = 0.0, optimized_forward_ms = 0.0;
  bool forward_in_score = false;         // the score is training step + forward (inference_too)
  // The judged step's time, which the memory policy weighs against its peak: the training step
  // alone where the forward is in the score (the forward's peak is judged by the forward's time).
  double OriginalStepMs() const { return JudgedStepMs(original_ms, original_forward_ms, forward_in_score); }
  double OptimizedStepMs() const { return JudgedStepMs(optimized_ms, optimized_forward_ms, forward_in_score); }
  // Peak bytes of one step (training step, or forward without training) and of one forward.
  int64_t original_peak_bytes = -1, optimized_peak_bytes = -1;
  int64_t original_forward_peak_bytes = -1, optimized_forward_peak_bytes = -1;
  bool within_memory = true;             // the selected set's peaks are within the memory margin
  // Rules fire, but every set that fires any of them needs more peak memory than the memory margin
  // allows: the memory bound alone keeps the original.
  bool nothing_fires_within_memory = false;
  // Over the memory bound, when every rule together was faster than what is kept: that set's
  // time and peaks, and the smallest memory margin (hundredths) under which its peaks would be
  // within bounds — what a model's owner can allow in REG/<model>/sentier.json. -1: not so.
  double all_rules_ms = -1.0;
  int64_t all_rules_peak_bytes = -1, all_rules_forward_peak_bytes = -1;
  double margin_for_all_rules = -1.0;
  bool confirmed = true;                 // false: faster at first, not when timed again
  double confirm_ms = -1.0, confirm_original_ms = -1.0;  // that second timing
  // The original's judged step (the training step; the forward without training) and its peak,
  // as the selection last timed them (the confirmation's, or the first timing's where the gain
  // was decisive): the validation of the artifact this selection publishes takes them rather
  // than timing the original once more in the same job.
  double last_original_step_ms = -1.0;
  int64_t last_original_step_peak_bytes = -1;
  // Rules left out (slower with them, or over in memory) that fire on this model in some
  // measured set; group rules that match nothing here are left out too but not listed.
  std::vector<std::string> dropped;
  std::vector<std::string> log;          // one line per measurement
};

// One measured rule set: the score (see GateRunOptions), the forward alone, the peaks, and the
// rules that fired.
struct TrialFigures {
  double ms = 0.0;
  double forward_ms = 0.0;
  int64_t peak = -1;          // peak bytes of the scored step (training step, or forward)
  int64_t forward_peak = -1;  // of one forward
  std::vector<std::string> fired;
};

// Optimizes the model with `rules` and measures it; when `original` is not null, the original
// is measured in the same call, back to back, into `*original`.
using TrialMeasurer =
    std::function<absl::StatusOr<TrialFigures>(const RuleSet& rules, TrialFigures* original)>;

// SelectRules: the selection over any measurer (RunGate passes the one that
// loads, optimizes and times the model; tests pass figures). Of `options` it reads `training`,
// `inference_too` and `margins`.
absl::StatusOr<GateSelection> SelectRules(const RuleSet& rules, const GateRunOptions& options,
                                          const TrialMeasurer& measure);

// `samples`: the model's sample inputs (without the module itself).
absl::StatusOr<GateSelection> RunGate(const std::string& model_path,
                                                       const std::vector<c10::IValue>& samples,
                                                       const RuleSet& rules,
                                                       const GateRunOptions& options);
// The same for a model of `format` (runtime/model_format.h): loaded, run and rewritten through it.
absl::StatusOr<GateSelection> RunGate(const ModelFormat& format, const std::string& model_path,
                                                       const std::vector<c10::IValue>& samples,
                                                       const RuleSet& rules, const GateRunOptions& options);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_GATE_H_
