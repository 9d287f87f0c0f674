// progress_deadline.cc — the worker thread, its shared state and the wait (see the header).
#include "runtime/progress_deadline.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sentier {
namespace {

// Threads left behind that have not ended yet, and a signal for when one ends.
std::mutex abandoned_mu;
std::condition_variable abandoned_ended;
int abandoned = 0;

// Shared by the caller and the worker; the worker keeps it alive after a caller gave up.
struct Shared {
  std::mutex mu;
  std::condition_variable changed;
  long long progress = 0;
  bool done = false;
  bool left_behind = false;  // the caller gave up waiting
  absl::Status result;
};

}  // namespace

absl::Status RunWithProgressDeadline(ProgressWork work, absl::Duration stall_limit) {
  auto shared = std::make_shared<Shared>();
  std::thread worker([shared, work = std::move(work)]() mutable {
    auto progress = [&shared] {
      std::lock_guard<std::mutex> lock(shared->mu);
      ++shared->progress;
      shared->changed.notify_all();
    };
    absl::Status st;
    {
      // The work and what it owns (a model's copy, its tensors) are destroyed here, before the
      // thread counts as ended: a process may exit normally once no thread left behind runs.
      ProgressWork owned = std::move(work);
      try {
        st = owned(progress);
      } catch (const std::exception& e) {
        st = absl::InternalError(e.what());
      } catch (...) {
        st = absl::InternalError("unknown exception");
      }
    }
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->result = std::move(st);
    shared->done = true;
    shared->changed.notify_all();
    if (shared->left_behind) {
      std::lock_guard<std::mutex> count(abandoned_mu);
      --abandoned;
      abandoned_ended.notify_all();
    }
  });
  // Waits of at most a day (a limit up to absl::InfiniteDuration is counted down a day at a
  // time): the clock's arithmetic must not overflow into a wait that ends at once.
  std::unique_lock<std::mutex> lock(shared->mu);
  absl::Duration left = stall_limit;  // without progress, from the last progress
  while (!shared->done) {
    const long long seen = shared->progress;
    const absl::Duration wait = std::min(left, absl::Hours(24));
    // A zero limit admits no progress: a step that reported while this thread looked (the wait
    // lets go of the lock even when it does not wait) came after the limit.
    bool moved = wait > absl::ZeroDuration() &&
                 shared->changed.wait_for(lock, absl::ToChronoMilliseconds(wait),
                                          [&] { return shared->done || shared->progress != seen; });
    if (moved) {
      left = stall_limit;
      continue;
    }
    left -= wait;
    if (left > absl::ZeroDuration()) continue;
    shared->left_behind = true;
    {
      std::lock_guard<std::mutex> count(abandoned_mu);
      ++abandoned;
    }
    lock.unlock();
    worker.detach();
    return absl::DeadlineExceededError(
        absl::StrCat("no progress within ", absl::FormatDuration(stall_limit), "; the work was left behind"));
  }
  absl::Status result = shared->result;
  lock.unlock();
  worker.join();
  return result;
}

int AbandonedThreads() {
  std::lock_guard<std::mutex> count(abandoned_mu);
  return abandoned;
}

bool WaitForAbandonedThreads(absl::Duration timeout) {
  std::unique_lock<std::mutex> count(abandoned_mu);
  return abandoned_ended.wait_for(count, absl::ToChronoMilliseconds(timeout), [] { return abandoned == 0; });
}

int FinishProcess(int exit_code) {
  if (AbandonedThreads() == 0) return exit_code;
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  _exit(exit_code);
}

}  // namespace sentier
