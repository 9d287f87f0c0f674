// option_flags.cc — the pipeline options' flags (see option_flags.h). Each flag's default is
// PipelineOptions' own, or "" where the tools' defaults differ (DefaultOptions); the value is
// checked by the same table that checks the job's value and sentier.json (options.cc).
#include "tools/option_flags.h"

#include <gflags/gflags.h>

#include "absl/strings/str_cat.h"
#include "runtime/equivalence_checker.h"  // StepTimingFromFlag

DEFINE_string(mode, "",
              "the step that is judged: inference (the forward), training (forward + backward) or "
              "both; default: sentierd and model_bench both, sentier_opt training (sentier_opt "
              "takes training or inference); REG/<model>/sentier.json's mode overrides it");
DEFINE_string(gate, "",
              "auto|on|off: the gate keeps only the rules that make the judged step faster on "
              "--device, within the memory policy (timed; needs sample inputs); auto = on with "
              "cuda; default: sentierd and model_bench auto, sentier_opt off");
DEFINE_string(select_rules, "", "old name of --gate (sentierd)");
DEFINE_string(cost, "", "old name of --gate (sentier_opt): measure is --gate=on, none is --gate=off");
DEFINE_string(param_layout, "original",
              "original|stacked|auto: how artifacts store the parameters the batching rules stack: "
              "as the model has them (a drop-in by name), or stacked (faster training steps; "
              "original_state_dict()/load_original_state_dict() and sentier_state keep "
              "checkpoints interchangeable); auto: stacked where the decision finds it clearly "
              "better for the model (report.json layout_choice says why), else original; "
              "REG/<model>/sentier.json overrides it");
DEFINE_string(device, "auto", "where the gate and the validation run: auto (cuda when available), cpu or cuda");
DEFINE_string(memory_margin, "auto",
              "the memory policy: auto (a step's time x peak memory may not grow, and its peak "
              "stays within --max_memory_share of the device's memory), a number (the peak may "
              "grow by this fraction of the original's) or negative (not weighed); "
              "REG/<model>/sentier.json's memory_margin or max_step_memory_mib overrides it");
DEFINE_double(max_memory_share, sentier::PipelineOptions().max_memory_share,
              "with --memory_margin=auto: the share of the device's memory a step's peak may reach");
DEFINE_double(max_step_memory_mib, 0,
              "an absolute budget for a timed step's peak memory, in MiB (replaces --memory_margin "
              "and --max_memory_share; 0: none)");
DEFINE_string(timing, "auto",
              "how the gate and the final timing run steps: interpreter (the graph executor's "
              "optimizations off), executor (on, as users run artifacts: on CUDA its fuser merges "
              "pointwise chains; needs LibTorch 2.x; a step that makes no progress for "
              "--executor_stall_s is given up on and the interpreter times instead) or auto "
              "(executor on LibTorch 2.x, else interpreter); REG/<model>/sentier.json overrides it");
DEFINE_double(executor_stall_s, sentier::PipelineOptions().executor_stall_s,
              "with executor timing: a timed step that has not finished after this many seconds "
              "is given up on, and the steps are timed in the interpreter instead");
DEFINE_int32(max_rounds, sentier::PipelineOptions().max_rounds, "bound on rounds of rule application");
DEFINE_int32(validation_trials, sentier::PipelineOptions().validation_trials,
             "the validation's trials: the sample inputs, then random draws (and twice the batch)");
DEFINE_bool(allow_growth, false,
            "with nothing timed, write the rewritten model even when it makes more kernel launches "
            "per judged step than the original (by default the original is kept then)");

namespace sentier {
namespace {

absl::Status BadFlag(absl::string_view flag, absl::string_view must, absl::string_view value) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be ", must, ", not '", value, "'"));
}

// GateFromFlags: --gate, or one of its old names (with a notice).
absl::StatusOr<Gate> GateFromFlags(Gate fallback, std::vector<std::string>* notices) {
  if (!FLAGS_gate.empty()) {
    auto gate = ParseGate(FLAGS_gate);
    return gate.ok() ? gate : BadFlag("gate", "auto, on or off", FLAGS_gate);
  }
  if (!FLAGS_select_rules.empty()) {
    auto gate = ParseGate(FLAGS_select_rules);
    if (!gate.ok()) return BadFlag("select_rules", "auto, on or off", FLAGS_select_rules);
    notices->push_back(absl::StrCat("--select_rules is an old name of --gate: use --gate=", FLAGS_select_rules));
    return gate;
  }
  if (!FLAGS_cost.empty()) {
    if (FLAGS_cost != "measure" && FLAGS_cost != "none") return BadFlag("cost", "none or measure", FLAGS_cost);
    const Gate gate = FLAGS_cost == "measure" ? Gate::kOn : Gate::kOff;
    notices->push_back(absl::StrCat("--cost is an old name of --gate: use --gate=", GateName(gate)));
    return gate;
  }
  return fallback;
}

absl::StatusOr<ValidationMode> ModeFromFlags(Tool tool, ValidationMode fallback) {
  if (FLAGS_mode.empty()) return fallback;
  auto mode = ParseValidationMode(FLAGS_mode);
  if (tool == Tool::kSentierOpt && (!mode.ok() || *mode == ValidationMode::kBoth)) {
    return BadFlag("mode", "training or inference", FLAGS_mode);
  }
  return mode.ok() ? mode : BadFlag("mode", "inference, training or both", FLAGS_mode);
}

// WordFlags: the flags whose values are words (or "auto").
absl::Status WordFlags(Tool tool, bool cuda_available, FlagOptions* f) {
  PipelineOptions& o = f->options;
  auto mode = ModeFromFlags(tool, o.mode);
  if (!mode.ok()) return mode.status();
  o.mode = *mode;
  auto gate = GateFromFlags(o.gate, &f->notices);
  if (!gate.ok()) return gate.status();
  o.gate = *gate;
  auto layout = ParseParameterLayout(FLAGS_param_layout);
  if (!layout.ok()) return BadFlag("param_layout", "original, stacked or auto", FLAGS_param_layout);
  o.param_layout = *layout;
  auto request = ParseDeviceRequest(FLAGS_device);
  if (!request.ok()) return BadFlag("device", "auto, cpu or cuda", FLAGS_device);
  auto device = ResolveDevice(*request, cuda_available);
  if (!device.ok()) return device.status();
  o.device = *device;
  auto margin = ParseMemoryMargin(FLAGS_memory_margin);
  if (!margin.ok()) return absl::InvalidArgumentError(absl::StrCat("--memory_margin: ", margin.status().message()));
  o.memory_margin = *margin;
  auto timing = StepTimingFromFlag(FLAGS_timing);
  if (!timing.ok()) return timing.status();
  o.timing = *timing;
  return absl::OkStatus();
}

// NumberFlags: the numeric flags, checked by the options' own table (DecodeOptions).
absl::Status NumberFlags(PipelineOptions* o) {
  nlohmann::json numbers = {{"max_memory_share", FLAGS_max_memory_share},
                            {"executor_stall_s", FLAGS_executor_stall_s},
                            {"max_rounds", FLAGS_max_rounds},
                            {"validation_trials", FLAGS_validation_trials},
                            {"max_step_memory_mib", FLAGS_max_step_memory_mib > 0 ? FLAGS_max_step_memory_mib : -1.0},
                            {"allow_growth", FLAGS_allow_growth}};
  if (FLAGS_max_step_memory_mib < 0) return BadFlag("max_step_memory_mib", ">= 0", absl::StrCat(FLAGS_max_step_memory_mib));
  nlohmann::json all = EncodeOptions(*o);
  all.update(numbers);
  auto checked = DecodeOptions(all);
  if (!checked.ok()) return absl::InvalidArgumentError(absl::StrCat("--", checked.status().message()));
  *o = *checked;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<FlagOptions> PipelineOptionsFromFlags(Tool tool, bool cuda_available) {
  FlagOptions f;
  f.options = DefaultOptions(tool);
  if (absl::Status s = WordFlags(tool, cuda_available, &f); !s.ok()) return s;
  if (absl::Status s = NumberFlags(&f.options); !s.ok()) return s;
  return f;
}

}  // namespace sentier
