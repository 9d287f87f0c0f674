#include "runtime/daemon/optimize_job.h"

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <glog/logging.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include "absl/strings/str_cat.h"
#include "runtime/daemon/model_config.h"
#include "runtime/equivalence_checker.h"
#include "runtime/file_util.h"
#include "runtime/model_io.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/report.h"
#include "runtime/torch_settings.h"
#include "runtime/daemon/version_files.h"

// LibTorch built without glog (pip torch) defines its own LOG in c10/util/Logging.h, included
// after glog's here, and drops LOG(INFO) at c10's default level: this file logs through glog, as
// the rest of sentierd does.
#undef LOG
#define LOG(severity) COMPACT_GOOGLE_LOG_##severity.stream()

namespace sentier {
namespace {

std::string Tag(const JobSpec& spec) { return absl::StrCat("[", spec.model, "/", spec.version, "] job: "); }

// WriteJobReport: job.json in the staging directory (a rejected version has no model.pt).
int WriteJobReport(const JobSpec& spec, const nlohmann::json& j) {
  if (j["status"] == std::string(ReportStatusName(ReportStatus::kRejected))) {
    RemoveModelFiles(spec.stage_dir);
    LOG(WARNING) << Tag(spec) << "rejected: " << j["reason"].get<std::string>();
  }
  absl::Status st = WriteFileSynced(spec.stage_dir + "/job.json", j.dump(2) + "\n");
  if (!st.ok()) {
    LOG(ERROR) << Tag(spec) << "cannot write the output: " << st.message();
    return kJobExitOutputFailed;
  }
  return 0;
}

int Reject(const JobSpec& spec, const std::string& reason) {
  nlohmann::json j = NewReport("sentierd");
  j["source"] = absl::StrCat(spec.source_dir, "/", ModelFileIn(spec.source_dir));
  j["status"] = std::string(ReportStatusName(ReportStatus::kRejected));
  j["reason"] = reason;
  return WriteJobReport(spec, j);
}

// ModelOptions: the daemon's options, with REG/<model>/sentier.json over them.
absl::StatusOr<PipelineOptions> ModelOptions(const JobSpec& spec) {
  PipelineOptions options = spec;
  const std::string config_path = absl::StrCat(spec.source_dir, "/../", kModelConfigFile);
  if (std::filesystem::exists(config_path)) {
    auto text = ReadFile(config_path);
    if (!text.ok()) return absl::InvalidArgumentError(text.status().message());
    absl::Status applied = ApplyModelConfigJson(*text, &options);
    if (!applied.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("'", config_path, "': ", applied.message()));
    }
  }
  if (absl::Status can = CheckStepTiming(options.timing); !can.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("'", config_path, "': ", can.message()));
  }
  return options;
}

// EarlierDecision: the decision of the earlier version the daemon named, when its report can be
// read (otherwise the version gets the full search, and the log says why).
std::optional<ReusableDecision> EarlierDecision(const JobSpec& spec) {
  if (spec.reuse_report.empty()) return std::nullopt;
  auto text = ReadFile(spec.reuse_report);
  nlohmann::json report = text.ok() ? nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false)
                                    : nlohmann::json();
  auto decision = report.is_object() ? ReusableDecisionFromReport(report, spec.reuse_version)
                                     : absl::InvalidArgumentError(absl::StrCat("cannot read ", spec.reuse_report));
  if (!decision.ok()) {
    LOG(WARNING) << Tag(spec) << "no decision to reuse: " << decision.status().message();
    return std::nullopt;
  }
  return *decision;
}

PipelineRequest JobRequest(const JobSpec& spec, const PipelineOptions& options,
                           std::shared_ptr<const RuleSet> rules) {
  PipelineRequest req;
  const std::string model_file = ModelFileIn(spec.source_dir);
  req.model_path = absl::StrCat(spec.source_dir, "/", model_file);
  req.inputs_path = absl::StrCat(spec.source_dir, "/", kInputsFile);
  // An exported program holds its sample inputs; an inputs.pt beside it is read instead.
  if (model_file == kExportedModelFile && !std::filesystem::exists(req.inputs_path)) req.inputs_path.clear();
  req.rules = std::move(rules);
  req.options = options;
  req.artifact_path = absl::StrCat(spec.stage_dir, "/", model_file);
  req.validate = true;
  req.reuse = EarlierDecision(spec);
  return req;
}

}  // namespace

int RunOptimizeJob(const JobSpec& spec) {
  ApplyTorchSettings();  // the job process's LibTorch switches, once, first
  auto config = ModelOptions(spec);
  if (!config.ok()) return Reject(spec, absl::StrCat("bad sentier.json: ", config.status().message()));
  auto rules = LoadRules({spec.rules_dir});
  if (!rules.ok()) return Reject(spec, absl::StrCat("rules failed to load: ", rules.status().message()));
  const PipelineRequest req = JobRequest(spec, *config, *rules);
  const Outcome out = OptimizeModel(req);
  if (out.output_failed) {
    LOG(ERROR) << Tag(spec) << "cannot write the output: " << out.error.message();
    return kJobExitOutputFailed;
  }
  if (!out.placement.device_note.empty()) LOG(WARNING) << Tag(spec) << out.placement.device_note;
  if (out.stacked_layout) LOG(INFO) << Tag(spec) << StackedLayoutAdviceText(*out.stacked_layout, out.loaded->ops);
  if (out.layout_choice) LOG(INFO) << Tag(spec) << "param_layout auto: " << out.layout_choice->why;
  return WriteJobReport(spec, BuildReport(req, out, "sentierd"));
}

absl::StatusOr<RulesInfo> LoadRulesFingerprint(const std::vector<std::string>& paths) {
  try {
    auto rules = LoadRules(paths);
    if (!rules.ok()) return rules.status();
    return RulesInfo{(*rules)->Fingerprint(), static_cast<int64_t>((*rules)->size())};
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
  }
}

std::string ShippedRulesDir() { return DefaultRulesDir(); }

bool CudaAvailable() { return torch::cuda::is_available(); }

}  // namespace sentier
