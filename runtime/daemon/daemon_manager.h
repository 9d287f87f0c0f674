// daemon_manager.h — sentierd's manager: owns the output (lock, publisher, state), polls the
// registry, plans jobs, runs them in child processes with a time limit, publishes their results
// and retries versions whose output could not be written.
//
// TF Serving's split: RegistryWatcher (source) -> JobPlanner (policy) + DaemonManager (this:
// queue, workers, backoff, time-outs, reconcile, metrics) -> Publisher (loader). Each step is a
// method that tests call directly, without sleeps: PollAndPlan(), DispatchReady(),
// ReapFinished(block), KillOverdue(). Run() is the event loop over them. Jobs are started
// through a JobLauncher (the default, ExecJobLauncher, re-executes this binary, or
// --job_command, with `--job`), which tests replace.
// No flags are read here: sentierd builds ManagerOptions from its flags.
//
// Replicas (ManagerOptions::replica, sentierd --shard=i/n): N daemons over one registry and one
// shared OUT (a shared volume), each planning the models whose name hashes to its shard.
//   - Lock: OUT/LOCK shared plus OUT/.sentierd/replica-<i>-of-<n>.lock exclusive: replicas share
//     OUT, two daemons of one shard (or a daemon without --shard and a replica) exclude each
//     other (FailedPrecondition, exit 3).
//   - State: OUT/.sentierd/state-<i>-of-<n>.json; at start-up Reconcile adopts the reports
//     published for the shard's models, whoever published them, so "done" is what is published.
//   - Exactly once: before a job starts the replica takes the version's VersionClaim (an flock,
//     held until the result is published), removes a dead holder's staging dir, and re-checks
//     the published report (JobPlanner::StillNeeded); a version claimed by another replica is
//     left to it and planned again at the next poll. Publication stays atomic (Publisher), and
//     a replica killed with -9 loses its claims to the kernel.
//   - Resize (n changes): replicas restarted with the new count; a model whose owner changed is
//     planned by its new owner, which adopts the published versions and runs only the rest,
//     even while an old replica still finishes a job of it (the claim makes them take turns).
//   - Start-up clean-up: only the staging dirs whose claim is free, and in OUT/.sentierd only
//     temporaries older than 10 minutes.
//
//   ManagerOptions o;  o.registry = "REG";  o.output = "OUT";  o.once = true;
//   DaemonManager m(o);
//   absl::Status st = m.Start();      // see Start() for the status codes
//   if (st.ok()) st = m.Run(signal_fd);
#ifndef SENTIER_RUNTIME_DAEMON_DAEMON_MANAGER_H_
#define SENTIER_RUNTIME_DAEMON_DAEMON_MANAGER_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "runtime/daemon/daemon_metrics.h"
#include "runtime/daemon/daemon_state.h"
#include "runtime/daemon/job_planner.h"
#include "runtime/daemon/optimize_job.h"
#include "runtime/daemon/publisher.h"
#include "runtime/daemon/registry_watcher.h"
#include "runtime/daemon/rules_tracker.h"
#include "runtime/daemon/version_claim.h"
#include "runtime/verdict.h"

namespace sentier {

// JobLauncher: starts one job for `spec` in a child process and returns its pid (-1 with errno
// set when it could not start). The child writes spec.stage_dir/job.json (RunOptimizeJob) and
// exits 0, or exits kJobExitOutputFailed when it could not write its output.
class JobLauncher {
 public:
  virtual ~JobLauncher() = default;
  virtual pid_t Launch(const JobSpec& spec) = 0;
};

// ExecJobLauncher: fork + exec of `program` with sentierd's hidden --job flags (the child gets
// its own process group, dies with the daemon, and default signal handling). `program` is
// sentierd's --job_command: empty means this binary (/proc/self/exe). Another program receives
// the same arguments (argv[0] "sentierd", then --job --job_model=... ...) and must behave as
// `sentierd --job` does: a wrapper that sets limits or injects faults, then execs sentierd
// (testing/sentierd_fault_job.sh is the end-to-end tests' one).
class ExecJobLauncher : public JobLauncher {
 public:
  explicit ExecJobLauncher(std::string program = "") : program_(std::move(program)) {}
  pid_t Launch(const JobSpec& spec) override;

 private:
  std::string program_;
};

// ManagerOptions: the daemon's own settings, and the pipeline options every job is told (JobSpec;
// the device resolved: cpu or cuda).
struct ManagerOptions : PipelineOptions {
  std::string registry;                 // REG
  std::string output;                   // OUT (owned: locked while the manager runs)
  std::vector<std::string> rule_paths;  // rule files or directories
  bool once = false;                    // one pass over everything settled, then Run returns
  int workers = 1;
  int poll_interval_ms = 2000;
  int job_timeout_s = 600;
  int shutdown_grace_s = 30;
  int64_t max_model_bytes = 4LL << 30;  // 0: no limit
  int shard_index = 0, shard_count = 1;
  // One of several replicas sharing OUT (sentierd's --shard given; see "Replicas" above).
  bool replica = false;
  // Starts the jobs; null = an ExecJobLauncher(job_command) owned by the manager.
  JobLauncher* launcher = nullptr;
  std::string job_command;  // see ExecJobLauncher; empty: this binary
  // Passed to Publisher::set_before_rename (null in production; crash-safety tests only).
  Publisher::BeforeRename before_publish_rename;
};

class DaemonManager {
 public:
  explicit DaemonManager(ManagerOptions options);
  ~DaemonManager();

  // Start: creates and locks OUT, removes stale temporaries, loads the state (a corrupt state
  // is rebuilt from the published reports), adopts published reports the state lacks, loads the
  // rules. Errors: FailedPrecondition (OUT is locked by another sentierd), InvalidArgument (no
  // usable rule set), Unavailable (registry unreadable or output unwritable), Internal.
  absl::Status Start();

  // Run: the event loop until --once is done, or a SIGTERM/SIGINT byte arrives on `signal_fd`
  // (a self-pipe; SIGCHLD bytes only wake it) and the running jobs have finished (or the grace
  // period is over: their versions are redone at the next start). Unavailable when the registry
  // cannot be read during a --once pass.
  absl::Status Run(int signal_fd);

  // ---- the steps of Run, callable directly ----
  // PollAndPlan: reloads changed rules, polls the registry, queues the jobs the planner gives
  // (--once: only once every version has settled, or after 30 polls). Returns the number queued.
  absl::StatusOr<int> PollAndPlan();
  // DispatchReady: starts queued jobs while fewer than `workers` run. Returns the number started.
  int DispatchReady();
  // ReapFinished: collects finished job processes (waiting for at least one when `block` and
  // one runs) and publishes their results. Returns the number collected.
  int ReapFinished(bool block);
  // KillOverdue: kills jobs running longer than job_timeout_s (they are rejected when reaped).
  void KillOverdue();

  // Summary: one line per model seen by this run: "sentierd: <model>: v1 optimized, ...".
  std::string Summary() const;
  DaemonMetrics& metrics() { return metrics_; }
  const DaemonState& state() const { return state_; }
  const std::deque<Job>& queue() const { return queue_; }
  size_t queued() const { return queue_.size(); }
  size_t running() const { return running_.size(); }
  bool once_planned() const { return once_planned_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Running {
    Job job;
    pid_t pid = -1;
    std::string stage;
    std::string rules_fp;
    Clock::time_point start;
    bool timed_out = false;
    std::unique_ptr<VersionClaim> claim;  // replicas: the version's claim, held until published
  };
  struct Backoff {
    Clock::time_point next;
    double delay_s = 0;
  };

  absl::Status LockOutput();
  absl::Status CleanStaleTemps(const std::string& meta);
  std::optional<VersionRecord> PublishedRecord(const std::string& model, int64_t version) const;
  void Reconcile();
  bool ClaimForReplica(const Job& job, std::unique_ptr<VersionClaim>* claim);
  void Dispatch(Job job);
  JobSpec MakeJobSpec(const VersionInfo& v, const std::string& stage) const;
  void Finish(Running r, int wait_status);
  void PublishResult(const Job& job, const std::string& stage, nlohmann::json report,
                     double seconds);
  // The steps of PublishResult: the report's header, the metrics of a recorded result.
  void CompleteReport(const Job& job, double seconds, nlohmann::json* report) const;
  void CountPublished(ReportStatus status, const nlohmann::json& report, double seconds,
                      bool timing_fallback);
  double RetryLater(const std::string& key);
  void UpdateGauges();

  ManagerOptions options_;
  std::unique_ptr<JobLauncher> own_launcher_;
  JobLauncher* launcher_ = nullptr;
  int lock_fd_ = -1;
  int replica_lock_fd_ = -1;
  std::set<std::string> left_to_others_;  // versions logged as claimed by another replica
  std::unique_ptr<RegistryWatcher> watcher_;
  std::unique_ptr<Publisher> publisher_;
  std::unique_ptr<RulesTracker> rules_;
  DaemonState state_;
  std::string state_path_;
  std::deque<Job> queue_;
  std::map<pid_t, Running> running_;
  std::set<std::string> busy_;
  DaemonMetrics metrics_;
  std::set<std::string> models_seen_;
  // Versions whose output could not be written wait before they are tried again: 1 s, doubling
  // up to 60 s, per version; forgotten once the version is recorded.
  std::map<std::string, Backoff> backoff_;
  int polls_ = 0;
  bool once_planned_ = false;
};

}  // namespace sentier

#endif  // SENTIER_RUNTIME_DAEMON_DAEMON_MANAGER_H_
