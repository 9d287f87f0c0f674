// Unit tests of DaemonManager, one step at a time (PollAndPlan, DispatchReady, ReapFinished) with
// a fake JobLauncher whose children act by model name: publish, crash, write garbage, or fail
// to write their output. No sleeps: ReapFinished(block=true) waits for the children.
#include "runtime/daemon/daemon_manager.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/file_util.h"

namespace sentier {
namespace {

namespace fs = std::filesystem;

constexpr char kRule[] = R"(rule squeeze_of_unsqueeze
  family normalize
  description squeeze(unsqueeze(x, d), d) == x
  match
    %u = aten::unsqueeze(%x, $d)
    %y = aten::squeeze(%u, $d)
  rewrite
    replace %y with %x
end
)";

// In the child only async-signal-safe calls: open/write/close and _exit.
void WriteRaw(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) _exit(3);
  (void)!::write(fd, text.data(), text.size());
  ::close(fd);
}

class FakeLauncher : public JobLauncher {
 public:
  pid_t Launch(const JobSpec& spec) override {
    launched.insert(absl::StrCat(spec.model, "/", spec.version));
    last = spec;
    std::string job = spec.stage_dir + "/job.json", model = spec.stage_dir + "/model.pt";
    pid_t pid = ::fork();
    if (pid != 0) return pid;
    if (spec.model == "crash") std::abort();
    if (spec.model == "nospace") _exit(kJobExitOutputFailed);
    if (spec.model == "garbage") {
      WriteRaw(job, "{not json");
      _exit(0);
    }
    WriteRaw(model, "artifact");
    if (spec.model == "trained") {  // its sentier.json chose the mode
      WriteRaw(job, R"({"status": "optimized", "reason": "test", "mode": "training"})");
      _exit(0);
    }
    if (spec.model == "stalled") {  // executor timing made no progress; timed in the interpreter
      WriteRaw(job, R"({"status": "unchanged", "reason": "test",
                        "selection": {"timing": "interpreter", "timing_fallback": "no progress"}})");
      _exit(0);
    }
    WriteRaw(job, R"({"status": "optimized", "reason": "test", "architecture_fingerprint": "a1",
                      "decision": "optimized", "timings_ms": {"select": 1500, "validate": 250},
                      "validation": {"training_step_ms": {"reference": 30, "candidate": 20}}})");
    _exit(0);
  }
  std::set<std::string> launched;
  JobSpec last;
};

class DaemonManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            (std::string("mgr_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(RemoveTree(root_.string()).ok());
    fs::create_directories(root_ / "reg");
    ASSERT_TRUE(WriteFileSynced((root_ / "my.rules").string(), kRule).ok());
    options_.registry = (root_ / "reg").string();
    options_.output = (root_ / "out").string();
    options_.rule_paths = {(root_ / "my.rules").string()};
    options_.workers = 8;
    options_.param_layout = ParameterLayout::kStacked;
    options_.launcher = &launcher_;
  }
  void AddVersion(const std::string& model, int v, const std::string& bytes = "model") {
    fs::path d = root_ / "reg" / model / std::to_string(v);
    fs::create_directories(d);
    ASSERT_TRUE(WriteFileSynced((d / "model.pt").string(), bytes).ok());
    ASSERT_TRUE(WriteFileSynced((d / "inputs.pt").string(), "inputs").ok());
  }
  // Two polls (a version is taken once it has not changed for one poll), then every job run.
  int PlanAndRunAll(DaemonManager& m) {
    auto first = m.PollAndPlan();
    EXPECT_TRUE(first.ok()) << first.status();
    auto second = m.PollAndPlan();
    EXPECT_TRUE(second.ok()) << second.status();
    int planned = first.value_or(0) + second.value_or(0);
    m.DispatchReady();
    while (m.running() > 0) m.ReapFinished(/*block=*/true);
    return planned;
  }
  std::string Report(const std::string& model, int v) {
    return ReadFile((root_ / "out" / model / std::to_string(v) / "report.json").string())
        .value_or("<none>");
  }
  fs::path root_;
  FakeLauncher launcher_;
  ManagerOptions options_;
};

TEST_F(DaemonManagerTest, PublishesResultsAndRejectsCrashesAndGarbage) {
  AddVersion("good", 1);
  AddVersion("crash", 1);
  AddVersion("garbage", 1);
  AddVersion("trained", 1);
  AddVersion("stalled", 1);
  options_.timing = StepTiming::kExecutor;
  options_.executor_stall_s = 7.5;
  DaemonManager m(options_);
  ASSERT_TRUE(m.Start().ok());
  EXPECT_EQ(PlanAndRunAll(m), 5);
  EXPECT_EQ(launcher_.launched,
            (std::set<std::string>{"good/1", "crash/1", "garbage/1", "trained/1", "stalled/1"}));
  // Options reach the job.
  EXPECT_EQ(ParameterLayoutName(launcher_.last.param_layout), "stacked");
  EXPECT_EQ(StepTimingName(launcher_.last.timing), "executor");
  EXPECT_EQ(launcher_.last.executor_stall_s, 7.5);

  std::string good = Report("good", 1);
  EXPECT_TRUE(absl::StrContains(good, "\"status\": \"optimized\"")) << good;
  EXPECT_TRUE(absl::StrContains(good, "\"tool\": \"sentierd\"")) << good;
  EXPECT_TRUE(absl::StrContains(good, "\"trigger\": \"new version\"")) << good;
  EXPECT_TRUE(absl::StrContains(good, "\"mode\": \"both\"")) << good;  // the daemon's --mode
  std::string trained = Report("trained", 1);
  EXPECT_TRUE(absl::StrContains(trained, "\"mode\": \"training\"")) << trained;  // the job's own
  EXPECT_FALSE(absl::StrContains(trained, "\"mode\": \"both\"")) << trained;
  EXPECT_EQ(ReadFile((root_ / "out" / "good" / "1" / "model.pt").string()).value_or(""), "artifact");
  std::string crash = Report("crash", 1);
  EXPECT_TRUE(absl::StrContains(crash, "job process crashed (signal 6")) << crash;
  EXPECT_FALSE(fs::exists(root_ / "out" / "crash" / "1" / "model.pt"));
  EXPECT_TRUE(absl::StrContains(Report("garbage", 1), "job result unreadable."));

  ASSERT_NE(m.state().Find("good", 1), nullptr);
  EXPECT_EQ(ReportStatusName(m.state().Find("good", 1)->status), "optimized");
  EXPECT_EQ(ReportStatusName(m.state().Find("crash", 1)->status), "rejected");
  EXPECT_EQ(m.metrics().seen(), 5);
  EXPECT_EQ(m.metrics().versions("optimized"), 2);
  EXPECT_EQ(m.metrics().versions("unchanged"), 1);
  EXPECT_EQ(m.metrics().versions("rejected"), 2);
  EXPECT_EQ(m.metrics().timing_fallbacks(), 1);  // stalled/1
  EXPECT_EQ(m.metrics().job_count(), 5);
  EXPECT_EQ(m.metrics().NotReadyReason(), "");  // rules loaded, polled
  // From the reports: the clause (none in the daemon's own and the fakes' other reports), the
  // speed-up of what is published (1 for an unchanged version: the original).
  EXPECT_EQ(m.metrics().decisions("optimized"), 1);
  EXPECT_EQ(m.metrics().decisions("unknown"), 4);
  EXPECT_EQ(m.metrics().model_speedup("good"), 1.5);
  EXPECT_EQ(m.metrics().model_speedup("stalled"), 1.0);
  EXPECT_EQ(m.metrics().model_speedup("trained"), std::nullopt);  // no timed training step
  EXPECT_EQ(m.metrics().model_speedup("crash"), std::nullopt);
  const std::string text = m.metrics().Render();
  EXPECT_NE(text.find("sentierd_gate_duration_seconds_count 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("sentierd_gate_duration_seconds_sum 1.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("sentierd_validation_duration_seconds_sum 0.25\n"), std::string::npos);
  EXPECT_NE(m.metrics().Render().find("sentierd_timing_fallbacks_total 1\n"), std::string::npos);
  // Nothing new: the next poll plans nothing.
  auto again = m.PollAndPlan();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0);
  EXPECT_NE(m.Summary().find("sentierd: good: v1 optimized; latest v1"), std::string::npos)
      << m.Summary();
}

TEST_F(DaemonManagerTest, OutputFailureIsNotRecordedAndWaitsBeforeRetry) {
  AddVersion("nospace", 1);
  DaemonManager m(options_);
  ASSERT_TRUE(m.Start().ok());
  EXPECT_EQ(PlanAndRunAll(m), 1);
  EXPECT_FALSE(fs::exists(root_ / "out" / "nospace" / "1"));
  EXPECT_EQ(m.state().Find("nospace", 1), nullptr);
  EXPECT_EQ(m.metrics().output_errors(), 1);
  EXPECT_EQ(m.metrics().job_count(), 0);  // nothing recorded
  // Backed off (1 s): an immediate poll does not plan it again.
  auto again = m.PollAndPlan();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0);
}

TEST_F(DaemonManagerTest, RefusedVersionIsRejectedWithoutAJob) {
  options_.max_model_bytes = 10;
  AddVersion("huge", 1, std::string(100, 'x'));
  DaemonManager m(options_);
  ASSERT_TRUE(m.Start().ok());
  EXPECT_EQ(PlanAndRunAll(m), 1);
  EXPECT_TRUE(launcher_.launched.empty());
  std::string r = Report("huge", 1);
  EXPECT_TRUE(absl::StrContains(r, "refused: ")) << r;
  EXPECT_TRUE(absl::StrContains(r, "max_model_bytes")) << r;
}

TEST_F(DaemonManagerTest, ChangedRulesReprocessTheLatestVersionOnly) {
  AddVersion("good", 1);
  AddVersion("good", 2);
  DaemonManager m(options_);
  ASSERT_TRUE(m.Start().ok());
  EXPECT_EQ(PlanAndRunAll(m), 2);
  std::string edited = std::string(kRule);
  edited.replace(edited.find("squeeze_of_unsqueeze"), 20, "squeeze_after_unsqueeze");
  ASSERT_TRUE(WriteFileSynced((root_ / "my.rules").string(), edited).ok());
  auto planned = m.PollAndPlan();
  ASSERT_TRUE(planned.ok());
  ASSERT_EQ(*planned, 1);
  EXPECT_EQ(m.queue().front().Key(), "good/2");
  EXPECT_EQ(m.queue().front().why, "rules changed");
  EXPECT_TRUE(m.queue().front().reprocess);
}

TEST_F(DaemonManagerTest, OncePlansOnlyAfterVersionsSettle) {
  options_.once = true;
  AddVersion("good", 1);
  DaemonManager m(options_);
  ASSERT_TRUE(m.Start().ok());
  auto first = m.PollAndPlan();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, 0);
  EXPECT_FALSE(m.once_planned());
  auto second = m.PollAndPlan();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, 1);
  EXPECT_TRUE(m.once_planned());
}

TEST_F(DaemonManagerTest, SecondManagerOnOneOutputIsRefused) {
  DaemonManager first(options_);
  ASSERT_TRUE(first.Start().ok());
  DaemonManager second(options_);
  absl::Status st = second.Start();
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "is locked by another sentierd")) << st;
}

// /readyz: ready once the rules are loaded and a poll has succeeded; a failed poll does not move
// the last successful poll's time.
TEST_F(DaemonManagerTest, ReadyAfterRulesAndASuccessfulPoll) {
  DaemonManager m(options_);
  EXPECT_TRUE(absl::StrContains(m.metrics().NotReadyReason(), "no rule set"));
  ASSERT_TRUE(m.Start().ok());
  EXPECT_TRUE(absl::StrContains(m.metrics().NotReadyReason(), "not been polled"));
  fs::rename(root_ / "reg", root_ / "reg-away");
  EXPECT_FALSE(m.PollAndPlan().ok());
  EXPECT_NE(m.metrics().NotReadyReason(), "");
  EXPECT_EQ(m.metrics().last_successful_poll(), 0);
  fs::rename(root_ / "reg-away", root_ / "reg");
  const int64_t before = static_cast<int64_t>(::time(nullptr));
  ASSERT_TRUE(m.PollAndPlan().ok());
  EXPECT_EQ(m.metrics().NotReadyReason(), "");
  EXPECT_GE(m.metrics().last_successful_poll(), before);
  EXPECT_LE(m.metrics().last_successful_poll(), static_cast<int64_t>(::time(nullptr)));
}

// Replicas (--shard=i/n) share OUT; two of one shard, or a replica and a daemon without --shard,
// exclude each other.
TEST_F(DaemonManagerTest, ReplicasShareTheOutputButNotAShard) {
  ManagerOptions r0 = options_, r1 = options_;
  r0.replica = r1.replica = true;
  r0.shard_count = r1.shard_count = 2;
  r1.shard_index = 1;
  DaemonManager a(r0), b(r1);
  ASSERT_TRUE(a.Start().ok());
  auto snapshot_inode = [this] {
    for (const auto& e : fs::directory_iterator(root_ / "out" / ".sentierd")) {
      struct stat st;
      if (absl::StartsWith(e.path().filename().string(), "rules-") && ::stat(e.path().c_str(), &st) == 0) {
        return static_cast<int64_t>(st.st_ino);
      }
    }
    return int64_t{-1};
  };
  const int64_t inode = snapshot_inode();
  ASSERT_GE(inode, 0);
  ASSERT_TRUE(b.Start().ok());
  // b uses a's snapshot of the same rules as it is: a's jobs may be loading it.
  EXPECT_EQ(snapshot_inode(), inode);
  DaemonManager again(r0);
  absl::Status st = again.Start();
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "with --shard=0/2")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "replica-0-of-2.lock")) << st;
  DaemonManager alone(options_);
  st = alone.Start();
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  // The other way round: a daemon without --shard holds OUT, a replica is refused.
  fs::path other = root_ / "out2";
  ManagerOptions single = options_, replica = r0;
  single.output = replica.output = other.string();
  DaemonManager s1(single);
  ASSERT_TRUE(s1.Start().ok());
  DaemonManager s2(replica);
  st = s2.Start();
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "without --shard")) << st;
}

// During a resize an old and a new owner of one model may both plan its version: the one that
// claims it runs it, the other leaves it while it is claimed and then adopts the published
// report instead of running it again.
TEST_F(DaemonManagerTest, ReplicasRunAClaimedVersionOnce) {
  AddVersion("good", 1);
  ManagerOptions old_owner = options_, new_owner = options_;
  old_owner.replica = new_owner.replica = true;  // --shard=0/1, and --shard=k/2 owning "good"
  new_owner.shard_count = 2;
  new_owner.shard_index = ShardOf("good", 2);
  FakeLauncher other;
  new_owner.launcher = &other;
  DaemonManager a(old_owner), b(new_owner);
  ASSERT_TRUE(a.Start().ok());
  ASSERT_TRUE(b.Start().ok());
  for (DaemonManager* m : {&a, &b}) {
    ASSERT_TRUE(m->PollAndPlan().ok());
    auto planned = m->PollAndPlan();
    ASSERT_TRUE(planned.ok());
    EXPECT_EQ(*planned, 1);
  }
  EXPECT_EQ(b.DispatchReady(), 1);
  EXPECT_EQ(b.running(), 1u);
  EXPECT_TRUE(fs::exists(VersionClaim::LockPath(options_.output, "good", 1)));
  a.DispatchReady();  // claimed by b: left to it
  EXPECT_EQ(a.running(), 0u);
  EXPECT_TRUE(launcher_.launched.empty());
  while (b.running() > 0) b.ReapFinished(/*block=*/true);
  EXPECT_TRUE(absl::StrContains(Report("good", 1), "\"status\": \"optimized\""));
  EXPECT_FALSE(fs::exists(VersionClaim::LockPath(options_.output, "good", 1)));  // released
  EXPECT_TRUE(fs::exists(root_ / "out" / ".sentierd" /
                         absl::StrCat("state-", new_owner.shard_index, "-of-2.json")));
  // a plans it again (its state lacks it), claims it, finds it published: adopted, not run.
  auto planned = a.PollAndPlan();
  ASSERT_TRUE(planned.ok());
  EXPECT_EQ(*planned, 1);
  a.DispatchReady();
  EXPECT_EQ(a.running(), 0u);
  EXPECT_TRUE(launcher_.launched.empty());
  EXPECT_EQ(other.launched, (std::set<std::string>{"good/1"}));
  ASSERT_NE(a.state().Find("good", 1), nullptr);
  planned = a.PollAndPlan();
  ASSERT_TRUE(planned.ok());
  EXPECT_EQ(*planned, 0);
}

// A replica's start-up removes only the staging dirs whose claim is free (their writer is
// gone); it adopts the reports published for its shard's models only.
TEST_F(DaemonManagerTest, ReplicaCleansOnlyUnclaimedStaging) {
  fs::create_directories(root_ / "out" / ".tmp-good-1-999-1");
  fs::create_directories(root_ / "out" / ".tmp-good-2-999-1");
  auto held = VersionClaim::TryAcquire(options_.output, "good", 2);  // a live writer's
  ASSERT_TRUE(held.ok() && *held != nullptr);
  options_.replica = true;
  DaemonManager m(options_);
  ASSERT_TRUE(m.Start().ok());
  EXPECT_FALSE(fs::exists(root_ / "out" / ".tmp-good-1-999-1"));
  EXPECT_TRUE(fs::exists(root_ / "out" / ".tmp-good-2-999-1"));
}

TEST_F(DaemonManagerTest, BrokenRulesAtStartAreInvalidArgument) {
  ASSERT_TRUE(WriteFileSynced((root_ / "my.rules").string(), "rule broken\n").ok());
  DaemonManager m(options_);
  absl::Status st = m.Start();
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
}

}  // namespace
}  // namespace sentier
