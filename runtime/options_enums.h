// options_enums.h — the closed sets of option values that Sentier's tools, daemon and reports
// spell as words: parsed once where they enter (flags, REG/<model>/sentier.json, job.json) and
// carried as enums inside. Each enum has Parse<Enum>(text) -> StatusOr<Enum> (InvalidArgument
// naming the bad value and the allowed ones) and <Enum>Name(value), the exact word used on the
// command line, in report.json and in messages.
//
//   absl::StatusOr<ValidationMode> mode = ParseValidationMode(FLAGS_mode);   // "both"
//   if (!mode.ok()) ...;   // "invalid validation mode 'bogus': expected inference, training or both"
//   j["mode"] = std::string(ValidationModeName(*mode));
#ifndef SENTIER_RUNTIME_OPTIONS_ENUMS_H_
#define SENTIER_RUNTIME_OPTIONS_ENUMS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sentier {

// DeviceRequest: what a --device flag asks for (auto: CUDA when LibTorch and the machine have it).
enum class DeviceRequest { kAuto, kCpu, kCuda };
absl::StatusOr<DeviceRequest> ParseDeviceRequest(absl::string_view text);  // auto | cpu | cuda
absl::string_view DeviceRequestName(DeviceRequest request);

// Device: where a model is validated and timed, once auto is resolved.
enum class Device { kCpu, kCuda };
absl::StatusOr<Device> ParseDevice(absl::string_view text);  // cpu | cuda
absl::string_view DeviceName(Device device);

// ValidationMode: which step is checked (and timed): the forward (inference), forward + backward
// (training), or both.
enum class ValidationMode { kInference, kTraining, kBoth };
absl::StatusOr<ValidationMode> ParseValidationMode(absl::string_view text);
absl::string_view ValidationModeName(ValidationMode mode);

// ParameterLayout: how an artifact stores the parameters the batching rules stack
// (passes/stacked_parameters.h): as the model has them, or stacked; auto: whichever of the two
// the decision finds clearly better for the model (runtime/pipeline/advise.cc), for owners
// who accept renamed parameters. A pipeline outcome's layout is always original or stacked.
enum class ParameterLayout { kOriginal, kStacked, kAuto };
absl::StatusOr<ParameterLayout> ParseParameterLayout(absl::string_view text);
absl::string_view ParameterLayoutName(ParameterLayout layout);

// Gate: whether the gate runs, the timed selection of the rules that make a step faster
// (runtime/gate.h): --gate, auto = on when the model is timed on CUDA.
enum class Gate { kAuto, kOn, kOff };
absl::StatusOr<Gate> ParseGate(absl::string_view text);  // auto | on | off
absl::string_view GateName(Gate gate);

// StepTiming: how the gate and sentier_check --time run the steps they time. interpreter: the
// graph executor's optimizations off, as every comparison runs (runtime/torch_settings.h);
// executor: with them on, as users run artifacts (on CUDA the executor's fuser merges pointwise
// chains). executor needs LibTorch 2.x (CheckStepTiming in equivalence_checker.h).
enum class StepTiming { kInterpreter, kExecutor };
absl::StatusOr<StepTiming> ParseStepTiming(absl::string_view text);  // interpreter | executor
absl::string_view StepTimingName(StepTiming timing);

// The default limit, in seconds, on an executor-timed step that makes no progress (then timed in
// the interpreter; CheckOptions, GateOptions and PipelineOptions::executor_stall_s). 15 s: a
// step's first executor run (profiling, then compiling its fusion groups) took at most about
// 0.3 s on the corpus on the H200 (bench/RESULTS-log.md, Thu Dec 3 02:16), while a stalled fuser
// compile never returns; the former 60 s added 45 s to every job that met a stall.
inline constexpr double kDefaultExecutorStallS = 15.0;

// ReportStatus: report.json's "status" (runtime/report_schema.json).
enum class ReportStatus { kOptimized, kUnchanged, kRejected };
absl::StatusOr<ReportStatus> ParseReportStatus(absl::string_view text);
absl::string_view ReportStatusName(ReportStatus status);

// Memory margin (the pipeline option, runtime/pipeline/options.h): "auto" is the default memory
// policy (runtime/verdict.h: NaN in VerdictMargins::memory), a number a margin over the
// original's peak (a fraction; negative: memory not weighed).
absl::StatusOr<double> ParseMemoryMargin(absl::string_view text);
std::string MemoryMarginName(double margin);  // "auto" for the default policy, else the number

}  // namespace sentier

#endif  // SENTIER_RUNTIME_OPTIONS_ENUMS_H_
