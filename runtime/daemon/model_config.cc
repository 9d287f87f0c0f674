#include "runtime/daemon/model_config.h"

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace sentier {
namespace {

// ReadWord: a key whose value is one word of a closed set (runtime/options_enums.h); anything
// else is "<key> must be <allowed>, not <the value as written>".
template <typename E>
absl::Status ReadWord(const std::string& key, const nlohmann::json& value,
                      absl::StatusOr<E> (*parse)(absl::string_view), absl::string_view allowed, E* out) {
  absl::StatusOr<E> word = value.is_string() ? parse(value.get<std::string>())
                                             : absl::InvalidArgumentError("not a string");
  if (!word.ok()) return absl::InvalidArgumentError(absl::StrCat(key, " must be ", allowed, ", not ", value.dump()));
  *out = *word;
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyModelConfigJson(absl::string_view json_text, ModelConfig* config) {
  nlohmann::json j = nlohmann::json::parse(json_text.begin(), json_text.end(), nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat("not a JSON object: ", j.dump()));
  ModelConfig updated = *config;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const nlohmann::json& value = it.value();
    if (it.key() == "param_layout") {
      absl::Status s = ReadWord(it.key(), value, ParseParameterLayout, "\"original\" or \"stacked\"",
                                &updated.param_layout);
      if (!s.ok()) return s;
    } else if (it.key() == "memory_margin") {
      // JSON has no NaN or infinity; a number is finite here.
      if (!value.is_number() && value != "auto") {
        return absl::InvalidArgumentError(absl::StrCat(
            "memory_margin must be a number (0.5: 50% more peak memory allowed; negative: not "
            "weighed) or \"auto\" (the default memory policy), not ",
            value.dump()));
      }
      updated.memory_margin = value.is_number() ? value.get<double>() : kMemoryPolicyDefault;
    } else if (it.key() == "max_step_memory_mib") {
      if (!value.is_number() || !(value.get<double>() > 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("max_step_memory_mib must be a positive number (MiB), not ", value.dump()));
      }
      updated.max_step_memory_mib = value.get<double>();
    } else if (it.key() == "mode") {
      absl::Status s = ReadWord(it.key(), value, ParseValidationMode,
                                "\"inference\", \"training\" or \"both\"", &updated.mode);
      if (!s.ok()) return s;
    } else if (it.key() == "timing") {
      absl::Status s =
          ReadWord(it.key(), value, ParseStepTiming, "\"interpreter\" or \"executor\"", &updated.timing);
      if (!s.ok()) return s;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown key '", it.key(), "' (known: param_layout, memory_margin, max_step_memory_mib, mode, timing)"));
    }
  }
  *config = updated;
  return absl::OkStatus();
}

}  // namespace sentier
