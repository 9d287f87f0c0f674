// version_claim.h — one replica's exclusive claim on one model version, for sentierd replicas
// that share one output directory (--shard=i/n; see DaemonManager).
//
// A claim is an flock (LOCK_EX | LOCK_NB) on OUT/.sentierd/claims/<model>/<version>.lock, taken
// before the version's job starts and held until its result is published (or discarded). Two
// replicas therefore never run the same version at once; the holder that gets the claim next
// re-checks OUT/<model>/<version>/report.json before it runs anything (JobPlanner::StillNeeded),
// so a version is published once. A replica killed with -9 loses its flocks to the kernel: the
// version can be claimed again, by the restarted replica or by the model's new owner after a
// resize. Release() (or the destructor) unlinks the lock file while it still holds the lock;
// TryAcquire() checks after locking that the path still names the file it locked, and retries
// when it does not, so a file unlinked between another holder's open and flock is never trusted.
//
//   auto claim = VersionClaim::TryAcquire("/out", "ranker", 2);
//   if (!claim.ok()) ...                // the claims directory cannot be written
//   else if (*claim == nullptr) ...     // another replica holds it: leave the version to it
//   else { ... run, publish ...; }      // released when *claim is destroyed
#ifndef SENTIER_RUNTIME_DAEMON_VERSION_CLAIM_H_
#define SENTIER_RUNTIME_DAEMON_VERSION_CLAIM_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace sentier {

class VersionClaim {
 public:
  // TryAcquire: the claim, held; null when another process (or another open of this process)
  // holds it. Unavailable when the claims directory or the lock file cannot be created.
  static absl::StatusOr<std::unique_ptr<VersionClaim>> TryAcquire(const std::string& out_root,
                                                                  const std::string& model,
                                                                  int64_t version);
  // LockPath: OUT/.sentierd/claims/<model>/<version>.lock.
  static std::string LockPath(const std::string& out_root, const std::string& model,
                              int64_t version);

  ~VersionClaim() { Release(); }
  VersionClaim(const VersionClaim&) = delete;
  VersionClaim& operator=(const VersionClaim&) = delete;

  // Release: unlinks the lock file and drops the lock; idempotent.
  void Release();
  const std::string& path() const { return path_; }

 private:
  VersionClaim(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
};

}  // namespace sentier

#endif  // SENTIER_RUNTIME_DAEMON_VERSION_CLAIM_H_
