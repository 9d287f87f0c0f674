// options_test.cc — the pipeline options' one JSON form: every option survives the job's
// encode/decode round trip, the tools' defaults differ only where documented, and a bad encoding
// names the key.
#include "runtime/pipeline/options.h"

#include <cmath>

#include <gtest/gtest.h>

namespace sentier {
namespace {

PipelineOptions EveryOptionChanged() {
  PipelineOptions o;
  o.mode = ValidationMode::kInference;
  o.param_layout = ParameterLayout::kStacked;
  o.device = Device::kCuda;
  o.gate = Gate::kOn;
  o.memory_margin = 0.1;  // not exact in binary: the encoding must still round-trip it
  o.max_memory_share = 0.3;
  o.max_step_memory_mib = 2048.5;
  o.timing = StepTiming::kExecutor;
  o.executor_stall_s = 7.25;
  o.max_rounds = 3;
  o.validation_trials = 5;
  o.allow_growth = true;
  return o;
}

TEST(OptionsTest, EncodeDecodeRoundTripsEveryOption) {
  for (const PipelineOptions& o : {PipelineOptions(), DefaultOptions(Tool::kSentierOpt), EveryOptionChanged()}) {
    const std::string text = EncodeOptions(o).dump();
    auto decoded = DecodeOptions(nlohmann::json::parse(text));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_TRUE(*decoded == o) << text;
    EXPECT_EQ(EncodeOptions(*decoded).dump(), text);
  }
  auto decoded = DecodeOptions(EncodeOptions(EveryOptionChanged()));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->memory_margin, 0.1);
  EXPECT_EQ(decoded->executor_stall_s, 7.25);
  EXPECT_EQ(decoded->max_rounds, 3);
  EXPECT_TRUE(decoded->allow_growth);
  EXPECT_EQ(decoded->gate, Gate::kOn);
}

TEST(OptionsTest, EveryFieldIsEncoded) {
  // A field left out of the table would survive no round trip: each change alone must show.
  const PipelineOptions base;
  const PipelineOptions all = EveryOptionChanged();
  const nlohmann::json a = EncodeOptions(base), b = EncodeOptions(all);
  EXPECT_EQ(a.size(), b.size());
  for (auto it = a.begin(); it != a.end(); ++it) EXPECT_NE(it.value(), b[it.key()]) << it.key();
  EXPECT_EQ(a.size(), 12u);
}

TEST(OptionsTest, DefaultPolicyIsEncodedAsAuto) {
  EXPECT_EQ(EncodeOptions(PipelineOptions())["memory_margin"], "auto");
  auto decoded = DecodeOptions(EncodeOptions(PipelineOptions()));
  ASSERT_TRUE(decoded.ok());
  EXPECT_TRUE(std::isnan(decoded->memory_margin));
}

TEST(OptionsTest, ToolDefaults) {
  EXPECT_EQ(DefaultOptions(Tool::kSentierd).mode, ValidationMode::kBoth);
  EXPECT_EQ(DefaultOptions(Tool::kSentierd).gate, Gate::kAuto);
  EXPECT_EQ(DefaultOptions(Tool::kSentierOpt).mode, ValidationMode::kTraining);
  EXPECT_EQ(DefaultOptions(Tool::kSentierOpt).gate, Gate::kOff);
  EXPECT_EQ(DefaultOptions(Tool::kModelBench).mode, ValidationMode::kBoth);
  PipelineOptions o;
  EXPECT_FALSE(GateOn(o));
  o.device = Device::kCuda;
  EXPECT_TRUE(GateOn(o));
  o.gate = Gate::kOff;
  EXPECT_FALSE(GateOn(o));
}

TEST(OptionsTest, BadEncodingNamesTheKey) {
  auto bad = DecodeOptions(nlohmann::json::parse(R"({"max_rounds": 0})"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.status().message()).find("max_rounds must be >= 1"), std::string::npos);
  bad = DecodeOptions(nlohmann::json::parse(R"({"gates": "on"})"));
  EXPECT_NE(std::string(bad.status().message()).find("unknown key 'gates'"), std::string::npos);
  bad = DecodeOptions(nlohmann::json::parse(R"({"device": "tpu"})"));
  EXPECT_NE(std::string(bad.status().message()).find("device must be"), std::string::npos);
}

TEST(OptionsTest, ModelConfigMaySetOnlyTheOwnersKeys) {
  PipelineOptions o;
  absl::Status s = ApplyModelConfigJson(R"({"gate": "off"})", &o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("unknown key 'gate'"), std::string::npos) << s;
  EXPECT_EQ(o.gate, Gate::kAuto);
  ASSERT_TRUE(ApplyModelConfigJson(R"({"max_step_memory_mib": 512})", &o).ok());
  EXPECT_EQ(Margins(o).max_step_bytes, int64_t{512} << 20);
}

TEST(OptionsTest, ResolveDevice) {
  EXPECT_EQ(*ResolveDevice(DeviceRequest::kAuto, false), Device::kCpu);
  EXPECT_EQ(*ResolveDevice(DeviceRequest::kAuto, true), Device::kCuda);
  EXPECT_EQ(*ResolveDevice(DeviceRequest::kCpu, true), Device::kCpu);
  EXPECT_EQ(ResolveDevice(DeviceRequest::kCuda, false).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sentier
