#include "runtime/daemon/model_config.h"

#include <gtest/gtest.h>

namespace sentier {
namespace {

TEST(ModelConfigTest, KeysOverrideDefaultsAndOthersStay) {
  ModelConfig config;
  config.memory_margin = 0.02;
  ASSERT_TRUE(ApplyModelConfigJson(R"({"param_layout": "stacked"})", &config).ok());
  EXPECT_EQ(config.param_layout, ParameterLayout::kStacked);
  EXPECT_DOUBLE_EQ(config.memory_margin, 0.02);
  ASSERT_TRUE(ApplyModelConfigJson(R"({"memory_margin": 1.5})", &config).ok());
  EXPECT_EQ(config.param_layout, ParameterLayout::kStacked);
  EXPECT_DOUBLE_EQ(config.memory_margin, 1.5);
  ASSERT_TRUE(ApplyModelConfigJson(R"({"memory_margin": -1, "param_layout": "original"})", &config).ok());
  EXPECT_EQ(config.param_layout, ParameterLayout::kOriginal);
  EXPECT_DOUBLE_EQ(config.memory_margin, -1.0);
  ASSERT_TRUE(ApplyModelConfigJson("{}", &config).ok());
  EXPECT_DOUBLE_EQ(config.memory_margin, -1.0);
}

void ExpectRejected(const char* text, const std::string& fragment) {
  ModelConfig config;
  config.memory_margin = 0.25;
  absl::Status s = ApplyModelConfigJson(text, &config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text;
  EXPECT_NE(std::string(s.message()).find(fragment), std::string::npos) << s.message();
  // Nothing of a rejected file is applied, not even its valid keys.
  EXPECT_EQ(config.param_layout, ParameterLayout::kOriginal) << text;
  EXPECT_DOUBLE_EQ(config.memory_margin, 0.25) << text;
}

TEST(ModelConfigTest, BadFilesAreRejectedWithTheReason) {
  ExpectRejected(R"({"param_layout": "flat"})", "param_layout must be \"original\" or \"stacked\", not \"flat\"");
  ExpectRejected(R"({"param_layout": 1})", "not 1");
  ExpectRejected(R"({"param_layout": "stacked", "memory_margin": "lots"})", "memory_margin must be a number");
  ExpectRejected(R"({"memory_margin": null})", "not null");
  ExpectRejected(R"({"param_layout": "stacked", "memroy_margin": 0.5})", "unknown key 'memroy_margin'");
  ExpectRejected(R"(["stacked"])", "not a JSON object");
  ExpectRejected(R"({"param_layout": )", "not valid JSON");
  ExpectRejected("", "not valid JSON");
}

}  // namespace
}  // namespace sentier
