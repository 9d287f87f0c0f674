// Unit tests of JobPlanner and DaemonState: pure planning from a snapshot, a state and a rules
// fingerprint.
#include "runtime/daemon/job_planner.h"

#include <filesystem>

#include "gtest/gtest.h"

namespace sentier {
namespace {

RegistrySnapshot Snap(const std::map<std::string, std::vector<int64_t>>& models) {
  RegistrySnapshot s;
  for (const auto& [m, vs] : models) {
    for (int64_t v : vs) {
      VersionInfo info;
      info.model = m;
      info.version = v;
      info.dir = "/reg/" + m + "/" + std::to_string(v);
      info.signature = "sig-" + m + std::to_string(v);
      s.models[m].push_back(info);
    }
  }
  return s;
}

// Runs the plan and records every job as done with `fp`, as the daemon does.
std::vector<std::string> PlanAndRecord(const RegistrySnapshot& s, DaemonState* state,
                                       const std::string& fp) {
  std::vector<std::string> keys;
  for (const Job& j : JobPlanner::Plan(s, *state, fp, {})) {
    keys.push_back(j.Key() + ":" + j.why);
    VersionRecord r;
    r.status = ReportStatus::kOptimized;
    r.signature = j.source.signature;
    r.rules_fp = fp;
    state->Set(j.source.model, j.source.version, r);
  }
  return keys;
}

TEST(JobPlannerTest, NewVersionProcessedOnce) {
  DaemonState state;
  auto s = Snap({{"ranker", {1, 2}}, {"towers", {1}}});
  EXPECT_EQ(PlanAndRecord(s, &state, "fp1"),
            (std::vector<std::string>{"ranker/1:new version", "ranker/2:new version",
                                      "towers/1:new version"}));
  EXPECT_TRUE(PlanAndRecord(s, &state, "fp1").empty());
  auto s2 = Snap({{"ranker", {1, 2, 3}}, {"towers", {1}}});
  EXPECT_EQ(PlanAndRecord(s2, &state, "fp1"), (std::vector<std::string>{"ranker/3:new version"}));
}

// A replica that claims a version another replica already published does not run it again;
// a report of other sources, or of other rules for a rules re-run, does not count.
TEST(JobPlannerTest, PublishedElsewhereIsNotNeeded) {
  DaemonState empty;
  auto jobs = JobPlanner::Plan(Snap({{"ranker", {1}}}), empty, "fp1", {});
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_TRUE(JobPlanner::StillNeeded(jobs[0], nullptr, "fp1"));
  VersionRecord published;
  published.signature = jobs[0].source.signature;
  published.rules_fp = "fp0";  // an older rule set: still the version's result
  EXPECT_FALSE(JobPlanner::StillNeeded(jobs[0], &published, "fp1"));
  published.signature = "an earlier upload";
  EXPECT_TRUE(JobPlanner::StillNeeded(jobs[0], &published, "fp1"));

  Job rerun = jobs[0];
  rerun.reprocess = true;
  rerun.why = "rules changed";
  published.signature = rerun.source.signature;
  EXPECT_TRUE(JobPlanner::StillNeeded(rerun, &published, "fp1"));
  published.rules_fp = "fp1";
  EXPECT_FALSE(JobPlanner::StillNeeded(rerun, &published, "fp1"));
}

TEST(JobPlannerTest, ChangedSourceIsRetaken) {
  DaemonState state;
  auto s = Snap({{"ranker", {1}}});
  PlanAndRecord(s, &state, "fp1");
  s.models["ranker"][0].signature = "other";
  EXPECT_EQ(PlanAndRecord(s, &state, "fp1"),
            (std::vector<std::string>{"ranker/1:source changed"}));
}

TEST(JobPlannerTest, RulesChangeReprocessesLatestOnly) {
  DaemonState state;
  auto s = Snap({{"ranker", {1, 2}}, {"towers", {1, 5}}});
  PlanAndRecord(s, &state, "fp1");
  auto jobs = JobPlanner::Plan(s, state, "fp2", {});
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].Key(), "ranker/2");
  EXPECT_TRUE(jobs[0].reprocess);
  EXPECT_EQ(jobs[1].Key(), "towers/5");
  PlanAndRecord(s, &state, "fp2");
  EXPECT_TRUE(JobPlanner::Plan(s, state, "fp2", {}).empty());
}

TEST(JobPlannerTest, RefusedVersionNotReprocessedOnRulesChange) {
  DaemonState state;
  auto s = Snap({{"ranker", {1}}});
  s.models["ranker"][0].refused_reason = "model.pt is too big";
  PlanAndRecord(s, &state, "fp1");
  EXPECT_TRUE(JobPlanner::Plan(s, state, "fp2", {}).empty());
}

TEST(JobPlannerTest, BusyVersionsSkipped) {
  DaemonState state;
  auto s = Snap({{"ranker", {1, 2}}});
  auto jobs = JobPlanner::Plan(s, state, "fp1", {"ranker/1"});
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].Key(), "ranker/2");
}

TEST(JobPlannerTest, RestartIsIdempotent) {
  std::string path = ::testing::TempDir() + "/planner_state.json";
  std::filesystem::remove(path);
  auto state = DaemonState::Load(path);
  ASSERT_TRUE(state.ok());
  auto s = Snap({{"ranker", {1, 2}}, {"towers", {1}}});
  // Interrupted: only ranker/1 finished before the "crash".
  auto jobs = JobPlanner::Plan(s, *state, "fp1", {});
  ASSERT_EQ(jobs.size(), 3u);
  VersionRecord r;
  r.status = ReportStatus::kUnchanged;
  r.signature = jobs[0].source.signature;
  r.rules_fp = "fp1";
  r.arch_fp = "arch1";
  state->Set("ranker", 1, r);
  ASSERT_TRUE(state->Save(path).ok());
  auto reloaded = DaemonState::Load(path);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ(reloaded->Find("ranker", 1)->arch_fp, "arch1");
  // The restart finishes the interrupted work and does not redo ranker/1.
  EXPECT_EQ(PlanAndRecord(s, &*reloaded, "fp1"),
            (std::vector<std::string>{"ranker/2:new version", "towers/1:new version"}));
  ASSERT_TRUE(reloaded->Save(path).ok());
  auto again = DaemonState::Load(path);
  EXPECT_TRUE(JobPlanner::Plan(s, *again, "fp1", {}).empty());
}

TEST(DaemonStateTest, CorruptFileIsAnErrorNamingIt) {
  std::string path = ::testing::TempDir() + "/corrupt_state.json";
  FILE* f = fopen(path.c_str(), "w");
  fputs("{not json", f);
  fclose(f);
  auto s = DaemonState::Load(path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("corrupt_state.json"), std::string::npos);
}

TEST(DaemonStateTest, PreviousArchFp) {
  DaemonState state;
  VersionRecord a;
  a.arch_fp = "A";
  state.Set("m", 1, a);
  VersionRecord rej;  // rejected before loading: no fingerprint
  state.Set("m", 2, rej);
  EXPECT_EQ(state.PreviousArchFp("m", 3), "A");
  EXPECT_EQ(state.PreviousArchFp("m", 1), "");
}

}  // namespace
}  // namespace sentier
