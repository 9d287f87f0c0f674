// pipeline_report.cc — the report of an outcome (runtime/report_schema.json): the one place
// where sentier_opt's --report, sentierd's report.json and model_bench's decisions get their
// fields.
#include <cmath>

#include <nlohmann/json.hpp>

#include "runtime/pipeline.h"
#include "runtime/report.h"

namespace sentier {
namespace {

void AddSource(const PipelineRequest& req, const Outcome& out, nlohmann::json* j) {
  (*j)["source"] = req.model_path;
  if (req.rules) {
    (*j)["rules_fingerprint"] = req.rules->Fingerprint();
    (*j)["rules_loaded"] = req.rules->size();
  }
  (*j)["mode"] = std::string(ValidationModeName(req.mode));
  (*j)["param_layout"] = std::string(ParameterLayoutName(req.param_layout));
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
  const bool training = req.mode != ValidationMode::kInference;
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
  const std::string mode(ValidationModeName(req.mode));
  if (!req.validate || out.status == ReportStatus::kRejected) return;
  if (!out.validation) {
    (*j)["validation"] = {{"mode", mode}, {"result", "skipped: the artifact is the original"}};
    return;
  }
  const CheckReport& c = out.validation->check;
  nlohmann::json val = {{"mode", mode},
                        {"device", std::string(DeviceName(out.placement.device))},
                        {"result", "outputs and gradients match"},
                        {"tensors_compared", c.findings.size()}};
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

}  // namespace

nlohmann::json BuildReport(const PipelineRequest& req, const Outcome& out, absl::string_view tool) {
  nlohmann::json j = NewReport(tool);
  AddSource(req, out, &j);
  if (out.selection) AddSelection(*out.selection, out.placement.device, req.mode, &j);
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
  j["status"] = std::string(ReportStatusName(out.status));
  j["reason"] = out.reason;
  j["decision"] = std::string(DecisionClauseName(out.clause));
  if (!out.artifact_sha256.empty()) j["artifact_sha256"] = out.artifact_sha256;
  for (const auto& [stage, ms] : out.timings_ms) j["timings_ms"][stage] = ms;
  return j;
}

}  // namespace sentier
