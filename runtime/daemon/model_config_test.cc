// model_config_test.cc — REG/<model>/sentier.json: keys override the daemon's flags one by one,
// and a bad file changes nothing and says which key and value were wrong.
#include <cmath>

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
  EXPECT_EQ(config.mode, ValidationMode::kBoth);
  ASSERT_TRUE(ApplyModelConfigJson(R"({"mode": "training"})", &config).ok());
  EXPECT_EQ(config.mode, ValidationMode::kTraining);
  EXPECT_EQ(config.param_layout, ParameterLayout::kOriginal);
  ASSERT_TRUE(ApplyModelConfigJson(R"({"mode": "inference", "memory_margin": 0})", &config).ok());
  EXPECT_EQ(config.mode, ValidationMode::kInference);
  EXPECT_DOUBLE_EQ(config.memory_margin, 0.0);
  EXPECT_EQ(config.timing, StepTiming::kInterpreter);
  ASSERT_TRUE(ApplyModelConfigJson(R"({"timing": "executor"})", &config).ok());
  EXPECT_EQ(config.timing, StepTiming::kExecutor);
  EXPECT_EQ(config.mode, ValidationMode::kInference);
}

TEST(ModelConfigTest, MemoryPolicyKeys) {
  ModelConfig config;
  EXPECT_TRUE(std::isnan(config.memory_margin));  // the default policy
  ASSERT_TRUE(ApplyModelConfigJson(R"({"memory_margin": 0.5})", &config).ok());
  EXPECT_DOUBLE_EQ(config.memory_margin, 0.5);
  ASSERT_TRUE(ApplyModelConfigJson(R"({"memory_margin": "auto", "max_step_memory_mib": 2048})", &config).ok());
  EXPECT_TRUE(std::isnan(config.memory_margin));
  EXPECT_DOUBLE_EQ(config.max_step_memory_mib, 2048.0);
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
  EXPECT_EQ(config.mode, ValidationMode::kBoth) << text;
}

TEST(ModelConfigTest, BadFilesAreRejectedWithTheReason) {
  ExpectRejected(R"({"param_layout": "flat"})", "param_layout must be \"original\", \"stacked\" or \"auto\", not \"flat\"");
  ExpectRejected(R"({"param_layout": 1})", "not 1");
  ExpectRejected(R"({"param_layout": "stacked", "memory_margin": "lots"})", "memory_margin must be a number");
  ExpectRejected(R"({"memory_margin": null})", "not null");
  ExpectRejected(R"({"param_layout": "stacked", "memroy_margin": 0.5})", "unknown key 'memroy_margin'");
  ExpectRejected(R"({"timing": "fuser"})", "timing must be \"interpreter\" or \"executor\", not \"fuser\"");
  ExpectRejected(R"({"mode": "train"})", "mode must be \"inference\", \"training\" or \"both\", not \"train\"");
  ExpectRejected(R"({"mode": "training", "param_layout": "stacked", "memory_margin": [1]})",
                 "memory_margin must be a number");
  ExpectRejected(R"(["stacked"])", "not a JSON object");
  ExpectRejected(R"({"param_layout": )", "not valid JSON");
  ExpectRejected("", "not valid JSON");
  ExpectRejected(R"({"max_step_memory_mib": 0})", "max_step_memory_mib must be a positive number");
  ExpectRejected(R"({"max_step_memory_mib": "8G"})", "max_step_memory_mib must be a positive number");
}

}  // namespace
}  // namespace sentier
