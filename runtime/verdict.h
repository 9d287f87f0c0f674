// verdict.h — the one place that decides whether a measured model is faster than the original
// and whether its peak memory is acceptable: the memory policy. The gate's rule selection
// (gate.cc) and the pipeline's decide stage (pipeline/decision.cc) call it, with the
// same margins.
//
//   StepFigures original{.ms = 40.8, .peak_bytes = 196 << 20};
//   StepFigures candidate{.ms = 10.5, .peak_bytes = 323 << 20};
//   Verdict v = Judge(original, candidate, VerdictMargins{});   // Verdict::kFaster
//
// Faster means faster by more than `speed` (a fraction of the original's time: run-to-run noise
// must not publish a model). The memory policy, in one sentence: a faster step may hold as much
// more memory as it is faster — its time x peak memory may not exceed the original's (3.9x
// faster may peak at up to 3.9x: at a proportionally smaller batch it would need no more memory
// and still be faster), or by any amount the device cannot miss (a 1/1024 share of its memory:
// such growth moves the largest batch that fits in the device share by under 0.2%) — as long as
// its peak stays within a share of the device's memory; a budget of the model's owner (a margin
// over the original's peak, or an absolute peak) replaces these. Batching holds more at once
// whatever its spelling (the same towers batched by hand in eager PyTorch peak at 2.5x the
// original), so a bound near the original's peak refuses batching itself. The clauses:
//   time_memory_product  (default) candidate peak <= original peak x original ms / candidate ms
//   small_growth         (default) candidate peak <= original peak + small_growth_bytes, where
//                        that is more than the product allows
//   device_share         (default) candidate peak <= device_limit_bytes (a share of the device)
//   margin               `memory` >= 0: peak <= original peak x (1 + memory)
//   max_step_bytes       `max_step_bytes` > 0: peak <= max_step_bytes
//   off                  `memory` < 0: peak memory not weighed
// Each peak may also exceed its bound by `memory_floor_bytes` (a few MiB: on a model whose step
// needs a few MiB, one more 2 MiB block of the CUDA caching allocator is tens of percent and no
// risk to anyone's memory). Unknown figures (-1) are never faster and never within bounds.
#ifndef SENTIER_RUNTIME_VERDICT_H_
#define SENTIER_RUNTIME_VERDICT_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

namespace sentier {

struct StepFigures {
  double ms = -1.0;          // median time of the step
  int64_t peak_bytes = -1;   // peak bytes the step allocates beyond what it started with
};

// kMemoryPolicyDefault: VerdictMargins::memory when no margin is set (NaN): the time-memory
// product and the device share decide.
inline constexpr double kMemoryPolicyDefault = std::numeric_limits<double>::quiet_NaN();

// kDefaultDeviceShare: the share of the device's memory a step may peak at under the default
// policy (sentierd and sentier_opt --max_memory_share).
inline constexpr double kDefaultDeviceShare = 0.5;

// kSmallGrowthShare: under the default policy, growth of a step's peak within this share of the
// device's memory is allowed whatever the speed-up (H200: 139 MiB; a 24 GiB host: 24 MiB).
inline constexpr double kSmallGrowthShare = 1.0 / 1024;

struct VerdictMargins {
  double speed = 0.02;  // a change must win by more than this fraction
  // The default policy (NaN), a margin (>= 0: a fraction of the original's peak), or off (< 0).
  double memory = kMemoryPolicyDefault;
  int64_t memory_floor_bytes = int64_t{4} << 20;  // a peak may exceed its bound by this much
  int64_t max_step_bytes = -1;      // > 0: the owner's absolute budget (replaces every clause)
  int64_t device_limit_bytes = -1;  // default policy: a share of the device's memory (-1: unknown)
  int64_t small_growth_bytes = -1;  // default policy: growth the device cannot miss (-1: unknown)
};

enum class MemoryClause { kTimeMemoryProduct, kSmallGrowth, kDeviceShare, kMargin, kMaxStepBytes, kOff };

inline const char* MemoryClauseName(MemoryClause clause) {
  switch (clause) {
    case MemoryClause::kTimeMemoryProduct: return "time_memory_product";
    case MemoryClause::kSmallGrowth: return "small_growth";
    case MemoryClause::kDeviceShare: return "device_share";
    case MemoryClause::kMargin: return "margin";
    case MemoryClause::kMaxStepBytes: return "max_step_bytes";
    case MemoryClause::kOff: return "off";
  }
  return "off";
}

// PolicyName: the policy in force, in the report's words.
inline std::string MemoryPolicyName(const VerdictMargins& m) {
  if (m.max_step_bytes > 0) return MemoryClauseName(MemoryClause::kMaxStepBytes);
  if (std::isnan(m.memory)) return "time_memory_product+small_growth+device_share";
  return MemoryClauseName(m.memory < 0 ? MemoryClause::kOff : MemoryClause::kMargin);
}

enum class Verdict { kFaster, kNotFaster, kMoreMemory };

// FasterThan: `candidate_ms` beats `reference_ms` by more than the speed margin.
inline bool FasterThan(double candidate_ms, double reference_ms, const VerdictMargins& m) {
  return candidate_ms >= 0 && reference_ms > 0 && candidate_ms < reference_ms * (1.0 - m.speed);
}

// MemoryJudgement: by how many bytes the candidate's peak exceeds what the policy allows (0:
// within bounds) and the clause that set the bound it was judged by (the tightest one).
struct MemoryJudgement {
  int64_t excess_bytes = 0;
  int64_t allowed_bytes = -1;  // -1: no bound (off, or nothing known to bound by)
  MemoryClause clause = MemoryClause::kOff;
};

// JudgeMemory: the memory policy (see the header comment) on one step's figures.
inline MemoryJudgement JudgeMemory(const StepFigures& original, const StepFigures& candidate,
                                   const VerdictMargins& m) {
  MemoryJudgement j;
  auto bound = [&](int64_t allowed, MemoryClause clause) {
    if (j.allowed_bytes < 0 || allowed < j.allowed_bytes) {
      j.allowed_bytes = allowed;
      j.clause = clause;
    }
  };
  const int64_t orig = original.peak_bytes, cand = candidate.peak_bytes;
  if (m.max_step_bytes > 0) {
    bound(m.max_step_bytes, MemoryClause::kMaxStepBytes);
  } else if (!std::isnan(m.memory)) {
    if (m.memory < 0) return j;
    if (orig < 0 || cand < 0) return {cand < 0 && orig < 0 ? 0 : 1, -1, MemoryClause::kMargin};
    bound(std::max(static_cast<int64_t>(static_cast<double>(orig) * (1.0 + m.memory)), orig + m.memory_floor_bytes),
          MemoryClause::kMargin);
  } else {
    if (orig < 0 || cand < 0) return {cand < 0 && orig < 0 ? 0 : 1, -1, MemoryClause::kTimeMemoryProduct};
    const double speedup = candidate.ms > 0 && original.ms > 0 ? std::max(1.0, original.ms / candidate.ms) : 1.0;
    // The product and the small growth are alternatives (the looser one bounds); the device
    // share bounds both.
    int64_t allowed = std::max(static_cast<int64_t>(static_cast<double>(orig) * speedup), orig + m.memory_floor_bytes);
    MemoryClause clause = MemoryClause::kTimeMemoryProduct;
    if (m.small_growth_bytes > 0 && orig + m.small_growth_bytes > allowed) {
      allowed = orig + m.small_growth_bytes;
      clause = MemoryClause::kSmallGrowth;
    }
    bound(allowed, clause);
    if (m.device_limit_bytes > 0) bound(std::max(m.device_limit_bytes, orig), MemoryClause::kDeviceShare);
  }
  if (cand >= 0 && j.allowed_bytes >= 0) j.excess_bytes = std::max<int64_t>(0, cand - j.allowed_bytes);
  return j;
}

// ExcessPeakBytes: JudgeMemory's excess on peaks alone, without times (the owner's absolute
// budget aside): a margin bounds them as usual; the default policy, knowing no speed-up, allows
// the original's peak (and the floor).
inline int64_t ExcessPeakBytes(int64_t original_peak, int64_t candidate_peak, const VerdictMargins& m) {
  VerdictMargins peaks_only = m;
  peaks_only.max_step_bytes = -1;
  return JudgeMemory({-1, original_peak}, {-1, candidate_peak}, peaks_only).excess_bytes;
}

// MemoryMarginNeeded: the smallest memory margin, in hundredths, under which `candidate_peak` is
// within bounds of `original_peak` by the fraction alone (what a user would write as
// the memory margin); 0 when it is not above the original; -1 when a figure is unknown.
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

// Judge: memory first (a faster model whose peak the policy does not allow is not published),
// then speed.
inline Verdict Judge(const StepFigures& original, const StepFigures& candidate, const VerdictMargins& m) {
  if (JudgeMemory(original, candidate, m).excess_bytes > 0) return Verdict::kMoreMemory;
  return FasterThan(candidate.ms, original.ms, m) ? Verdict::kFaster : Verdict::kNotFaster;
}

// OpCounts: top-level aten ops and kernel launches (graph_runner.h's OpTally) of one forward and
// of one training step, forward and backward; -1 where a count could not be taken.
struct OpCounts {
  int64_t forward = -1;
  int64_t training_step = -1;
  int64_t launches_forward = -1;
  int64_t launches_training_step = -1;
};

// UntimedGrowth: with nothing timed, whether the rewritten graph fails to pay: by kernel launches
// where both were counted, it pays only with fewer (a view is free there, a view's backward a
// fill and a copy: a rewrite of split pieces into slices runs fewer aten ops and more kernels per
// training step; a rewrite that saves no launch has nothing to show for its risk: on the H200 the
// conformance set's equal-launch rewrites ran more CUDA kernels, din's ran 0.90x); else by aten
// ops, where it may not run more. Per training step where both were counted (batching adds cheap
// forward ops and removes many backward ones), else per forward. `*what` names the measure, the
// step and the two counts, as "more kernel launches per training step (forward and backward) (122
// vs 116)" or "as many kernel launches per forward (30 vs 30)".
// UntimedLaunches: the launch count of one graph that the untimed decision reads: per training
// step where it was counted, else per forward.
inline int64_t UntimedLaunches(const OpCounts& c) {
  return c.launches_training_step >= 0 ? c.launches_training_step : c.launches_forward;
}

inline bool UntimedGrowth(const OpCounts& before, const OpCounts& after, std::string* what) {
  const bool launches = before.launches_forward >= 0 && after.launches_forward >= 0;
  const int64_t b_step = launches ? before.launches_training_step : before.training_step;
  const int64_t a_step = launches ? after.launches_training_step : after.training_step;
  const bool by_step = b_step >= 0 && a_step >= 0;
  const int64_t b = by_step ? b_step : launches ? before.launches_forward : before.forward;
  const int64_t a = by_step ? a_step : launches ? after.launches_forward : after.forward;
  *what = std::string(a > b ? "more " : "as many ") + (launches ? "kernel launches" : "aten ops") +
          " per " + (by_step ? "training step (forward and backward)" : "forward") + " (" +
          std::to_string(a) + " vs " + std::to_string(b) + ")";
  return launches ? a >= b : a > b;
}

}  // namespace sentier

#endif  // SENTIER_RUNTIME_VERDICT_H_
