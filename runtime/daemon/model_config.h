// model_config.h — per-model options in the registry: REG/<model>/sentier.json.
//
// A model's owner can set, over sentierd's flags, how that model's artifacts are built:
//   {"param_layout": "stacked", "memory_margin": 0.5, "mode": "training", "timing": "executor"}
// - param_layout: "original" | "stacked" (passes/stacked_parameters.h).
// - mode: "inference" | "training" | "both": the step the job validates and the gate times for
//   this model (sentierd's --mode otherwise). A model that is only trained is judged by its
//   training step: a forward that the gate's timing reads as slower does not hold back a rewrite
//   that makes the step faster.
// - timing: "interpreter" | "executor": how this model's steps are timed (sentierd's --timing
//   otherwise; runtime/options_enums.h). executor times as users run artifacts (the CUDA fuser
//   included) and needs LibTorch 2.x: on 1.13 the version is rejected with that reason.
// - memory_margin: "auto" or a number. The memory policy (runtime/verdict.h) for this model:
//   "auto" is the default (a step's time x peak memory may not grow, its peak within the
//   daemon's --max_memory_share of the device); a number is how much more peak memory per timed
//   step (as a fraction of the original's) the optimized model may need: 0.5 accepts 50% more;
//   a negative number turns the memory weighing off for this model.
// - max_step_memory_mib: a positive number; an absolute budget for the timed step's peak memory,
//   in MiB. It replaces every other memory clause (the owner's budget wins).
// The file is strict: an unknown key, a value of the wrong type or out of range is an error that
// names the key and the value (the version is then rejected with that reason, never built with a
// half-read configuration). A key left out keeps the daemon's flag.
//
//   ModelConfig config{.param_layout = flags_layout, .memory_margin = flags_margin, .mode = flags_mode};
//   absl::Status s = ApplyModelConfigJson(text, &config);  // InvalidArgument: "unknown key ..."
#ifndef SENTIER_RUNTIME_DAEMON_MODEL_CONFIG_H_
#define SENTIER_RUNTIME_DAEMON_MODEL_CONFIG_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "runtime/options_enums.h"
#include "runtime/verdict.h"

namespace sentier {

// The file's name inside REG/<model>/.
constexpr char kModelConfigFile[] = "sentier.json";

struct ModelConfig {
  ParameterLayout param_layout = ParameterLayout::kOriginal;
  double memory_margin = kMemoryPolicyDefault;  // runtime/verdict.h (NaN: the default policy)
  double max_step_memory_mib = -1;               // > 0: the owner's absolute budget
  ValidationMode mode = ValidationMode::kBoth;
  StepTiming timing = StepTiming::kInterpreter;
};

// ApplyModelConfigJson: sets the keys `json_text` holds on `config` (others keep their values).
// On error `config` is unchanged and the status (InvalidArgument) says what was wrong.
absl::Status ApplyModelConfigJson(absl::string_view json_text, ModelConfig* config);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_DAEMON_MODEL_CONFIG_H_
