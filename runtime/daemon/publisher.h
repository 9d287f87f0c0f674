// publisher.h — crash-safe publication of job results under the output root.
//
// A job writes into a staging directory inside OUT (OUT/.tmp-<model>-<version>-<pid>-<n>).
// Publish() fsyncs every file and the staging directory, renames it to OUT/<model>/<version>
// (atomically exchanging it with an existing one, which is then removed) and fsyncs the parent
// directories. A reader therefore sees either the previous complete directory or the new complete
// one, never a partial artifact. Stale staging dirs left by a crash are removed by
// CleanStaleTemps() at start-up (the caller holds OUT/LOCK). Replicas sharing OUT (--shard=i/n)
// remove only the staging dirs of versions whose VersionClaim they hold: CleanStaleTemps(is_stale)
// with ParseStagingName() telling whose an entry is.
//
//   auto pub = Publisher::Create("/out");
//   auto stage = (*pub)->MakeStagingDir("ranker", 2);
//   ... write *stage/model.pt and *stage/report.json ...
//   absl::Status st = (*pub)->Publish(*stage, "ranker", 2, /*rejected=*/false);
#ifndef SENTIER_RUNTIME_DAEMON_PUBLISHER_H_
#define SENTIER_RUNTIME_DAEMON_PUBLISHER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace sentier {

class Publisher {
 public:
  // Create: makes OUT if missing; PermissionDenied/Internal when it cannot be written.
  static absl::StatusOr<std::unique_ptr<Publisher>> Create(const std::string& out_root);

  // CleanStaleTemps: removes OUT/.tmp-* (files and dirs); returns how many. With `is_stale`,
  // only the staging dirs (ParseStagingName) for which is_stale(model, version) is true.
  using IsStale = std::function<bool(const std::string& model, int64_t version)>;
  absl::StatusOr<int> CleanStaleTemps(const IsStale& is_stale = nullptr);
  // ParseStagingName: the model and version of a staging dir's name
  // (.tmp-<model>-<version>-<pid>-<n>); false for any other name.
  static bool ParseStagingName(const std::string& name, std::string* model, int64_t* version);

  // MakeStagingDir: a new empty directory OUT/.tmp-<model>-<version>-<pid>-<n>.
  absl::StatusOr<std::string> MakeStagingDir(const std::string& model, int64_t version);

  // Publish: moves `staging` to OUT/<model>/<version>, durably. With `rejected`, an existing
  // published directory that holds a model.pt is never replaced (FailedPreconditionError, and
  // `staging` is removed): a failed re-run does not take down a good artifact.
  absl::Status Publish(const std::string& staging, const std::string& model, int64_t version,
                       bool rejected);

  // Discard: removes a staging dir.
  void Discard(const std::string& staging);

  std::string PublishedDir(const std::string& model, int64_t version) const;
  const std::string& root() const { return root_; }

  // BeforeRename: called by Publish() after the fsyncs, just before the publishing rename
  // (null: nothing). Production code leaves it unset; crash-safety tests set it to widen the
  // window in which a kill lands mid-publication (tools/sentierd_publish_delay.cc).
  using BeforeRename = std::function<void(const std::string& model, int64_t version)>;
  void set_before_rename(BeforeRename hook) { before_rename_ = std::move(hook); }

 private:
  explicit Publisher(std::string root) : root_(std::move(root)) {}
  std::string root_;
  int64_t counter_ = 0;
  BeforeRename before_rename_;
};

}  // namespace sentier

#endif  // SENTIER_RUNTIME_DAEMON_PUBLISHER_H_
