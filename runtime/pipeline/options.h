// options.h — the optimization pipeline's options: one value, every default in one place, one
// spelling of each option (the flag's name, sentier.json's key, the job's and the report's key).
//
// sentier_opt, sentierd and model_bench read the same flags into it (tools/option_flags.h);
// sentierd hands it to each job as one JSON value (EncodeOptions / DecodeOptions); a model's
// REG/<model>/sentier.json is an overlay applied to it (ApplyModelConfigJson); the report records
// it under "options". No LibTorch: sentierd's parent process builds it.
//
//   PipelineOptions o = DefaultOptions(Tool::kSentierd);        // mode both, gate auto, ...
//   absl::Status s = ApplyModelConfigJson(R"({"param_layout": "stacked"})", &o);
//   std::string job_flag = EncodeOptions(o).dump();             // DecodeOptions gives o back
//
// Adding an option: a field here (with its default), a row in options.cc's table (its JSON key,
// how it reads and prints, whether sentier.json may set it), a flag in tools/option_flags.cc, and
// the stage that reads it.
#ifndef SENTIER_RUNTIME_PIPELINE_OPTIONS_H_
#define SENTIER_RUNTIME_PIPELINE_OPTIONS_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/options_enums.h"
#include "runtime/verdict.h"

namespace sentier {

// The programs that run the pipeline: each has its own defaults for the few options where they
// differ (DefaultOptions).
enum class Tool { kSentierd, kSentierOpt, kModelBench };

struct PipelineOptions {
  // The step that is judged (validated, timed by the gate, counted without it): the forward
  // (inference), forward + backward (training), or both. sentier_opt: training.
  ValidationMode mode = ValidationMode::kBoth;
  // How artifacts store the parameters the batching rules stack (passes/stacked_parameters.h).
  ParameterLayout param_layout = ParameterLayout::kOriginal;
  // Where the model is validated and the gate times (auto resolved: ResolveDevice).
  Device device = Device::kCpu;
  // The gate (runtime/gate.h): keep only the rules that make the judged step faster on
  // the device. auto: on when the device is CUDA (GateOn). sentier_opt: off.
  Gate gate = Gate::kAuto;
  // The memory policy (runtime/verdict.h): NaN is the default policy (a step's time x peak memory
  // may not grow, its peak within max_memory_share of the device); a number >= 0 is how much
  // more peak memory (a fraction of the original's) the optimized step may need; negative: not
  // weighed. max_step_memory_mib > 0 is an owner's absolute budget that replaces every clause.
  double memory_margin = kMemoryPolicyDefault;
  double max_memory_share = kDefaultDeviceShare;
  double max_step_memory_mib = -1;
  // How the gate and the validation time steps (options_enums.h); the flags' "auto" is resolved
  // before it gets here (executor on LibTorch 2.x). A step timed with the executor that makes no
  // progress for executor_stall_s seconds is given up on and timed in the interpreter instead.
  StepTiming timing = StepTiming::kInterpreter;
  double executor_stall_s = kDefaultExecutorStallS;
  int max_rounds = 16;         // bound on rounds of rule application
  int validation_trials = 2;   // the checker's trials (CheckOptions::trials)
  bool allow_growth = false;   // untimed: write a graph with more kernel launches anyway
};

// DefaultOptions: the defaults of `tool`: sentier_opt judges the training step and runs no gate
// unless asked; sentierd and model_bench judge both steps with the gate on CUDA.
PipelineOptions DefaultOptions(Tool tool);

// GateOn: whether the gate runs under these options (auto: on CUDA).
bool GateOn(const PipelineOptions& options);

// Margins: the memory policy of the options as the verdict reads it (runtime/verdict.h); the
// device's figures (device_limit_bytes, small_growth_bytes) are the placement's to fill in.
VerdictMargins Margins(const PipelineOptions& options);

// ResolveDevice: a --device request with `cuda_available` (auto: CUDA when there is one);
// InvalidArgument when CUDA is asked for and there is none.
absl::StatusOr<Device> ResolveDevice(DeviceRequest request, bool cuda_available);

// EncodeOptions / DecodeOptions: every option as one JSON object, in the report's words ("auto"
// for the default memory policy); DecodeOptions(EncodeOptions(o)) == o. DecodeOptions starts
// from PipelineOptions{} and takes every key it finds; an unknown key or a bad value is
// InvalidArgument naming it.
nlohmann::json EncodeOptions(const PipelineOptions& options);
absl::StatusOr<PipelineOptions> DecodeOptions(const nlohmann::json& j);

// ApplyModelConfigJson: REG/<model>/sentier.json over `options`: the keys it holds replace the
// options' values; only param_layout, memory_margin, max_step_memory_mib, mode and timing may be
// set there. Strict: invalid JSON, an unknown key, a value of the wrong type or out of range is
// InvalidArgument naming the key and the value, and `options` is left unchanged.
absl::Status ApplyModelConfigJson(absl::string_view json_text, PipelineOptions* options);

// MemoryMarginSetting: how a model's owner sets a memory margin: the sentier.json key and the
// sentier_opt flag, e.g. `{"memory_margin": 0.50} in the model's sentier.json (sentier_opt:
// --memory_margin=0.50)`.
std::string MemoryMarginSetting(double margin);

bool operator==(const PipelineOptions& a, const PipelineOptions& b);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_PIPELINE_OPTIONS_H_
