#include "runtime/daemon/model_config.h"

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace sentier {

absl::Status ApplyModelConfigJson(absl::string_view json_text, ModelConfig* config) {
  nlohmann::json j = nlohmann::json::parse(json_text.begin(), json_text.end(), nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat("not a JSON object: ", j.dump()));
  ModelConfig updated = *config;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const nlohmann::json& value = it.value();
    if (it.key() == "param_layout") {
      absl::StatusOr<ParameterLayout> layout =
          value.is_string() ? ParseParameterLayout(value.get<std::string>())
                            : absl::InvalidArgumentError("not a string");
      if (!layout.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "param_layout must be \"original\" or \"stacked\", not ", value.dump()));
      }
      updated.param_layout = *layout;
    } else if (it.key() == "memory_margin") {
      // JSON has no NaN or infinity; a number is finite here.
      if (!value.is_number()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "memory_margin must be a number (0.5: 50% more peak memory allowed; negative: not "
            "weighed), not ",
            value.dump()));
      }
      updated.memory_margin = value.get<double>();
    } else if (it.key() == "mode") {
      absl::StatusOr<ValidationMode> mode = value.is_string() ? ParseValidationMode(value.get<std::string>())
                                                              : absl::InvalidArgumentError("not a string");
      if (!mode.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "mode must be \"inference\", \"training\" or \"both\", not ", value.dump()));
      }
      updated.mode = *mode;
    } else if (it.key() == "timing") {
      absl::StatusOr<StepTiming> timing = value.is_string() ? ParseStepTiming(value.get<std::string>())
                                                            : absl::InvalidArgumentError("not a string");
      if (!timing.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("timing must be \"interpreter\" or \"executor\", not ", value.dump()));
      }
      updated.timing = *timing;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown key '", it.key(), "' (known: param_layout, memory_margin, mode, timing)"));
    }
  }
  *config = updated;
  return absl::OkStatus();
}

}  // namespace sentier
