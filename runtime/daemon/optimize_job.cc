#include "runtime/daemon/optimize_job.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include <glog/logging.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "re2/re2.h"
#include "absl/strings/str_format.h"
#include "passes/digest.h"
#include "passes/optimizer.h"
#include "runtime/cost_selection.h"
#include "runtime/daemon/model_config.h"
#include "runtime/equivalence_checker.h"
#include "runtime/file_util.h"
#include "runtime/graph_runner.h"
#include "runtime/model_io.h"
#include "runtime/report.h"
#include "runtime/torch_settings.h"
#include "runtime/verdict.h"
#include "passes/torch_error.h"

namespace sentier {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// ArchFingerprint: sha256 of the inlined forward graph's text. Parameter values are module
// attributes (not in the text); TorchScript's class-name mangling is removed so that the same
// source saved twice gives the same fingerprint.
std::string ArchFingerprint(const std::shared_ptr<torch::jit::Graph>& graph) {
  auto copy = graph->copy();
  torch::jit::Inline(*copy);
  std::string text = copy->toString(/*print_source_locations=*/false);
  RE2::GlobalReplace(&text, R"(___torch_mangle_[0-9]+\.)", "");
  return Sha256Hex(text);
}

int Finish(const JobSpec& spec, nlohmann::json j) {
  if (j["status"] == std::string(ReportStatusName(ReportStatus::kRejected))) {
    std::filesystem::remove(spec.stage_dir + "/model.pt");
    LOG(WARNING) << "[" << spec.model << "/" << spec.version << "] job: rejected: "
                 << j["reason"].get<std::string>();
  }
  absl::Status st = WriteFileSynced(spec.stage_dir + "/job.json", j.dump(2) + "\n");
  if (!st.ok()) {
    LOG(ERROR) << "[" << spec.model << "/" << spec.version << "] job: cannot write the output: "
               << st.message();
    return kJobExitOutputFailed;
  }
  return 0;
}

// OutputFailed: the staging directory could not be written (disk full, quota, I/O error). That
// says nothing about the model, so the version is not rejected: the daemon retries it.
int OutputFailed(const JobSpec& spec, absl::string_view what) {
  LOG(ERROR) << "[" << spec.model << "/" << spec.version << "] job: cannot write the output: " << what;
  return kJobExitOutputFailed;
}

absl::Status CopyOriginal(const std::string& from, const std::string& to) {
  std::error_code ec;
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot copy '", from, "' to '", to, "': ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

int RunOptimizeJob(const JobSpec& spec) {
  ApplyTorchSettings();  // the job process's LibTorch switches, once, first
  nlohmann::json j = NewReport("sentierd");
  nlohmann::json timings = nlohmann::json::object();
  auto reject = [&](const std::string& reason) {
    j["status"] = std::string(ReportStatusName(ReportStatus::kRejected));
    j["reason"] = reason;
    j["timings_ms"] = timings;
    return Finish(spec, j);
  };
  try {
    const std::string model_path = spec.source_dir + "/model.pt";
    const std::string inputs_path = spec.source_dir + "/inputs.pt";
    j["source"] = model_path;
    // Per-model options: REG/<model>/sentier.json over the daemon's flags.
    ModelConfig config;
    config.param_layout = spec.param_layout;
    config.memory_margin = spec.memory_margin;
    config.mode = spec.mode;
    config.timing = spec.timing;
    const std::string config_path = absl::StrCat(spec.source_dir, "/../", kModelConfigFile);
    if (std::filesystem::exists(config_path)) {
      auto text = ReadFile(config_path);
      if (!text.ok()) return reject(absl::StrCat("bad sentier.json: ", text.status().message()));
      absl::Status applied = ApplyModelConfigJson(*text, &config);
      if (!applied.ok()) {
        return reject(absl::StrCat("bad sentier.json: '", config_path, "': ", applied.message()));
      }
    }
    if (absl::Status can = CheckStepTiming(config.timing); !can.ok()) {
      return reject(absl::StrCat("bad sentier.json: '", config_path, "': ", can.message()));
    }
    const ValidationMode job_mode = config.mode;
    const std::string mode(ValidationModeName(job_mode));
    j["mode"] = mode;
    auto t0 = Clock::now();
    auto src_sha = Sha256OfFile(model_path);
    if (src_sha.ok()) j["source_sha256"] = *src_sha;
    auto in_sha = Sha256OfFile(inputs_path);
    if (in_sha.ok()) j["inputs_sha256"] = *in_sha;
    auto rules = LoadRules({spec.rules_dir});
    if (!rules.ok()) return reject(absl::StrCat("rules failed to load: ", rules.status().message()));
    j["rules_fingerprint"] = (*rules)->Fingerprint();
    j["rules_loaded"] = (*rules)->size();
    auto model = LoadModel(model_path);
    if (!model.ok()) return reject(absl::StrCat("load failure: ", model.status().message()));
    if (!model->is_module) return reject("load failure: model.pt is not a TorchScript module");
    if (!std::filesystem::exists(inputs_path)) {
      return reject(absl::StrCat("load failure: sample inputs '", inputs_path, "' are missing"));
    }
    auto inputs = LoadSampleInputsFor(inputs_path, model->module);
    if (!inputs.ok()) return reject(absl::StrCat("load failure: ", inputs.status().message()));
    timings["load"] = MsSince(t0);
    j["architecture_fingerprint"] = ArchFingerprint(model->graph);

    std::vector<c10::IValue> samples = {model->module._ivalue()};
    samples.insert(samples.end(), inputs->begin(), inputs->end());
    auto original = model->graph->copy();
    auto before_ops = CountAtenOps(original, samples);
    if (!before_ops.ok()) {
      return reject(absl::StrCat("load failure: the model does not run on its sample inputs: ",
                                 before_ops.status().message()));
    }
    j["aten_ops_per_forward_before"] = *before_ops;
    const bool training = job_mode != ValidationMode::kInference;
    // Per training step too (forward and backward), which decides whether an untimed, larger
    // graph is published when the job validates training (verdict.h).
    OpCounts ops_before{*before_ops, -1};
    if (training) {
      auto s = CountAtenOpsPerTrainingStep(model->graph->copy(), samples);
      if (s.ok()) {
        ops_before.training_step = *s;
        j["aten_ops_per_training_step_before"] = *s;
      }
    }
    // Where the job validates and times. A model that does not run on the GPU (it creates CPU
    // tensors in forward, say) is validated on the CPU, and the report says why.
    Device device = spec.device;
    bool select = spec.select_rules;
    if (device == Device::kCuda) {
      absl::Status runs = RunsOnDevice(model->module, *inputs, Device::kCuda, training);
      if (absl::IsFailedPrecondition(runs)) {
        j["device_note"] = absl::StrCat(runs.message(), "; validated on the CPU instead");
        LOG(WARNING) << "[" << spec.model << "/" << spec.version << "] job: " << runs.message()
                     << "; validating on the CPU";
        device = Device::kCpu;
        select = false;
      } else if (!runs.ok()) {
        return reject(absl::StrCat("load failure: ", runs.message()));
      }
    }
    const std::string device_name(DeviceName(device));
    j["device"] = device_name;
    const ParameterLayout param_layout = config.param_layout;
    j["param_layout"] = std::string(ParameterLayoutName(param_layout));
    const bool stacked = param_layout == ParameterLayout::kStacked;
    const bool timed = device == Device::kCuda;
    VerdictMargins margins;
    margins.memory = config.memory_margin;
    j["memory_margin"] = config.memory_margin;
    // The never-slower gate's rule selection, timed on the job's device.
    std::shared_ptr<const RuleSet> use = *rules;
    std::string unchanged_reason = "No rule applied, so the artifact is a copy of the original model.";
    // Where the memory bound held back rules that were faster together: what the model's owner
    // can allow for them (appended to the reason, optimized or not).
    std::string memory_hint;
    // How steps are timed: the model's setting, or the interpreter once executor timing made no
    // progress in the gate (the validation below then does not try it again).
    StepTiming timing = config.timing;
    if (select) {
      auto ts = Clock::now();
      CostOptions cost;
      cost.device = device;
      cost.training = training;
      cost.inference_too = job_mode == ValidationMode::kBoth;
      cost.verify_each = false;  // the artifact is validated below
      cost.margins = margins;
      cost.timing = config.timing;
      cost.executor_stall_s = spec.executor_stall_s;
      cost.optimize.stacked_parameters = stacked;
      auto sel = SelectRulesByMeasurement(model_path, *inputs, **rules, cost);
      timings["select"] = MsSince(ts);
      if (!sel.ok()) return reject(absl::StrCat("rule selection failed: ", sel.status().message()));
      AddSelection(*sel, device, job_mode, &j);
      timing = sel->timing;
      use = sel->rules;  // empty when no set pays
      if (sel->memory_margin_for_all_rules >= 0) {
        std::string forward;
        if (cost.inference_too && sel->all_rules_forward_peak_bytes >= 0) {
          forward = absl::StrFormat("; forward peak %.1f vs %.1f MiB",
                                    sel->all_rules_forward_peak_bytes / 1048576.0,
                                    sel->original_forward_peak_bytes / 1048576.0);
        }
        memory_hint = absl::StrFormat(
            " With every rule, a step took %.3f ms at a peak of %.1f MiB (original %.3f ms, %.1f "
            "MiB%s): {\"memory_margin\": %.2f} in the registry's %s/sentier.json would allow it.",
            sel->all_rules_ms, sel->all_rules_peak_bytes / 1048576.0, sel->original_ms,
            sel->original_peak_bytes / 1048576.0, forward, sel->memory_margin_for_all_rules,
            spec.model);
      }
      if (sel->nothing_fires_within_memory) {
        // The figures of every rule together: in the hint's words when there is one (it follows
        // this sentence), else as the gate logged them.
        unchanged_reason = absl::StrFormat(
            "Every set of rules that changes the model raised peak memory on %s beyond the bound "
            "(%g%% or %d MiB more, whichever is more)%s, so the artifact is a copy of the original "
            "model.",
            device_name, margins.memory * 100.0, static_cast<int>(margins.memory_floor_bytes >> 20),
            memory_hint.empty() ? absl::StrCat(" (", sel->log.front(), ")") : "");
      } else if (!sel->faster && !sel->none_fired) {
        unchanged_reason = absl::StrFormat(
            "No set of rules made the model faster on %s%s (best %.3f ms vs %.3f ms, peak %.1f vs "
            "%.1f MiB; %s), so the artifact is a copy of the original model.",
            device_name, sel->within_memory ? "" : " within the peak-memory bound", sel->optimized_ms,
            sel->original_ms, sel->optimized_peak_bytes / 1048576.0, sel->original_peak_bytes / 1048576.0,
            sel->log.empty() ? "" : sel->log.back());
      }
    }
    OptimizeOptions opts;
    opts.sample_inputs = &samples;
    opts.stacked_parameters = stacked;
    // The aten ops of the original are counted above, before the module can change (stacked
    // parameters move out of their modules).
    auto report = OptimizeGraph(model->graph, *use, opts);
    if (!report.ok()) return reject(absl::StrCat("optimizer error: ", report.status().message()));
    AddOptimization(*report, &j);
    if (!report->param_layout.empty()) {
      j["stacked_parameters"] = nlohmann::json::parse(report->param_layout.ToJson())["stacked"];
    }
    timings["optimize"] = report->optimize_ms;
    int64_t total = j["rewrites"].get<int64_t>();
    const std::string out_path = spec.stage_dir + "/model.pt";
    auto keep_original = [&](const std::string& reason) -> int {
      absl::Status copied = CopyOriginal(model_path, out_path);
      if (!copied.ok()) return OutputFailed(spec, copied.message());
      j["aten_ops_per_forward_after"] = *before_ops;  // the artifact is the original
      if (ops_before.training_step >= 0) {
        j["aten_ops_per_training_step_after"] = ops_before.training_step;
      }
      j["status"] = std::string(ReportStatusName(ReportStatus::kUnchanged));
      j["reason"] = reason + memory_hint;
      return -1;
    };
    int done = -1;
    if (total == 0) {
      j["aten_ops_per_forward_after"] = *before_ops;
      j["validation"] = {{"mode", mode}, {"result", "skipped: the artifact is the original"}};
      done = keep_original(unchanged_reason);
    } else {
      auto after_ops = CountAtenOps(model->graph, samples);
      if (!after_ops.ok()) {
        return reject(absl::StrCat("validation failure: the optimized graph does not run: ",
                                   after_ops.status().message()));
      }
      j["aten_ops_per_forward_after"] = *after_ops;
      OpCounts ops_after{*after_ops, -1};
      if (ops_before.training_step >= 0) {
        auto s = CountAtenOpsPerTrainingStep(model->graph, samples);
        if (s.ok()) {
          ops_after.training_step = *s;
          j["aten_ops_per_training_step_after"] = *s;
        }
      }
      auto t3 = Clock::now();
      absl::Status saved = SaveModel(*model, out_path);
      timings["save"] = MsSince(t3);
      if (!saved.ok()) return OutputFailed(spec, saved.message());
      // The saved artifact, loaded back as users load it, against the original: outputs and the
      // gradients of every input, parameter and buffer (EquivalenceChecker), on the job's device.
      auto t2 = Clock::now();
      CheckOptions check;
      check.device = device;
      check.inference = job_mode != ValidationMode::kTraining;
      check.training = training;
      check.trials = 2;
      check.time = timed;
      check.timing = timing;
      check.executor_stall_s = spec.executor_stall_s;
      auto reference = LoadModel(model_path);
      auto candidate = LoadModel(out_path);
      if (!reference.ok() || !candidate.ok()) {
        return reject(absl::StrCat("validation failure: the artifact does not load: ",
                                   (candidate.ok() ? reference : candidate).status().message()));
      }
      auto checked = EquivalenceChecker(check).Check(reference->module, candidate->module, *inputs);
      timings["validate"] = MsSince(t2);
      if (!checked.ok()) {
        return reject(absl::StrCat("validation failure on ", device_name, ": ", checked.status().message()));
      }
      if (!checked->equivalent) {
        return reject(absl::StrCat("validation failure on ", device_name, ": ", checked->first_failure));
      }
      nlohmann::json val = {{"mode", mode},
                            {"device", device_name},
                            {"result", "outputs and gradients match"},
                            {"tensors_compared", checked->findings.size()}};
      if (timed) {
        val["timing"] = std::string(StepTimingName(checked->timing));
        if (!checked->timing_fallback.empty()) val["timing_fallback"] = checked->timing_fallback;
      }
      j["status"] = std::string(ReportStatusName(ReportStatus::kOptimized));
      j["reason"] = absl::StrCat(total, " rewrites applied and validated on ", device_name, " (",
                                 mode, ").", memory_hint);
      if (timed) {
        // The never-slower gate on the timed step of the published artifact.
        StepFigures ref{training ? checked->reference_train_ms : checked->reference_ms,
                        training ? checked->reference_train_peak_bytes : checked->reference_peak_bytes};
        StepFigures cand{training ? checked->candidate_train_ms : checked->candidate_ms,
                         training ? checked->candidate_train_peak_bytes : checked->candidate_peak_bytes};
        const char* step = training ? "training step" : "forward";
        val[training ? "training_step_ms" : "forward_ms"] = {{"reference", ref.ms}, {"candidate", cand.ms}};
        val[training ? "training_step_peak_bytes" : "forward_peak_bytes"] = {
            {"reference", ref.peak_bytes}, {"candidate", cand.peak_bytes}};
        val["cuda_kernels_per_forward"] = {{"reference", checked->cuda_kernels_forward_reference},
                                           {"candidate", checked->cuda_kernels_forward_candidate}};
        val["cuda_kernels_per_training_step"] = {{"reference", checked->cuda_kernels_step_reference},
                                                 {"candidate", checked->cuda_kernels_step_candidate}};
        switch (Judge(ref, cand, margins)) {
          case Verdict::kFaster:
            break;
          case Verdict::kNotFaster:
            done = keep_original(absl::StrFormat(
                "The optimized model was not faster on the GPU (%.3f ms vs %.3f ms per %s, %.0f%% "
                "needed), so the artifact is the original.",
                cand.ms, ref.ms, step, margins.speed * 100));
            break;
          case Verdict::kMoreMemory:
            done = keep_original(absl::StrFormat(
                "The optimized model needed more peak GPU memory (%.1f MiB vs %.1f MiB per %s, more "
                "than the %.0f%% allowed), so the artifact is the original.",
                cand.peak_bytes / 1048576.0, ref.peak_bytes / 1048576.0, step, margins.memory * 100));
            break;
        }
      } else if (std::string growth; !select && UntimedGrowth(ops_before, ops_after, &growth)) {
        // No timing shows that the larger graph pays: the original is kept. The step the job
        // validates decides: a training step (forward and backward) where one was counted.
        done = keep_original(absl::StrFormat(
            "The optimized graph runs more aten ops per %s and nothing was timed on %s to show "
            "that it is faster, so the artifact is the original.",
            growth, device_name));
      }
      j["validation"] = val;
    }
    if (done >= 0) return done;  // the original could not be copied
    auto art_sha = Sha256OfFile(out_path);
    if (!art_sha.ok()) return OutputFailed(spec, art_sha.status().message());
    j["artifact_sha256"] = *art_sha;
    j["timings_ms"] = timings;
    return Finish(spec, j);
  } catch (const std::exception& e) {
    return reject(absl::StrCat("crash: ", TorchErrorMessage(e.what())));
  }
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
