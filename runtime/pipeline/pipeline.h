// pipeline.h — what happens to a model: the one optimization pipeline that `sentier_opt`,
// sentierd's job and `model_bench` run. They differ only in where the request comes from (flags,
// the registry and sentier.json, a bench model) and where the outcome goes (a file and stdout,
// the staging directory and job.json, a benchmark table).
//
//   PipelineRequest req;
//   req.model_path = "ranker/3/model.pt";  req.inputs_path = "ranker/3/inputs.pt";
//   req.rules = *LoadRules({DefaultRulesDir()});
//   req.artifact_path = "stage/model.pt";  req.options = DefaultOptions(Tool::kSentierd);
//   req.options.device = Device::kCuda;    req.validate = true;
//   Outcome out = OptimizeModel(req);        // never throws
//   nlohmann::json report = BuildReport(req, out, "sentierd");
//
// The stages (load, reuse, place, gate, rewrite, count, untimed, save, validate, decide), their
// results and the request: runtime/pipeline/stages.h. The model's format is behind
// runtime/model_format.h: no stage knows it.
#ifndef SENTIER_RUNTIME_PIPELINE_PIPELINE_H_
#define SENTIER_RUNTIME_PIPELINE_PIPELINE_H_

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/pipeline/stages.h"

namespace sentier {

// ReusableDecisionFromReport: the decision a report.json records; an error where the report
// lacks what a reuse needs (then the version gets the full search).
absl::StatusOr<ReusableDecision> ReusableDecisionFromReport(const nlohmann::json& report, int64_t version);

// OptimizeModel: runs the stages in order; never throws (a LibTorch exception is a rejection
// "crash: ..."). The artifact at `artifact_path` exists when the status is not rejected and the
// output could be written.
Outcome OptimizeModel(const PipelineRequest& request);

// BuildReport: the report of an outcome (runtime/report_schema.json), for `tool`.
nlohmann::json BuildReport(const PipelineRequest& request, const Outcome& outcome,
                           absl::string_view tool);

// ArchitectureFingerprint: sha256 of the inlined forward graph's text, without TorchScript's
// class-name mangling: equal for the same architecture whatever its weights.
std::string ArchitectureFingerprint(const torch::jit::Graph& graph);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_PIPELINE_PIPELINE_H_
