// decision_clause.h — the clauses of the optimization pipeline's decide stage (runtime/pipeline/pipeline.h)
// and their words in report.json's "decision". No LibTorch: sentierd's parent process counts
// versions by clause (runtime/daemon/daemon_metrics) from these names.
//
//   for (DecisionClause c : kDecisionClauses) Count(DecisionClauseName(c));
#ifndef SENTIER_RUNTIME_DECISION_CLAUSE_H_
#define SENTIER_RUNTIME_DECISION_CLAUSE_H_

#include "absl/strings/string_view.h"

namespace sentier {

// The clause that decided an outcome.
enum class DecisionClause {
  kNoRuleApplied,       // nothing fired (or the gate kept no rule)
  kGateNothingPays,     // the gate: no set of rules was faster
  kGateOverMemory,      // the gate: every set that changes the model is over the memory policy
  kGateNotConfirmed,    // the gate: faster at first, not when timed again
  kGateExecutorStall,   // the gate: the optimized model's step made no progress under the executor
  kUntimedGrowth,       // nothing timed, and the graph makes no fewer kernel launches
  kTimedNotFaster,      // the validated artifact was not faster on the device
  kTimedMoreMemory,     // the validated artifact needed more peak memory than the policy allows
  kReusedUnchanged,     // an earlier version's decision (unchanged) reused
  kOptimized,           // published optimized
  kFailed,              // rejected, or the output could not be written
};

// Every clause, in the order above.
inline constexpr DecisionClause kDecisionClauses[] = {
    DecisionClause::kNoRuleApplied,   DecisionClause::kGateNothingPays, DecisionClause::kGateOverMemory,
    DecisionClause::kGateNotConfirmed, DecisionClause::kGateExecutorStall, DecisionClause::kUntimedGrowth,  DecisionClause::kTimedNotFaster,
    DecisionClause::kTimedMoreMemory, DecisionClause::kReusedUnchanged, DecisionClause::kOptimized,
    DecisionClause::kFailed};

// DecisionClauseName: report.json's word for the clause (runtime/report_schema.json).
inline absl::string_view DecisionClauseName(DecisionClause clause) {
  switch (clause) {
    case DecisionClause::kNoRuleApplied: return "no_rule_applied";
    case DecisionClause::kGateNothingPays: return "gate_nothing_pays";
    case DecisionClause::kGateOverMemory: return "gate_over_memory";
    case DecisionClause::kGateNotConfirmed: return "gate_not_confirmed";
    case DecisionClause::kGateExecutorStall: return "gate_executor_stall";
    case DecisionClause::kUntimedGrowth: return "untimed_growth";
    case DecisionClause::kTimedNotFaster: return "timed_not_faster";
    case DecisionClause::kTimedMoreMemory: return "timed_more_memory";
    case DecisionClause::kReusedUnchanged: return "reused_unchanged";
    case DecisionClause::kOptimized: return "optimized";
    case DecisionClause::kFailed: return "failed";
  }
  return "failed";
}

}  // namespace sentier

#endif  // SENTIER_RUNTIME_DECISION_CLAUSE_H_
