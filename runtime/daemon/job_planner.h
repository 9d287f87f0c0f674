// job_planner.h — the daemon's planning policy: decides which versions to (re)process.
//
// Given the watcher's settled versions, the persisted state and the fingerprint of the loaded
// rule set, Plan() returns the jobs to run, in model then version order:
//   - a settled version with no record, or whose source signature changed since its record
//     (a version is processed once per content);
//   - the latest version of each model whose record was made with another rules fingerprint
//     (rules changed: re-process the latest version only).
// Versions in flight or already queued (`busy`, keys "model/version") are skipped. Plan() is a
// pure function: a restart with the same state plans nothing new.
//
// Replicas sharing one output (--shard=i/n) plan from their own state, which may lack what
// another replica published meanwhile (during a resize both the old and the new owner of a model
// may run). Once a replica holds a job's VersionClaim it asks StillNeeded() with the record of
// the report published at OUT/<model>/<version>: a report of the same source (and, for a rules
// re-run, the same rules) means the job was done by someone, and is not run again.
//
//   std::vector<Job> jobs = JobPlanner::Plan(snapshot, state, rules_fp, busy);
//   if (!JobPlanner::StillNeeded(jobs[0], published_record, rules_fp)) ... adopt, skip
#ifndef SENTIER_RUNTIME_DAEMON_JOB_PLANNER_H_
#define SENTIER_RUNTIME_DAEMON_JOB_PLANNER_H_

#include <set>
#include <string>
#include <vector>

#include "runtime/daemon/daemon_state.h"
#include "runtime/daemon/registry_watcher.h"

namespace sentier {

struct Job {
  VersionInfo source;
  bool reprocess = false;  // rules changed (the version had a record)
  std::string why;         // "new version", "source changed", "rules changed"
  std::string Key() const;  // "model/version"
};

class JobPlanner {
 public:
  static std::vector<Job> Plan(const RegistrySnapshot& snapshot, const DaemonState& state,
                               const std::string& rules_fp, const std::set<std::string>& busy);
  // StillNeeded: whether `job` must run although `published` (the record of the version's
  // published report; null when none) exists: false when the report is of the job's source and,
  // for a rules re-run, of `rules_fp`.
  static bool StillNeeded(const Job& job, const VersionRecord* published, const std::string& rules_fp);
};

}  // namespace sentier

#endif  // SENTIER_RUNTIME_DAEMON_JOB_PLANNER_H_
