#include "runtime/daemon/daemon_state.h"

#include <string>

#include <gtest/gtest.h>

namespace sentier {
namespace {

TEST(DaemonStateTest, RecordsRoundTripWithTheirStatus) {
  DaemonState state;
  VersionRecord a;
  a.status = ReportStatus::kOptimized;
  a.reason = "2 rules fired";
  a.signature = "sig-a";
  a.rules_fp = "fp";
  a.artifact_sha = "abc";
  state.Set("ranker", 2, a);
  VersionRecord b;
  b.status = ReportStatus::kUnchanged;
  b.kept_earlier = true;
  state.Set("ranker", 10, b);
  const std::string json = state.ToJson();
  EXPECT_NE(json.find("\"status\": \"optimized\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"status\": \"unchanged\""), std::string::npos) << json;

  auto loaded = DaemonState::FromJson(json);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const VersionRecord* ra = loaded->Find("ranker", 2);
  const VersionRecord* rb = loaded->Find("ranker", 10);
  ASSERT_NE(ra, nullptr);
  ASSERT_NE(rb, nullptr);
  EXPECT_EQ(ra->status, ReportStatus::kOptimized);
  EXPECT_EQ(ra->reason, "2 rules fired");
  EXPECT_EQ(ra->artifact_sha, "abc");
  EXPECT_EQ(rb->status, ReportStatus::kUnchanged);
  EXPECT_TRUE(rb->kept_earlier);
  EXPECT_EQ(loaded->Find("ranker", 3), nullptr);
  EXPECT_EQ(loaded->ToJson(), json);
}

TEST(DaemonStateTest, AStatusOutsideTheClosedSetIsACorruptFile) {
  auto bad = DaemonState::FromJson(
      R"({"format": 1, "models": {"ranker": {"4": {"status": "optimised", "reason": ""}}}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(bad.status().message()).find("ranker version 4"), std::string::npos)
      << bad.status();
  EXPECT_NE(std::string(bad.status().message()).find("optimised"), std::string::npos)
      << bad.status();
  auto missing = DaemonState::FromJson(R"({"format": 1, "models": {"m": {"1": {}}}})");
  EXPECT_FALSE(missing.ok());
}

}  // namespace
}  // namespace sentier
