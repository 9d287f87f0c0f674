// progress_deadline.h — runs work on its own thread and gives up waiting when the work stops
// making progress; ends a process that gave up on a thread without running exit handlers under it.
//
// Why: with the graph executor's optimizations on, torch 2.11's CUDA fuser can fail to return from
// compiling a fusion group (bench/RESULTS.md, "list_input"), and a thread stuck inside LibTorch
// cannot be stopped. RunWithProgressDeadline waits for the work as long as it reports progress at
// least once per `stall_limit`; when it does not, the thread is left behind (detached; whatever it
// uses must be owned by the work closure) and the caller gets DeadlineExceeded, so that it can go on
// another way (the equivalence checker times in the interpreter instead). A process that left a
// thread behind must not run static destructors under it while it runs: its main returns
// through FinishProcess, which then flushes the standard streams and ends with _exit.
//
//   absl::Status st = RunWithProgressDeadline(
//       [state](const std::function<void()>& progress) { ...; progress(); ...; return absl::OkStatus(); },
//       absl::Seconds(60));
//   if (absl::IsDeadlineExceeded(st)) ...  // no progress for 60 s: the work was given up on
//
// No LibTorch here: the unit is tested with plain blocking work.
#ifndef SENTIER_RUNTIME_PROGRESS_DEADLINE_H_
#define SENTIER_RUNTIME_PROGRESS_DEADLINE_H_

#include <functional>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace sentier {

// The work: calls `progress` after each unit of work (a timed step), returns its status. An
// exception escaping it becomes an Internal status with its message.
using ProgressWork = std::function<absl::Status(const std::function<void()>& progress)>;

// RunWithProgressDeadline: the work's status, or DeadlineExceeded ("no progress within N s")
// when `stall_limit` passed without a call to progress (nor the work's end).
absl::Status RunWithProgressDeadline(ProgressWork work, absl::Duration stall_limit);

// How many threads RunWithProgressDeadline has left behind in this process that are still running.
int AbandonedThreads();

// Waits until every thread left behind has ended, at most `timeout`; whether they all have.
bool WaitForAbandonedThreads(absl::Duration timeout);

// FinishProcess: `exit_code` when no thread left behind is still running; otherwise flushes
// stdout, stderr and the C streams and ends the process with _exit(exit_code) (never returns).
int FinishProcess(int exit_code);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_PROGRESS_DEADLINE_H_
