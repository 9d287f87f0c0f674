// rules_tracker.h — the daemon's rule set: re-read when the files change, the last good set kept.
//
// MaybeReload() compares the rule files' names, sizes and modification times with the last
// look; when they changed it loads and compiles them (LoadRulesFingerprint). A set that fails to
// load is logged ("rules: <file>:<line>:<col>: ...; keeping the previous rule set <fp>") and the
// previous one stays. A good set is copied into `<snapshot_root>/rules-<fingerprint>/` (files
// prefixed with their load position), re-checked there, and jobs load that snapshot, so an edit
// made while a job runs never reaches it half-written. A snapshot of the same fingerprint that
// is already there (made by another replica sharing OUT, whose jobs may be loading it) is used as
// it is, never replaced; the temporary a snapshot is built in has a name of its own
// (.tmp-rules-<pid>-<random>), as replicas in containers may share a pid.
//
//   RulesTracker rules({"patterns"}, "OUT/.sentierd");
//   if (!rules.MaybeReload()) { /* no usable rule set yet */ }
//   job.rules_dir = rules.dir();
#ifndef SENTIER_RUNTIME_DAEMON_RULES_TRACKER_H_
#define SENTIER_RUNTIME_DAEMON_RULES_TRACKER_H_

#include <string>
#include <vector>

namespace sentier {

class RulesTracker {
 public:
  RulesTracker(std::vector<std::string> paths, std::string snapshot_root)
      : paths_(std::move(paths)), snapshot_root_(std::move(snapshot_root)) {}

  // MaybeReload: true when a rule set is usable (the new one, or the previous good one).
  bool MaybeReload();

  const std::string& fingerprint() const { return fp_; }  // empty before the first good load
  const std::string& dir() const { return dir_; }          // the snapshot jobs load

 private:
  std::string Signature() const;

  std::vector<std::string> paths_;
  std::string snapshot_root_;
  std::string signature_ = "\x01";
  std::string fp_, dir_;
};

}  // namespace sentier

#endif  // SENTIER_RUNTIME_DAEMON_RULES_TRACKER_H_
