// verdict.h — the one place that decides whether a measured model is faster than the original
// and whether its peak memory stays within bounds. The gate's rule selection
// (cost_selection.cc), sentierd's publishing decision (optimize_job.cc) and sentier_opt all call
// it, with the same margins.
//
//   StepFigures original{.ms = 6.1, .peak_bytes = 235 << 20};
//   StepFigures candidate{.ms = 5.0, .peak_bytes = 203 << 20};
//   Verdict v = Judge(original, candidate, VerdictMargins{});   // Verdict::kFaster
//
// Faster means faster by more than `speed` (a fraction of the original's time: run-to-run noise
// must not publish a model); within memory means a peak no more than `memory` (a fraction) above
// the original's, or no more than `memory_floor_bytes` above it, whichever allows more (on a
// model whose step needs a few MiB, one more 2 MiB block of the CUDA caching allocator is tens
// of percent and no risk to anyone's memory); a negative `memory` turns the memory bound off.
// Unknown figures (-1) are never faster and never within bounds.
#ifndef SENTIER_RUNTIME_VERDICT_H_
#define SENTIER_RUNTIME_VERDICT_H_

#include <algorithm>
#include <cstdint>
#include <string>

namespace sentier {

struct StepFigures {
  double ms = -1.0;          // median time of the step
  int64_t peak_bytes = -1;   // peak bytes the step allocates beyond what it started with
};

struct VerdictMargins {
  double speed = 0.02;   // a change must win by more than this fraction
  double memory = 0.01;  // peak memory may exceed the original's by this fraction; < 0: off
  int64_t memory_floor_bytes = int64_t{4} << 20;  // ... or by this many bytes, if that is more
};

enum class Verdict { kFaster, kNotFaster, kMoreMemory };

// FasterThan: `candidate_ms` beats `reference_ms` by more than the speed margin.
inline bool FasterThan(double candidate_ms, double reference_ms, const VerdictMargins& m) {
  return candidate_ms >= 0 && reference_ms > 0 && candidate_ms < reference_ms * (1.0 - m.speed);
}

// ExcessPeakBytes: bytes by which the candidate's peak exceeds what the memory margin allows
// (0: within bounds, or the bound is off).
inline int64_t ExcessPeakBytes(int64_t original_peak, int64_t candidate_peak, const VerdictMargins& m) {
  if (m.memory < 0) return 0;
  if (original_peak < 0 || candidate_peak < 0) return candidate_peak < 0 && original_peak < 0 ? 0 : 1;
  int64_t limit = std::max(static_cast<int64_t>(static_cast<double>(original_peak) * (1.0 + m.memory)),
                           original_peak + m.memory_floor_bytes);
  return std::max<int64_t>(0, candidate_peak - limit);
}

// MemoryMarginNeeded: the smallest memory margin, in hundredths, under which `candidate_peak` is
// within bounds of `original_peak` by the fraction alone (what a user would write as
// `memory_margin`); 0 when it is not above the original; -1 when a figure is unknown.
inline double MemoryMarginNeeded(int64_t original_peak, int64_t candidate_peak) {
  if (original_peak <= 0 || candidate_peak < 0) return -1.0;
  if (candidate_peak <= original_peak) return 0.0;
  // Hundredths, rounded up; then up while ExcessPeakBytes' rounding of the limit leaves a byte
  // over.
  int64_t hundredths = ((candidate_peak - original_peak) * 100 + original_peak - 1) / original_peak;
  while (static_cast<int64_t>(static_cast<double>(original_peak) * (1.0 + hundredths / 100.0)) <
         candidate_peak) {
    ++hundredths;
  }
  return hundredths / 100.0;
}

// Judge: memory first (a faster model that needs more memory is not published), then speed.
inline Verdict Judge(const StepFigures& original, const StepFigures& candidate, const VerdictMargins& m) {
  if (ExcessPeakBytes(original.peak_bytes, candidate.peak_bytes, m) > 0) return Verdict::kMoreMemory;
  return FasterThan(candidate.ms, original.ms, m) ? Verdict::kFaster : Verdict::kNotFaster;
}

// OpCounts: top-level aten ops of one forward and of one training step, forward and backward
// (graph_runner.h); -1 where a count could not be taken.
struct OpCounts {
  int64_t forward = -1;
  int64_t training_step = -1;
};

// UntimedGrowth: with nothing timed, whether the rewritten graph runs more aten ops than the
// original: per training step where both were counted (batching adds cheap forward ops and
// removes many backward ones), else per forward. `*what` names the step and the two counts, as
// "training step (forward and backward) (122 vs 116)".
inline bool UntimedGrowth(const OpCounts& before, const OpCounts& after, std::string* what) {
  const bool by_step = before.training_step >= 0 && after.training_step >= 0;
  const int64_t b = by_step ? before.training_step : before.forward;
  const int64_t a = by_step ? after.training_step : after.forward;
  *what = std::string(by_step ? "training step (forward and backward)" : "forward") + " (" +
          std::to_string(a) + " vs " + std::to_string(b) + ")";
  return a > b;
}

}  // namespace sentier

#endif  // SENTIER_RUNTIME_VERDICT_H_
