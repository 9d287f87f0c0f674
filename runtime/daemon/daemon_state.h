// daemon_state.h — what the daemon has finished, persisted as OUT/.sentierd/state.json.
//
// One record per model/version: outcome, the source signature it was computed from, the rules
// fingerprint used and the architecture fingerprint. Written atomically after every publish, so a
// restart neither redoes finished work nor forgets it; work that was in flight has no record and
// is redone.
//
//   auto state = DaemonState::Load(path);        // missing file: empty state
//   state->Set("ranker", 2, record);
//   absl::Status st = state->Save(path);
#ifndef SENTIER_RUNTIME_DAEMON_DAEMON_STATE_H_
#define SENTIER_RUNTIME_DAEMON_DAEMON_STATE_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/options_enums.h"

namespace sentier {

struct VersionRecord {
  // The report's status. A report whose status is not one of the three words is recorded as
  // rejected (it is published as it is; see DaemonManager::PublishResult).
  ReportStatus status = ReportStatus::kRejected;
  std::string reason;
  std::string signature;     // RegistryWatcher's signature of the source version
  std::string rules_fp;      // rules fingerprint the job ran with
  std::string arch_fp;       // architecture fingerprint (empty when the model did not load)
  std::string artifact_sha;  // sha256 of the published model.pt (empty when rejected)
  bool kept_earlier = false; // a rejected re-run that left an earlier artifact of it in place
};

class DaemonState {
 public:
  // Load: a missing file is an empty state; a corrupt one (not JSON, a bad version number, a
// status other than optimized | unchanged | rejected) is InvalidArgumentError naming it.
  static absl::StatusOr<DaemonState> Load(const std::string& path);
  // Save: atomically (temp file, fsync, rename, fsync dir).
  absl::Status Save(const std::string& path) const;

  std::string ToJson() const;
  static absl::StatusOr<DaemonState> FromJson(const std::string& text);

  const VersionRecord* Find(const std::string& model, int64_t version) const;
  void Set(const std::string& model, int64_t version, const VersionRecord& record);
  // PreviousArchFp: the architecture fingerprint of the greatest version below `version` that
  // has one; empty when none.
  std::string PreviousArchFp(const std::string& model, int64_t version) const;
  // PreviousDecided: the greatest version below `version` published optimized or unchanged under
  // the rules `rules_fp`; 0 when none.
  int64_t PreviousDecided(const std::string& model, int64_t version, const std::string& rules_fp) const;

  const std::map<std::string, std::map<int64_t, VersionRecord>>& models() const {
    return models_;
  }

 private:
  std::map<std::string, std::map<int64_t, VersionRecord>> models_;
};

}  // namespace sentier

#endif  // SENTIER_RUNTIME_DAEMON_DAEMON_STATE_H_
