// report.cc — the report of an outcome (runtime/report_schema.json): the one place
// where sentier_opt's --report, sentierd's report.json and model_bench's decisions get their
// fields, and where an earlier version's report is read back for a reused decision.
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/report.h"

namespace sentier {
namespace {

// AddOptimization: rule_counts, rewrites, grouped_members, rejected_by_legality, rewrite_errors,
// stopped_rules, canonicalize, rounds, hit_round_limit, nodes_before/after, shape_facts(_error),
// timings_ms.optimize.
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

// AddSelection: the gate's measurements under "selection".
void AddSelection(const GateSelection& selection, Device device, ValidationMode mode,
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
  if (selection.margin_for_all_rules >= 0) {
    (*j)["selection"]["all_rules_ms"] = selection.all_rules_ms;
    (*j)["selection"]["all_rules_peak_bytes"] = selection.all_rules_peak_bytes;
    (*j)["selection"]["memory_margin_for_all_rules"] = selection.margin_for_all_rules;
  }
}


void AddSource(const PipelineRequest& req, const Outcome& out, nlohmann::json* j) {
  (*j)["source"] = req.model_path;
  if (req.rules) {
    (*j)["rules_fingerprint"] = req.rules->Fingerprint();
    (*j)["rules_loaded"] = req.rules->size();
  }
  (*j)["mode"] = std::string(ValidationModeName(req.options.mode));
  (*j)["param_layout"] = std::string(ParameterLayoutName(
      out.layout_choice ? out.layout_choice->chosen : req.options.param_layout));
  (*j)["device"] = std::string(DeviceName(out.placement.device));
  if (!out.placement.device_note.empty()) (*j)["device_note"] = out.placement.device_note;
  if (!out.loaded) return;
  const LoadedModel& loaded = *out.loaded;
  if (!loaded.source_sha256.empty()) (*j)["source_sha256"] = loaded.source_sha256;
  if (!loaded.inputs_sha256.empty()) (*j)["inputs_sha256"] = loaded.inputs_sha256;
  (*j)["architecture_fingerprint"] = loaded.architecture_fingerprint;
}

// The memory policy in force (runtime/verdict.h) and, where figures were judged, the clause that
// set the bound.
void AddMemoryPolicy(const Outcome& out, nlohmann::json* j) {
  const VerdictMargins& m = out.placement.margins;
  if (!std::isnan(m.memory)) (*j)["memory_margin"] = m.memory;
  nlohmann::json policy = {{"policy", MemoryPolicyName(m)}};
  if (m.device_limit_bytes > 0) policy["device_limit_bytes"] = m.device_limit_bytes;
  if (std::isnan(m.memory) && m.max_step_bytes <= 0 && m.small_growth_bytes > 0) {
    policy["small_growth_bytes"] = m.small_growth_bytes;
  }
  if (m.max_step_bytes > 0) policy["max_step_bytes"] = m.max_step_bytes;
  if (out.memory) {
    policy["clause"] = MemoryClauseName(out.memory->clause);
    policy["allowed_bytes"] = out.memory->allowed_bytes;
    policy["excess_bytes"] = out.memory->excess_bytes;
  }
  (*j)["memory_policy"] = policy;
}

void AddOpCounts(const Outcome& out, nlohmann::json* j) {
  if (!out.loaded) return;
  const OpCounts& before = out.loaded->ops;
  if (before.forward >= 0) (*j)["aten_ops_per_forward_before"] = before.forward;
  if (before.training_step >= 0) (*j)["aten_ops_per_training_step_before"] = before.training_step;
  if (before.launches_forward >= 0) (*j)["kernel_launches_per_forward_before"] = before.launches_forward;
  if (before.launches_training_step >= 0) {
    (*j)["kernel_launches_per_training_step_before"] = before.launches_training_step;
  }
  if (out.status == ReportStatus::kRejected) return;
  const OpCounts& after = out.ops_after;
  if (after.forward >= 0) (*j)["aten_ops_per_forward_after"] = after.forward;
  if (after.training_step >= 0) (*j)["aten_ops_per_training_step_after"] = after.training_step;
  if (after.launches_forward >= 0) (*j)["kernel_launches_per_forward_after"] = after.launches_forward;
  if (after.launches_training_step >= 0) {
    (*j)["kernel_launches_per_training_step_after"] = after.launches_training_step;
  }
  if (out.status == ReportStatus::kOptimized && !out.untimed_dropped.empty()) {
    (*j)["untimed_dropped_rules"] = out.untimed_dropped;
  }
}

// Timed figures of the judged step and the CUDA kernel counts, where the check timed them.
void AddTimedValidation(const PipelineRequest& req, const CheckReport& c, nlohmann::json* val) {
  const bool training = req.options.mode != ValidationMode::kInference;
  (*val)[training ? "training_step_ms" : "forward_ms"] = {
      {"reference", training ? c.reference_train_ms : c.reference_ms},
      {"candidate", training ? c.candidate_train_ms : c.candidate_ms}};
  (*val)[training ? "training_step_peak_bytes" : "forward_peak_bytes"] = {
      {"reference", training ? c.reference_train_peak_bytes : c.reference_peak_bytes},
      {"candidate", training ? c.candidate_train_peak_bytes : c.candidate_peak_bytes}};
  (*val)["cuda_kernels_per_forward"] = {{"reference", c.cuda_kernels_forward_reference},
                                        {"candidate", c.cuda_kernels_forward_candidate}};
  (*val)["cuda_kernels_per_training_step"] = {{"reference", c.cuda_kernels_step_reference},
                                              {"candidate", c.cuda_kernels_step_candidate}};
}

void AddValidation(const PipelineRequest& req, const Outcome& out, nlohmann::json* j) {
  const std::string mode(ValidationModeName(req.options.mode));
  if (!req.validate || out.status == ReportStatus::kRejected) return;
  if (!out.validation) {
    (*j)["validation"] = {{"mode", mode}, {"result", "skipped: the artifact is the original"}};
    return;
  }
  const CheckReport& c = out.validation->check;
  nlohmann::json val = {{"mode", mode},
                        {"device", std::string(DeviceName(out.placement.device))},
                        {"result", "outputs and gradients match"},
                        {"tensors_compared", c.findings.size()},
                        {"judgement", c.own_dtype_judgement.empty() ? "float64 reference" : "own dtype"}};
  if (!c.own_dtype_judgement.empty()) val["own_dtype_reason"] = c.own_dtype_judgement;
  if (out.placement.timed) {
    val["timing"] = std::string(StepTimingName(out.validation->timing));
    if (!c.timing_fallback.empty()) val["timing_fallback"] = c.timing_fallback;
    AddTimedValidation(req, c, &val);
    if (out.validation->reference_from_version) {
      val["reference_timed_in_version"] = *out.validation->reference_from_version;
    }
    if (out.validation->reference_from_gate) val["reference_timed_by_gate"] = true;
    if (!out.validation->reference_retimed.empty()) val["reference_retimed"] = out.validation->reference_retimed;
  }
  (*j)["validation"] = val;
}

// ReadReferenceStep: the original's judged step from a report's CUDA validation, where it has one.
void ReadReferenceStep(const nlohmann::json& report, ReusableDecision* d) {
  if (!report.contains("validation")) return;
  const nlohmann::json& val = report["validation"];
  const std::string step = d->mode == "inference" ? "forward" : "training_step";
  if (val.value("device", "") != "cuda" || !val.contains(step + "_ms") || !val.contains(step + "_peak_bytes") ||
      !val.contains("timing")) {
    return;
  }
  d->reference_step_ms = val[step + "_ms"].value("reference", -1.0);
  d->reference_step_peak_bytes = val[step + "_peak_bytes"].value("reference", int64_t{-1});
  d->reference_timing = val["timing"].get<std::string>();
}

// AddStackedLayoutAdvice: what the stacked layout would give (the advise stage), with the setting.
void AddStackedLayoutAdvice(const Outcome& out, nlohmann::json* j) {
  if (!out.stacked_layout || !out.loaded) return;
  const StackedLayoutAdvice& a = *out.stacked_layout;
  const OpCounts& before = out.loaded->ops;
  nlohmann::json advice = {{"stacked_parameters", a.stacked_parameters},
                           {"setting", kStackedLayoutSetting},
                           {"checkpoints", "sentier_state --artifact=A.pt --to_original|--from_original"},
                           {"summary", StackedLayoutAdviceText(a, before)}};
  if (a.ops.launches_training_step >= 0) {
    advice["kernel_launches_per_training_step"] = {{"original", before.launches_training_step},
                                                   {"stacked", a.ops.launches_training_step}};
  }
  advice["kernel_launches_per_forward"] = {{"original", before.launches_forward}, {"stacked", a.ops.launches_forward}};
  if (a.step_ms > 0 && a.original_step_ms > 0) {
    advice["step_ms"] = {{"original", a.original_step_ms}, {"stacked", a.step_ms}};
    advice["peak_bytes"] = {{"original", a.original_peak_bytes}, {"stacked", a.peak_bytes}};
    advice["speedup"] = a.original_step_ms / a.step_ms;
    advice["timing"] = std::string(StepTimingName(a.timing));
  }
  if (!a.timing_error.empty()) advice["timing_error"] = a.timing_error;
  (*j)["stacked_layout_advice"] = advice;
}

// AddLayoutChoice: with param_layout auto, the layout chosen, why, and what each layout gave.
void AddLayoutChoice(const Outcome& out, nlohmann::json* j) {
  if (!out.layout_choice) return;
  const LayoutChoice& c = *out.layout_choice;
  nlohmann::json choice = {{"requested", "auto"},
                           {"chosen", std::string(ParameterLayoutName(c.chosen))},
                           {"why", c.why}};
  for (const auto& [name, side] : {std::pair<const char*, const LayoutChoice::Side&>{"original", c.original},
                                   {"stacked", c.stacked}}) {
    if (!side.decided) continue;
    choice[name] = {{"status", side.status}, {"measure", side.measure}};
    if (side.gain > 0) choice[name]["gain"] = side.gain;
  }
  (*j)["layout_choice"] = choice;
}

}  // namespace

// MemoryPolicyKey: the memory policy and its figures, as a reused decision is compared.
std::string MemoryPolicyKey(const VerdictMargins& m) {
  return absl::StrCat(MemoryPolicyName(m), ";", MemoryMarginName(m.memory), ";", std::max<int64_t>(m.max_step_bytes, 0));
}

nlohmann::json BuildReport(const PipelineRequest& req, const Outcome& out, absl::string_view tool) {
  nlohmann::json j = NewReport(tool);
  AddSource(req, out, &j);
  j["options"] = EncodeOptions(req.options);
  if (out.loaded && out.loaded->format) {
    j["model_format"] = {{"name", std::string(out.loaded->format->name())}, {"run_as", out.loaded->format->RunAs()}};
  }
  if (out.selection) AddSelection(*out.selection, out.placement.device, req.options.mode, &j);
  if (out.optimization) {
    AddOptimization(*out.optimization, &j);
    if (!out.optimization->param_layout.empty()) {
      j["stacked_parameters"] = nlohmann::json::parse(out.optimization->param_layout.ToJson())["stacked"];
    }
  }
  AddMemoryPolicy(out, &j);
  if (!out.reuse_note.empty()) {
    j["decision_reuse"] = {{"reused", out.reused_from.has_value()}, {"note", out.reuse_note}};
    if (out.reused_from) j["decision_reuse"]["from_version"] = *out.reused_from;
  }
  AddOpCounts(out, &j);
  AddValidation(req, out, &j);
  AddStackedLayoutAdvice(out, &j);
  AddLayoutChoice(out, &j);
  j["status"] = std::string(ReportStatusName(out.status));
  j["reason"] = out.reason;
  j["decision"] = std::string(DecisionClauseName(out.clause));
  if (out.failed_stage) j["failed_stage"] = std::string(PipelineStageName(*out.failed_stage));
  if (!out.artifact_sha256.empty()) j["artifact_sha256"] = out.artifact_sha256;
  for (const auto& [stage, ms] : out.timings_ms) j["timings_ms"][stage] = ms;
  return j;
}

absl::StatusOr<ReusableDecision> ReusableDecisionFromReport(const nlohmann::json& report, int64_t version) {
  ReusableDecision d;
  d.version = version;
  try {
    d.architecture_fingerprint = report.at("architecture_fingerprint").get<std::string>();
    d.rules_fingerprint = report.at("rules_fingerprint").get<std::string>();
    d.param_layout = report.at("param_layout").get<std::string>();
    d.mode = report.at("mode").get<std::string>();
    auto status = ParseReportStatus(report.at("status").get<std::string>());
    if (!status.ok()) return status.status();
    d.status = *status;
    d.reason = report.value("reason", "");
    ReadReferenceStep(report, &d);
    for (const auto& [name, n] : report.at("rule_counts").items()) d.rules_applied.push_back(name);
    const nlohmann::json& policy = report.at("memory_policy");
    VerdictMargins m;
    m.memory = report.contains("memory_margin") ? report["memory_margin"].get<double>() : kMemoryPolicyDefault;
    m.max_step_bytes = policy.value("max_step_bytes", int64_t{-1});
    d.memory_policy = MemoryPolicyKey(m);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("the report of version ", version, " lacks what a reuse needs: ", e.what()));
  }
  return d;
}

}  // namespace sentier
