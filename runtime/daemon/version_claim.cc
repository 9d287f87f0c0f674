#include "runtime/daemon/version_claim.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "runtime/file_util.h"

namespace sentier {
namespace {

absl::Status MkdirIfMissing(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) return absl::OkStatus();
  return absl::UnavailableError(ErrnoStatus(errno, "cannot create claims directory", dir).message());
}

}  // namespace

std::string VersionClaim::LockPath(const std::string& out_root, const std::string& model,
                                   int64_t version) {
  return absl::StrCat(out_root, "/.sentierd/claims/", model, "/", version, ".lock");
}

absl::StatusOr<std::unique_ptr<VersionClaim>> VersionClaim::TryAcquire(
    const std::string& out_root, const std::string& model, int64_t version) {
  for (const std::string& dir : {absl::StrCat(out_root, "/.sentierd"),
                                 absl::StrCat(out_root, "/.sentierd/claims"),
                                 absl::StrCat(out_root, "/.sentierd/claims/", model)}) {
    absl::Status st = MkdirIfMissing(dir);
    if (!st.ok()) return st;
  }
  const std::string path = LockPath(out_root, model, version);
  // A holder that releases unlinks the file; a lock taken on the unlinked file is worth nothing,
  // so lock, then check that the path still names the locked file. Three tries are plenty: each
  // retry needs another release in between.
  for (int attempt = 0; attempt < 3; ++attempt) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return absl::UnavailableError(ErrnoStatus(errno, "cannot create claim", path).message());
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK) return std::unique_ptr<VersionClaim>();
      return absl::UnavailableError(ErrnoStatus(err, "cannot lock claim", path).message());
    }
    struct stat held, named;
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
      return std::unique_ptr<VersionClaim>(new VersionClaim(path, fd));
    }
    ::close(fd);
  }
  return std::unique_ptr<VersionClaim>();  // released and re-taken under us: held by another
}

void VersionClaim::Release() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

}  // namespace sentier
