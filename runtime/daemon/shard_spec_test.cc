// shard_spec_test.cc — ResolveShard: --shard=i/n as before, --shard=auto from the host name's
// ordinal or SENTIER_SHARD_INDEX and the count from --shard_count or SENTIER_SHARD_COUNT, and the
// errors for each missing or inconsistent value.
#include "runtime/daemon/shard_spec.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"

namespace sentier {
namespace {

ShardEnv Host(const std::string& name) {
  ShardEnv env;
  env.hostname = name;
  return env;
}

TEST(ShardSpecTest, EmptyIsTheWholeRegistry) {
  auto s = ResolveShard("", 0, Host("anything"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->index, 0);
  EXPECT_EQ(s->count, 1);
}

TEST(ShardSpecTest, ExplicitSpecIgnoresTheEnvironment) {
  ShardEnv env = Host("sentierd-3");
  env.shard_index = "5";
  env.shard_count = "9";
  auto s = ResolveShard("1/4", 0, env);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->index, 1);
  EXPECT_EQ(s->count, 4);
}

TEST(ShardSpecTest, MalformedExplicitSpecIsRejected) {
  for (const char* bad : {"4/4", "x", "1/0", "-1/3", "auto/2"}) {
    auto s = ResolveShard(bad, 0, Host("h"));
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_TRUE(absl::StrContains(s.status().message(), "must be i/n")) << s.status();
  }
}

TEST(ShardSpecTest, ShardCountWithoutAutoIsRejected) {
  auto s = ResolveShard("1/4", 4, Host("h"));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.status().message(), "only read with --shard=auto"));
  EXPECT_FALSE(ResolveShard("", 2, Host("h")).ok());
  EXPECT_FALSE(ResolveShard("auto", -1, Host("sentierd-0")).ok());
}

TEST(ShardSpecTest, OrdinalFromHostname) {
  EXPECT_EQ(OrdinalFromHostname("sentierd-0"), 0);
  EXPECT_EQ(OrdinalFromHostname("sentierd-12"), 12);
  EXPECT_EQ(OrdinalFromHostname("my-gpu-pool-3"), 3);
  EXPECT_EQ(OrdinalFromHostname("sentierd-2.sentierd.ml.svc.cluster.local"), 2);
  EXPECT_EQ(OrdinalFromHostname("sentierd"), std::nullopt);
  EXPECT_EQ(OrdinalFromHostname("sentierd-"), std::nullopt);
  EXPECT_EQ(OrdinalFromHostname("sentierd-a1"), std::nullopt);
  EXPECT_EQ(OrdinalFromHostname("sentierd-+1"), std::nullopt);
  EXPECT_EQ(OrdinalFromHostname("sentierd-1234567890"), std::nullopt);  // too long
  EXPECT_EQ(OrdinalFromHostname(""), std::nullopt);
}

TEST(ShardSpecTest, AutoTakesTheOrdinalAndTheFlagCount) {
  auto s = ResolveShard("auto", 4, Host("sentierd-2"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->index, 2);
  EXPECT_EQ(s->count, 4);
}

TEST(ShardSpecTest, AutoTakesTheCountFromTheEnvironment) {
  ShardEnv env = Host("sentierd-1");
  env.shard_count = "3";
  auto s = ResolveShard("auto", 0, env);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->index, 1);
  EXPECT_EQ(s->count, 3);
}

TEST(ShardSpecTest, FlagCountWinsOverTheEnvironment) {
  ShardEnv env = Host("sentierd-4");
  env.shard_count = "3";
  auto s = ResolveShard("auto", 5, env);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->count, 5);
}

TEST(ShardSpecTest, IndexVariableWinsOverTheHostname) {
  ShardEnv env = Host("sentierd-0");
  env.shard_index = "2";
  auto s = ResolveShard("auto", 3, env);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->index, 2);
  // And it serves where the host name has no ordinal at all.
  env.hostname = "gpu-host";
  s = ResolveShard("auto", 3, env);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->index, 2);
}

TEST(ShardSpecTest, AutoWithoutAnIndexNamesBothSources) {
  auto s = ResolveShard("auto", 3, Host("laptop"));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.status().message(), "no shard index")) << s.status();
  EXPECT_TRUE(absl::StrContains(s.status().message(), "'laptop'")) << s.status();
  EXPECT_TRUE(absl::StrContains(s.status().message(), "SENTIER_SHARD_INDEX")) << s.status();
}

TEST(ShardSpecTest, AutoWithoutACountNamesBothSources) {
  auto s = ResolveShard("auto", 0, Host("sentierd-0"));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.status().message(), "no shard count")) << s.status();
  EXPECT_TRUE(absl::StrContains(s.status().message(), "--shard_count")) << s.status();
  EXPECT_TRUE(absl::StrContains(s.status().message(), "SENTIER_SHARD_COUNT")) << s.status();
}

TEST(ShardSpecTest, IndexOutOfRangeNamesWhereEachNumberCameFrom) {
  auto s = ResolveShard("auto", 3, Host("sentierd-3"));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.status().message(),
                                "shard index 3 (from host name 'sentierd-3') is out of range "
                                "for a shard count of 3 (from --shard_count)"))
      << s.status();
  ShardEnv env = Host("h");
  env.shard_index = "7";
  env.shard_count = "2";
  s = ResolveShard("auto", 0, env);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.status().message(),
                                "(from SENTIER_SHARD_INDEX) is out of range for a shard count of "
                                "2 (from SENTIER_SHARD_COUNT)"))
      << s.status();
}

TEST(ShardSpecTest, MalformedVariablesAreRejected) {
  ShardEnv env = Host("sentierd-0");
  env.shard_index = "one";
  auto s = ResolveShard("auto", 2, env);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.status().message(), "SENTIER_SHARD_INDEX='one'")) << s.status();

  env = Host("sentierd-0");
  env.shard_count = "0";
  s = ResolveShard("auto", 0, env);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.status().message(), "SENTIER_SHARD_COUNT='0'")) << s.status();
  env.shard_count = " 2";
  EXPECT_FALSE(ResolveShard("auto", 0, env).ok());
}

}  // namespace
}  // namespace sentier
