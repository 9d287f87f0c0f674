// progress_deadline_test.cc — the wait follows progress, not the total time; work that stops is
// left behind with DeadlineExceeded; a process that left work behind ends through _exit with its
// exit code.
#include "runtime/progress_deadline.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace sentier {
namespace {

TEST(ProgressDeadlineTest, WorkThatFinishesGivesItsStatus) {
  int steps = 0;
  absl::Status ok = RunWithProgressDeadline(
      [&](const std::function<void()>& progress) {
        for (int i = 0; i < 3; ++i) {
          ++steps;
          progress();
        }
        return absl::OkStatus();
      },
      absl::Seconds(10));
  EXPECT_TRUE(ok.ok()) << ok;
  EXPECT_EQ(steps, 3);
  absl::Status failed = RunWithProgressDeadline(
      [](const std::function<void()>&) { return absl::InvalidArgumentError("bad step"); }, absl::Seconds(10));
  EXPECT_EQ(failed, absl::InvalidArgumentError("bad step"));
  absl::Status thrown = RunWithProgressDeadline(
      [](const std::function<void()>&) -> absl::Status { throw std::runtime_error("from the step"); },
      absl::Seconds(10));
  EXPECT_EQ(thrown.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(thrown.message(), "from the step");
}

// A limit too large for the clock's arithmetic (--executor_stall_s=1e300) is no limit, not an
// immediate one.
TEST(ProgressDeadlineTest, AnEndlessLimitWaitsForTheWork) {
  for (absl::Duration limit : {absl::InfiniteDuration(), absl::Seconds(1e300)}) {
    absl::Status st = RunWithProgressDeadline(
        [](const std::function<void()>&) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          return absl::OkStatus();
        },
        limit);
    EXPECT_TRUE(st.ok()) << st;
  }
}

// Ten steps of 40 ms each take 400 ms, four times the 100 ms limit: the limit is on the time
// between two progress calls.
TEST(ProgressDeadlineTest, SlowWorkThatProgressesIsWaitedFor) {
  const int before = AbandonedThreads();
  absl::Status st = RunWithProgressDeadline(
      [](const std::function<void()>& progress) {
        for (int i = 0; i < 10; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(40));
          progress();
        }
        return absl::OkStatus();
      },
      absl::Milliseconds(100));
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(AbandonedThreads(), before);
}

// A zero limit gives up on work that is not done at once, however often it progresses (the
// checker's and the gate's tests time with --executor_stall_s=0 to force the fallback).
TEST(ProgressDeadlineTest, AZeroLimitGivesUpAtOnce) {
  const int before = AbandonedThreads();
  auto stop = std::make_shared<std::atomic<bool>>(false);
  absl::Status st = RunWithProgressDeadline(
      [stop](const std::function<void()>& progress) {
        while (!stop->load()) progress();  // steps as fast as they come
        return absl::OkStatus();
      },
      absl::ZeroDuration());
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_EQ(AbandonedThreads(), before + 1);
  stop->store(true);
  EXPECT_TRUE(WaitForAbandonedThreads(absl::Seconds(10)));
}

TEST(ProgressDeadlineTest, WorkThatStopsIsLeftBehind) {
  const int before = AbandonedThreads();
  auto release = std::make_shared<std::promise<void>>();
  std::shared_future<void> released = release->get_future().share();
  auto finished = std::make_shared<std::atomic<bool>>(false);
  const auto start = std::chrono::steady_clock::now();
  absl::Status st = RunWithProgressDeadline(
      [released, finished](const std::function<void()>& progress) {
        progress();      // one step, then it stops (as a fuser compile that does not return)
        released.wait();
        progress();      // after the caller gave up: must be harmless
        finished->store(true);
        return absl::OkStatus();
      },
      absl::Milliseconds(100));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_NE(std::string(st.message()).find("no progress within 100ms"), std::string::npos) << st;
  EXPECT_GE(waited, std::chrono::milliseconds(100));
  EXPECT_LT(waited, std::chrono::seconds(5));
  EXPECT_EQ(AbandonedThreads(), before + 1);
  EXPECT_FALSE(finished->load());
  release->set_value();  // let the thread end, owning what it uses
  EXPECT_TRUE(WaitForAbandonedThreads(absl::Seconds(10)));
  EXPECT_TRUE(finished->load());
  EXPECT_EQ(AbandonedThreads(), before);
  // Nothing left behind is running any more: the process ends normally.
  EXPECT_EQ(FinishProcess(3), 3);
}

// A process that left a thread behind (here one that never ends) exits with its code through
// _exit, without running static destructors under that thread.
TEST(ProgressDeadlineDeathTest, FinishProcessExitsWithTheCodeAfterWorkWasLeftBehind) {
  ::testing::GTEST_FLAG(death_test_style) = "threadsafe";
  EXPECT_EXIT(
      {
        auto never = std::make_shared<std::promise<void>>();
        std::shared_future<void> forever = never->get_future().share();
        absl::Status st = RunWithProgressDeadline(
            [forever, never](const std::function<void()>&) {
              forever.wait();
              return absl::OkStatus();
            },
            absl::Milliseconds(20));
        std::fprintf(stderr, "%s\n", st.ok() ? "finished" : "left behind");
        FinishProcess(7);
        std::fprintf(stderr, "returned\n");
        std::exit(0);
      },
      ::testing::ExitedWithCode(7), "left behind");
}

}  // namespace
}  // namespace sentier
