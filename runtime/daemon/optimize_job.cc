#include "runtime/daemon/optimize_job.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

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
#include "runtime/equivalence_checker.h"
#include "runtime/file_util.h"
#include "runtime/graph_runner.h"
#include "runtime/model_io.h"

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

std::vector<c10::IValue> FreshInputs(const std::vector<c10::IValue>& samples, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<c10::IValue> out;
  for (const c10::IValue& v : samples) {
    if (v.isTensor() && at::isFloatingType(v.toTensor().scalar_type())) {
      const at::Tensor& t = v.toTensor();
      out.push_back(at::randn(t.sizes(), gen, t.options()));
    } else {
      out.push_back(v);
    }
  }
  return out;
}

int Finish(const JobSpec& spec, nlohmann::json j) {
  if (j["status"] == "rejected") {
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
  const char* crash = std::getenv("SENTIERD_TEST_CRASH_MODEL");
  if (crash != nullptr && spec.model == crash) std::abort();
  const char* hang = std::getenv("SENTIERD_TEST_HANG_MODEL");
  if (hang != nullptr && spec.model == hang) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
  }
  nlohmann::json j;
  nlohmann::json timings = nlohmann::json::object();
  auto reject = [&](const std::string& reason) {
    j["status"] = "rejected";
    j["reason"] = reason;
    j["timings_ms"] = timings;
    return Finish(spec, j);
  };
  try {
    const std::string model_path = spec.source_dir + "/model.pt";
    const std::string inputs_path = spec.source_dir + "/inputs.pt";
    auto t0 = Clock::now();
    auto src_sha = Sha256OfFile(model_path);
    if (src_sha.ok()) j["source_sha256"] = *src_sha;
    auto in_sha = Sha256OfFile(inputs_path);
    if (in_sha.ok()) j["inputs_sha256"] = *in_sha;
    auto rules = LoadRules({spec.rules_dir});
    if (!rules.ok()) return reject(absl::StrCat("rules failed to load: ", rules.status().message()));
    j["rules_fingerprint"] = (*rules)->Fingerprint();
    auto model = LoadModel(model_path);
    if (!model.ok()) return reject(absl::StrCat("load failure: ", model.status().message()));
    if (!model->is_module) return reject("load failure: model.pt is not a TorchScript module");
    if (!std::filesystem::exists(inputs_path)) {
      return reject(absl::StrCat("load failure: sample inputs '", inputs_path, "' are missing"));
    }
    auto inputs = LoadSampleInputs(inputs_path);
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
    // The never-slower gate's rule selection, timed on the job's device.
    std::shared_ptr<const RuleSet> use = *rules;
    std::string unchanged_reason = "No rule applied, so the artifact is a copy of the original model.";
    if (spec.select_rules) {
      auto ts = Clock::now();
      CostOptions cost;
      cost.device = spec.device;
      cost.training = spec.mode != "inference";
      cost.inference_too = spec.mode == "both";
      cost.verify_each = false;  // the artifact is validated below
      cost.memory_margin = spec.memory_margin;
      auto sel = SelectRulesByMeasurement(model_path, *inputs, **rules, cost);
      timings["select"] = MsSince(ts);
      if (!sel.ok()) return reject(absl::StrCat("rule selection failed: ", sel.status().message()));
      j["selection"] = {{"device", spec.device},
                        {"faster", sel->faster},
                        {"within_memory", sel->within_memory},
                        {"dropped_rules", sel->dropped},
                        {"original_ms", sel->original_ms},
                        {"optimized_ms", sel->optimized_ms},
                        {"original_peak_bytes", sel->original_peak_bytes},
                        {"optimized_peak_bytes", sel->optimized_peak_bytes},
                        {"log", sel->log}};
      use = sel->rules;  // empty when no set pays
      if (!sel->faster) {
        unchanged_reason = absl::StrFormat(
            "No set of rules made the model faster on %s%s (best %.3f ms vs %.3f ms, peak %.1f vs "
            "%.1f MiB; %s), so the artifact is a copy of the original model.",
            spec.device, sel->within_memory ? "" : " within the peak-memory bound", sel->optimized_ms,
            sel->original_ms, sel->optimized_peak_bytes / 1048576.0, sel->original_peak_bytes / 1048576.0,
            sel->log.empty() ? "" : sel->log.back());
      }
    }
    OptimizeOptions opts;
    opts.sample_inputs = &samples;
    auto t1 = Clock::now();
    auto report = OptimizeGraph(model->graph, *use, opts);
    timings["optimize"] = MsSince(t1);
    if (!report.ok()) return reject(absl::StrCat("optimizer error: ", report.status().message()));
    int64_t total = 0;
    nlohmann::json apps = nlohmann::json::object();
    for (const auto& [name, n] : report->stats.applications) {
      apps[name] = n;
      total += n;
    }
    j["rule_counts"] = apps;
    j["rewrites"] = total;
    j["nodes_before"] = report->nodes_before;
    j["nodes_after"] = report->nodes_after;
    j["shape_facts"] = report->shape_facts;
    j["aten_ops_per_forward_before"] = *before_ops;
    const std::string out_path = spec.stage_dir + "/model.pt";
    if (total == 0) {
      absl::Status copied = CopyOriginal(model_path, out_path);
      if (!copied.ok()) return OutputFailed(spec, copied.message());
      j["aten_ops_per_forward_after"] = *before_ops;
      j["validation"] = {{"mode", spec.mode}, {"result", "skipped: the artifact is the original"}};
      j["status"] = "unchanged";
      j["reason"] = unchanged_reason;
    } else {
      auto after_ops = CountAtenOps(model->graph, samples);
      if (!after_ops.ok()) {
        return reject(absl::StrCat("validation failure: the optimized graph does not run: ",
                                   after_ops.status().message()));
      }
      j["aten_ops_per_forward_after"] = *after_ops;
      auto t2 = Clock::now();
      nlohmann::json val = {{"mode", spec.mode}};
      std::vector<bool> grads_modes;
      if (spec.mode == "inference") grads_modes = {false};
      else if (spec.mode == "training") grads_modes = {true};
      else grads_modes = {false, true};
      std::vector<std::pair<std::string, std::vector<c10::IValue>>> sets = {
          {"sample_inputs", samples}, {"random_inputs", FreshInputs(samples, 1234)}};
      for (const auto& [set_name, set] : sets) {
        for (bool grads : grads_modes) {
          CompareOptions copts;
          copts.check_grads = grads;
          absl::Status st = CompareGraphs(original, model->graph, set, copts);
          std::string what = grads ? "outputs and gradients" : "outputs";
          if (!st.ok()) {
            timings["validate"] = MsSince(t2);
            return reject(absl::StrCat("validation failure on ", set_name, " (", what,
                                       "): ", st.message()));
          }
          val[set_name][grads ? "training" : "inference"] = absl::StrCat(what, " match");
        }
      }
      auto t3 = Clock::now();
      absl::Status saved = SaveModel(*model, out_path);
      timings["save"] = MsSince(t3);
      if (!saved.ok()) return OutputFailed(spec, saved.message());
      j["status"] = "optimized";
      j["reason"] = absl::StrCat(total, " rewrites applied and validated (", spec.mode, ").");
      if (spec.device == "cuda") {
        // On the GPU: the saved artifact against the original, outputs and gradients with the
        // GPU's own reductions, and the never-slower gate on the timed step.
        auto t4 = Clock::now();
        CheckOptions check;
        check.device = "cuda";
        check.inference = spec.mode != "training";
        check.training = spec.mode != "inference";
        check.trials = 2;
        check.time = true;
        torch::jit::Module reference = torch::jit::load(model_path);
        torch::jit::Module candidate = torch::jit::load(out_path);
        auto gpu = EquivalenceChecker(check).Check(reference, candidate, *inputs);
        timings["validate_cuda"] = MsSince(t4);
        if (!gpu.ok()) return reject(absl::StrCat("validation failure on cuda: ", gpu.status().message()));
        if (!gpu->equivalent) {
          return reject(absl::StrCat("validation failure on cuda: ", gpu->first_failure));
        }
        bool training = check.training;
        double ref_ms = training ? gpu->reference_train_ms : gpu->reference_ms;
        double cand_ms = training ? gpu->candidate_train_ms : gpu->candidate_ms;
        int64_t ref_peak = training ? gpu->reference_train_peak_bytes : gpu->reference_peak_bytes;
        int64_t cand_peak = training ? gpu->candidate_train_peak_bytes : gpu->candidate_peak_bytes;
        const char* step = training ? "training step" : "forward";
        val["cuda"] = {{"result", "outputs and gradients match"},
                       {training ? "training_step_ms" : "forward_ms",
                        {{"reference", ref_ms}, {"candidate", cand_ms}}},
                       {training ? "training_step_peak_bytes" : "forward_peak_bytes",
                        {{"reference", ref_peak}, {"candidate", cand_peak}}}};
        std::string kept_because;
        if (!(cand_ms < ref_ms)) {
          kept_because = absl::StrFormat("The optimized model was not faster on the GPU (%.3f ms vs %.3f ms per %s)",
                                         cand_ms, ref_ms, step);
        } else if (spec.memory_margin >= 0 &&
                   static_cast<double>(cand_peak) > static_cast<double>(ref_peak) * (1.0 + spec.memory_margin)) {
          kept_because = absl::StrFormat(
              "The optimized model needed more peak GPU memory (%.1f MiB vs %.1f MiB per %s, more "
              "than the %.0f%% allowed)",
              cand_peak / 1048576.0, ref_peak / 1048576.0, step, spec.memory_margin * 100);
        }
        if (!kept_because.empty()) {
          absl::Status copied = CopyOriginal(model_path, out_path);
          if (!copied.ok()) return OutputFailed(spec, copied.message());
          j["status"] = "unchanged";
          j["reason"] = absl::StrCat(kept_because, ", so the artifact is the original.");
        }
      }
      timings["validate"] = MsSince(t2);
      j["validation"] = val;
    }
    auto art_sha = Sha256OfFile(out_path);
    if (!art_sha.ok()) return OutputFailed(spec, art_sha.status().message());
    j["artifact_sha256"] = *art_sha;
    j["timings_ms"] = timings;
    return Finish(spec, j);
  } catch (const std::exception& e) {
    std::string what = e.what();
    return reject(absl::StrCat("crash: ", what.substr(0, what.find('\n'))));
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
