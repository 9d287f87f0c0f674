// options.cc — the pipeline options' defaults, their JSON form (the job's value, the report's
// "options", REG/<model>/sentier.json) and their checks. Each option is one row of kOptionRows:
// its key, how it is read from JSON and written to it, and whether a model's sentier.json may set
// it; encode, decode and the overlay all walk that one table.
#include "runtime/pipeline/options.h"

#include <cmath>
#include <functional>
#include <type_traits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace sentier {
namespace {

using Json = nlohmann::json;

// Where a value comes from: the job's encoding (every key, any stored value) or a model's
// sentier.json (a subset of keys, each value checked as an owner writes it).
enum class Source { kEncoded, kModelConfig };

struct OptionRow {
  const char* key;
  bool model_config;  // sentier.json may set it
  std::function<Json(const PipelineOptions&)> write;
  std::function<absl::Status(const Json&, Source, PipelineOptions*)> read;
};

absl::Status Bad(absl::string_view key, absl::string_view must, const Json& value) {
  return absl::InvalidArgumentError(absl::StrCat(key, " must be ", must, ", not ", value.dump()));
}

// Word: a value of a closed set (options_enums.h), written as its word.
template <typename E>
OptionRow Word(const char* key, bool model_config, E PipelineOptions::*field,
               absl::StatusOr<E> (*parse)(absl::string_view), absl::string_view (*name)(E),
               const char* allowed) {
  return {key, model_config,
          [=](const PipelineOptions& o) { return Json(std::string(name(o.*field))); },
          [=](const Json& v, Source, PipelineOptions* o) -> absl::Status {
            absl::StatusOr<E> word =
                v.is_string() ? parse(v.get<std::string>()) : absl::InvalidArgumentError("not a string");
            if (!word.ok()) return Bad(key, allowed, v);
            o->*field = *word;
            return absl::OkStatus();
          }};
}

// Number: a number field; `valid` says which values are allowed, `must` how to say so.
template <typename T>
OptionRow Number(const char* key, bool model_config, T PipelineOptions::*field,
                 std::function<bool(double)> valid, const char* must) {
  return {key, model_config, [=](const PipelineOptions& o) { return Json(o.*field); },
          [=](const Json& v, Source, PipelineOptions* o) -> absl::Status {
            if (!v.is_number() || !valid(v.get<double>())) return Bad(key, must, v);
            if (std::is_integral<T>::value && v.get<double>() != std::floor(v.get<double>())) {
              return Bad(key, must, v);
            }
            o->*field = v.get<T>();
            return absl::OkStatus();
          }};
}

OptionRow MemoryMarginRow() {
  return {"memory_margin", true,
          [](const PipelineOptions& o) {
            return std::isnan(o.memory_margin) ? Json("auto") : Json(o.memory_margin);
          },
          [](const Json& v, Source, PipelineOptions* o) -> absl::Status {
            // JSON has no NaN or infinity; a number is finite here.
            if (!v.is_number() && v != "auto") {
              return Bad("memory_margin",
                         "a number (0.5: 50% more peak memory allowed; negative: not weighed) or \"auto\" "
                         "(the default memory policy)",
                         v);
            }
            o->memory_margin = v.is_number() ? v.get<double>() : kMemoryPolicyDefault;
            return absl::OkStatus();
          }};
}

// An owner's budget must be positive; the job's encoding carries -1 for none.
OptionRow MaxStepMemoryRow() {
  return {"max_step_memory_mib", true,
          [](const PipelineOptions& o) { return Json(o.max_step_memory_mib > 0 ? o.max_step_memory_mib : -1.0); },
          [](const Json& v, Source source, PipelineOptions* o) -> absl::Status {
            const bool positive = v.is_number() && v.get<double>() > 0;
            const bool none = source == Source::kEncoded && v.is_number() && v.get<double>() <= 0;
            if (!positive && !none) return Bad("max_step_memory_mib", "a positive number (MiB)", v);
            o->max_step_memory_mib = positive ? v.get<double>() : -1.0;
            return absl::OkStatus();
          }};
}

OptionRow AllowGrowthRow() {
  return {"allow_growth", false, [](const PipelineOptions& o) { return Json(o.allow_growth); },
          [](const Json& v, Source, PipelineOptions* o) -> absl::Status {
            if (!v.is_boolean()) return Bad("allow_growth", "true or false", v);
            o->allow_growth = v.get<bool>();
            return absl::OkStatus();
          }};
}

// code-shape: table
const std::vector<OptionRow>& OptionRows() {
  static const auto* rows = new std::vector<OptionRow>{
      Word("mode", true, &PipelineOptions::mode, ParseValidationMode, ValidationModeName,
           "\"inference\", \"training\" or \"both\""),
      Word("param_layout", true, &PipelineOptions::param_layout, ParseParameterLayout, ParameterLayoutName,
           "\"original\", \"stacked\" or \"auto\""),
      Word("device", false, &PipelineOptions::device, ParseDevice, DeviceName, "\"cpu\" or \"cuda\""),
      Word("gate", false, &PipelineOptions::gate, ParseGate, GateName, "\"auto\", \"on\" or \"off\""),
      MemoryMarginRow(),
      Number("max_memory_share", false, &PipelineOptions::max_memory_share,
             [](double v) { return v > 0 && v <= 1; }, "in (0, 1]"),
      MaxStepMemoryRow(),
      Word("timing", true, &PipelineOptions::timing, ParseStepTiming, StepTimingName,
           "\"interpreter\" or \"executor\""),
      Number("executor_stall_s", false, &PipelineOptions::executor_stall_s, [](double v) { return v >= 0; },
             ">= 0"),
      Number("max_rounds", false, &PipelineOptions::max_rounds, [](double v) { return v >= 1; }, ">= 1"),
      Number("validation_trials", false, &PipelineOptions::validation_trials, [](double v) { return v >= 1; },
             ">= 1"),
      AllowGrowthRow(),
  };
  return *rows;
}

const OptionRow* FindRow(absl::string_view key) {
  for (const OptionRow& row : OptionRows()) {
    if (key == row.key) return &row;
  }
  return nullptr;
}

std::string ModelConfigKeys() {
  std::vector<std::string> keys;
  for (const OptionRow& row : OptionRows()) {
    if (row.model_config) keys.push_back(row.key);
  }
  return absl::StrJoin(keys, ", ");
}

// Apply: the keys of `j` over `options`, from `source`; unchanged on error.
absl::Status Apply(const Json& j, Source source, PipelineOptions* options) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat("not a JSON object: ", j.dump()));
  PipelineOptions updated = *options;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const OptionRow* row = FindRow(it.key());
    if (row == nullptr || (source == Source::kModelConfig && !row->model_config)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown key '", it.key(), "' (known: ", source == Source::kModelConfig ? ModelConfigKeys() : "see options.h",
          ")"));
    }
    if (absl::Status s = row->read(it.value(), source, &updated); !s.ok()) return s;
  }
  *options = updated;
  return absl::OkStatus();
}

}  // namespace

PipelineOptions DefaultOptions(Tool tool) {
  PipelineOptions o;
  if (tool == Tool::kSentierOpt) {
    o.mode = ValidationMode::kTraining;
    o.gate = Gate::kOff;
  }
  return o;
}

bool GateOn(const PipelineOptions& options) {
  return options.gate == Gate::kOn || (options.gate == Gate::kAuto && options.device == Device::kCuda);
}

VerdictMargins Margins(const PipelineOptions& options) {
  VerdictMargins m;
  m.memory = options.memory_margin;
  if (options.max_step_memory_mib > 0) {
    m.max_step_bytes = static_cast<int64_t>(options.max_step_memory_mib * 1048576.0);
  }
  return m;
}

absl::StatusOr<Device> ResolveDevice(DeviceRequest request, bool cuda_available) {
  if (request == DeviceRequest::kCuda && !cuda_available) {
    return absl::InvalidArgumentError(
        "--device=cuda: this build of LibTorch has no CUDA support (or no GPU is visible); use "
        "--device=cpu or auto");
  }
  const bool cuda = request == DeviceRequest::kCuda || (request == DeviceRequest::kAuto && cuda_available);
  return cuda ? Device::kCuda : Device::kCpu;
}

nlohmann::json EncodeOptions(const PipelineOptions& options) {
  Json j = Json::object();
  for (const OptionRow& row : OptionRows()) j[row.key] = row.write(options);
  return j;
}

absl::StatusOr<PipelineOptions> DecodeOptions(const nlohmann::json& j) {
  PipelineOptions options;
  if (absl::Status s = Apply(j, Source::kEncoded, &options); !s.ok()) return s;
  return options;
}

absl::Status ApplyModelConfigJson(absl::string_view json_text, PipelineOptions* options) {
  Json j = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  return Apply(j, Source::kModelConfig, options);
}

std::string MemoryMarginSetting(double margin) {
  return absl::StrFormat(
      "{\"memory_margin\": %.2f} in the model's sentier.json (sentier_opt: --memory_margin=%.2f)", margin, margin);
}

bool operator==(const PipelineOptions& a, const PipelineOptions& b) { return EncodeOptions(a) == EncodeOptions(b); }

}  // namespace sentier
