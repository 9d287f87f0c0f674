// report.h — the JSON report of one optimization: one schema for `sentier_opt --report` and
// sentierd's report.json, documented in runtime/report_schema.json ("schema_version": 1) and
// checked against both tools' output by their tests (tools/check_report).
//
//   nlohmann::json j = NewReport("sentier_opt");
//   AddOptimization(*optimize_report, &j);      // rule counts, canonicalization, nodes, ...
//   if (measured) AddSelection(selection, Device::kCuda, ValidationMode::kTraining, &j);
//   j["status"] = "optimized"; j["reason"] = "...";
#ifndef SENTIER_RUNTIME_REPORT_H_
#define SENTIER_RUNTIME_REPORT_H_

#include <nlohmann/json.hpp>

#include "absl/strings/string_view.h"
#include "passes/optimizer.h"
#include "runtime/cost_selection.h"
#include "runtime/options_enums.h"
#include "runtime/report_schema.h"

namespace sentier {

// NewReport: {"schema_version": 1, "tool": tool, "timings_ms": {}}.
nlohmann::json NewReport(absl::string_view tool);

// AddOptimization: rule_counts, rewrites, grouped_members, rejected_by_legality, rewrite_errors,
// stopped_rules, canonicalize, rounds, hit_round_limit, nodes_before/after, shape_facts(_error),
// timings_ms.optimize.
void AddOptimization(const OptimizeReport& report, nlohmann::json* j);

// AddSelection: the gate's measurements under "selection".
void AddSelection(const CostSelection& selection, Device device, ValidationMode mode,
                  nlohmann::json* j);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_REPORT_H_
