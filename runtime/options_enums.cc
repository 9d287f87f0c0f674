#include "runtime/options_enums.h"

#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sentier {
namespace {

template <typename E>
using Table = std::initializer_list<std::pair<E, absl::string_view>>;

// Allowed: "a, b or c".
template <typename E>
std::string Allowed(Table<E> table) {
  std::string out;
  size_t i = 0;
  for (const auto& [value, name] : table) {
    if (i > 0) absl::StrAppend(&out, i + 1 == table.size() ? " or " : ", ");
    absl::StrAppend(&out, name);
    ++i;
  }
  return out;
}

template <typename E>
absl::StatusOr<E> Parse(Table<E> table, absl::string_view what, absl::string_view text) {
  for (const auto& [value, name] : table) {
    if (name == text) return value;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("invalid ", what, " '", text, "': expected ", Allowed(table)));
}

template <typename E>
absl::string_view Name(Table<E> table, E value) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  return "?";
}

const Table<DeviceRequest> kDeviceRequests = {
    {DeviceRequest::kAuto, "auto"}, {DeviceRequest::kCpu, "cpu"}, {DeviceRequest::kCuda, "cuda"}};
const Table<Device> kDevices = {{Device::kCpu, "cpu"}, {Device::kCuda, "cuda"}};
const Table<ValidationMode> kModes = {{ValidationMode::kInference, "inference"},
                                      {ValidationMode::kTraining, "training"},
                                      {ValidationMode::kBoth, "both"}};
const Table<ParameterLayout> kLayouts = {{ParameterLayout::kOriginal, "original"},
                                     {ParameterLayout::kStacked, "stacked"},
                                     {ParameterLayout::kAuto, "auto"}};
const Table<Gate> kGates = {
    {Gate::kAuto, "auto"}, {Gate::kOn, "on"}, {Gate::kOff, "off"}};
const Table<StepTiming> kTimings = {{StepTiming::kInterpreter, "interpreter"},
                                    {StepTiming::kExecutor, "executor"}};
const Table<ReportStatus> kStatuses = {{ReportStatus::kOptimized, "optimized"},
                                       {ReportStatus::kUnchanged, "unchanged"},
                                       {ReportStatus::kRejected, "rejected"}};

}  // namespace

absl::StatusOr<DeviceRequest> ParseDeviceRequest(absl::string_view text) {
  return Parse(kDeviceRequests, "device", text);
}
absl::string_view DeviceRequestName(DeviceRequest request) { return Name(kDeviceRequests, request); }

absl::StatusOr<Device> ParseDevice(absl::string_view text) { return Parse(kDevices, "device", text); }
absl::string_view DeviceName(Device device) { return Name(kDevices, device); }

absl::StatusOr<ValidationMode> ParseValidationMode(absl::string_view text) {
  return Parse(kModes, "validation mode", text);
}
absl::string_view ValidationModeName(ValidationMode mode) { return Name(kModes, mode); }

absl::StatusOr<ParameterLayout> ParseParameterLayout(absl::string_view text) {
  return Parse(kLayouts, "parameter layout", text);
}
absl::string_view ParameterLayoutName(ParameterLayout layout) { return Name(kLayouts, layout); }

absl::StatusOr<Gate> ParseGate(absl::string_view text) { return Parse(kGates, "rule selection", text); }
absl::string_view GateName(Gate gate) { return Name(kGates, gate); }

absl::StatusOr<StepTiming> ParseStepTiming(absl::string_view text) {
  return Parse(kTimings, "step timing", text);
}
absl::string_view StepTimingName(StepTiming timing) { return Name(kTimings, timing); }

absl::StatusOr<ReportStatus> ParseReportStatus(absl::string_view text) {
  return Parse(kStatuses, "report status", text);
}
absl::string_view ReportStatusName(ReportStatus status) { return Name(kStatuses, status); }

absl::StatusOr<double> ParseMemoryMargin(absl::string_view text) {
  if (text == "auto") return std::numeric_limits<double>::quiet_NaN();
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory margin must be auto or a number (0.5: 50% more peak memory allowed; negative: not "
        "weighed), not '", text, "'"));
  }
  return value;
}

std::string MemoryMarginName(double margin) {
  return std::isnan(margin) ? std::string("auto") : absl::StrCat(margin);
}

}  // namespace sentier
