// report.cc — builds the report of one optimization (see the header and report_schema.json).
#include "runtime/report.h"

namespace sentier {

nlohmann::json NewReport(absl::string_view tool) {
  nlohmann::json j;
  j["schema_version"] = kReportSchemaVersion;
  j["tool"] = std::string(tool);
  j["timings_ms"] = nlohmann::json::object();
  return j;
}

void AddOptimization(const OptimizeReport& report, nlohmann::json* j) {
  const RewriteStats& stats = report.stats;
  int64_t total = 0;
  nlohmann::json counts = nlohmann::json::object();
  for (const auto& [name, n] : stats.applications) {
    counts[name] = n;
    total += n;
  }
  (*j)["rule_counts"] = counts;
  (*j)["rewrites"] = total;
  (*j)["grouped_members"] = nlohmann::json::object();
  for (const auto& [name, n] : stats.grouped_members) (*j)["grouped_members"][name] = n;
  (*j)["rejected_by_legality"] = nlohmann::json::object();
  for (const auto& [name, n] : stats.rejected) (*j)["rejected_by_legality"][name] = n;
  (*j)["rewrite_errors"] = nlohmann::json::object();
  for (const auto& [name, n] : stats.errors) {
    auto first = stats.first_error.find(name);
    (*j)["rewrite_errors"][name] = {{"count", n},
                                    {"first", first == stats.first_error.end() ? "" : first->second}};
  }
  (*j)["stopped_rules"] = nlohmann::json::object();
  for (const auto& [name, why] : stats.stopped) (*j)["stopped_rules"][name] = why;
  (*j)["canonicalize"] = nlohmann::json::object();
  for (const auto& [name, n] : report.canonicalize) (*j)["canonicalize"][name] = n;
  (*j)["rounds"] = stats.rounds;
  (*j)["hit_round_limit"] = stats.hit_round_limit;
  (*j)["nodes_before"] = report.nodes_before;
  (*j)["nodes_after"] = report.nodes_after;
  (*j)["shape_facts"] = report.shape_facts;
  if (!report.shape_facts_error.empty()) (*j)["shape_facts_error"] = report.shape_facts_error;
  (*j)["timings_ms"]["optimize"] = report.optimize_ms;
}

void AddSelection(const CostSelection& selection, Device device, ValidationMode mode,
                  nlohmann::json* j) {
  (*j)["selection"] = {{"device", std::string(DeviceName(device))},
                       {"mode", std::string(ValidationModeName(mode))},
                       {"param_layout", std::string(ParameterLayoutName(
                                            selection.stacked_parameters ? ParameterLayout::kStacked
                                                                         : ParameterLayout::kOriginal))},
                       {"timing", std::string(StepTimingName(selection.timing))},
                       {"faster", selection.faster},
                       {"within_memory", selection.within_memory},
                       {"nothing_fires_within_memory", selection.nothing_fires_within_memory},
                       {"confirmed", selection.confirmed},
                       {"dropped_rules", selection.dropped},
                       {"original_ms", selection.original_ms},
                       {"optimized_ms", selection.optimized_ms},
                       {"original_peak_bytes", selection.original_peak_bytes},
                       {"optimized_peak_bytes", selection.optimized_peak_bytes},
                       {"log", selection.log}};
  if (!selection.timing_fallback.empty()) (*j)["selection"]["timing_fallback"] = selection.timing_fallback;
  if (selection.memory_margin_for_all_rules >= 0) {
    (*j)["selection"]["all_rules_ms"] = selection.all_rules_ms;
    (*j)["selection"]["all_rules_peak_bytes"] = selection.all_rules_peak_bytes;
    (*j)["selection"]["memory_margin_for_all_rules"] = selection.memory_margin_for_all_rules;
  }
}

}  // namespace sentier
