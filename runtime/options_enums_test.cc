#include "runtime/options_enums.h"

#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace sentier {
namespace {

// RoundTrip: every name parses back to its value, and every value's name is the listed word.
template <typename E, typename ParseFn, typename NameFn>
void ExpectRoundTrip(std::initializer_list<std::pair<E, const char*>> table, ParseFn parse,
                     NameFn name) {
  for (const auto& [value, word] : table) {
    EXPECT_EQ(name(value), word);
    absl::StatusOr<E> parsed = parse(word);
    ASSERT_TRUE(parsed.ok()) << word << ": " << parsed.status();
    EXPECT_EQ(*parsed, value) << word;
  }
}

TEST(OptionsEnumsTest, NamesRoundTrip) {
  ExpectRoundTrip<DeviceRequest>({{DeviceRequest::kAuto, "auto"},
                                  {DeviceRequest::kCpu, "cpu"},
                                  {DeviceRequest::kCuda, "cuda"}},
                                 ParseDeviceRequest, DeviceRequestName);
  ExpectRoundTrip<Device>({{Device::kCpu, "cpu"}, {Device::kCuda, "cuda"}}, ParseDevice, DeviceName);
  ExpectRoundTrip<ValidationMode>({{ValidationMode::kInference, "inference"},
                                   {ValidationMode::kTraining, "training"},
                                   {ValidationMode::kBoth, "both"}},
                                  ParseValidationMode, ValidationModeName);
  ExpectRoundTrip<ParameterLayout>({{ParameterLayout::kOriginal, "original"}, {ParameterLayout::kStacked, "stacked"}},
                               ParseParameterLayout, ParameterLayoutName);
  ExpectRoundTrip<Gate>({{Gate::kAuto, "auto"},
                                  {Gate::kOn, "on"},
                                  {Gate::kOff, "off"}},
                                 ParseGate, GateName);
  ExpectRoundTrip<StepTiming>({{StepTiming::kInterpreter, "interpreter"}, {StepTiming::kExecutor, "executor"}},
                              ParseStepTiming, StepTimingName);
  ExpectRoundTrip<ReportStatus>({{ReportStatus::kOptimized, "optimized"},
                                 {ReportStatus::kUnchanged, "unchanged"},
                                 {ReportStatus::kRejected, "rejected"}},
                                ParseReportStatus, ReportStatusName);
}

void ExpectInvalid(const absl::Status& st, const std::string& message) {
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), message);
}

TEST(OptionsEnumsTest, BadValuesNameTheValueAndTheAllowedOnes) {
  ExpectInvalid(ParseDeviceRequest("gpu").status(), "invalid device 'gpu': expected auto, cpu or cuda");
  ExpectInvalid(ParseDevice("auto").status(), "invalid device 'auto': expected cpu or cuda");
  ExpectInvalid(ParseValidationMode("bogus").status(),
                "invalid validation mode 'bogus': expected inference, training or both");
  ExpectInvalid(ParseParameterLayout("Stacked").status(),
                "invalid parameter layout 'Stacked': expected original, stacked or auto");
  ExpectInvalid(ParseGate("maybe").status(),
                "invalid rule selection 'maybe': expected auto, on or off");
  ExpectInvalid(ParseStepTiming("fuser").status(),
                "invalid step timing 'fuser': expected interpreter or executor");
  ExpectInvalid(ParseReportStatus("").status(),
                "invalid report status '': expected optimized, unchanged or rejected");
}

}  // namespace
}  // namespace sentier
