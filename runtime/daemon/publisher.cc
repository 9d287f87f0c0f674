#include "runtime/daemon/publisher.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/file_util.h"
#include "runtime/daemon/version_files.h"

namespace sentier {
namespace {

absl::Status MkdirIfMissing(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) return absl::OkStatus();
  return ErrnoStatus(errno, "cannot create directory", dir);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Publisher>> Publisher::Create(const std::string& out_root) {
  std::error_code ec;
  std::filesystem::create_directories(out_root, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("output unwritable: cannot create '", out_root, "': ", ec.message()));
  }
  if (::access(out_root.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("output unwritable: '", out_root, "': ", std::strerror(errno)));
  }
  return std::unique_ptr<Publisher>(new Publisher(out_root));
}

bool Publisher::ParseStagingName(const std::string& name, std::string* model, int64_t* version) {
  if (name.rfind(".tmp-", 0) != 0) return false;
  // From the right: three numbers (version, pid, n), then the model, which may hold '-'.
  std::string rest = name.substr(5);
  int64_t numbers[3];
  for (int i = 2; i >= 0; --i) {
    size_t dash = rest.rfind('-');
    if (dash == std::string::npos) return false;
    std::string digits = rest.substr(dash + 1);
    if (digits.empty() || digits.size() > 18 ||
        digits.find_first_not_of("0123456789") != std::string::npos) {
      return false;
    }
    numbers[i] = std::stoll(digits);
    rest.resize(dash);
  }
  if (rest.empty() || numbers[0] <= 0) return false;
  *model = rest;
  *version = numbers[0];
  return true;
}

absl::StatusOr<int> Publisher::CleanStaleTemps(const IsStale& is_stale) {
  DIR* d = ::opendir(root_.c_str());
  if (d == nullptr) return ErrnoStatus(errno, "cannot read", root_);
  std::vector<std::string> stale;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind(".tmp-", 0) != 0) continue;
    std::string model;
    int64_t version = 0;
    if (is_stale && !(ParseStagingName(n, &model, &version) && is_stale(model, version))) continue;
    stale.push_back(n);
  }
  ::closedir(d);
  for (const std::string& n : stale) {
    absl::Status st = RemoveTree(absl::StrCat(root_, "/", n));
    if (!st.ok()) return st;
  }
  if (!stale.empty()) {
    absl::Status st = FsyncPath(root_);
    if (!st.ok()) return st;
  }
  return static_cast<int>(stale.size());
}

absl::StatusOr<std::string> Publisher::MakeStagingDir(const std::string& model,
                                                      int64_t version) {
  std::string dir =
      absl::StrCat(root_, "/.tmp-", model, "-", version, "-", ::getpid(), "-", ++counter_);
  RemoveTree(dir).IgnoreError();
  if (::mkdir(dir.c_str(), 0755) != 0) return ErrnoStatus(errno, "cannot create staging directory", dir);
  return dir;
}

std::string Publisher::PublishedDir(const std::string& model, int64_t version) const {
  return absl::StrCat(root_, "/", model, "/", version);
}

namespace {
bool ModelFileExists(const std::string& dir) {
  for (absl::string_view f : {kTorchScriptModelFile, kExportedModelFile}) {
    if (::access(absl::StrCat(dir, "/", f).c_str(), F_OK) == 0) return true;
  }
  return false;
}
}  // namespace

void Publisher::Discard(const std::string& staging) { RemoveTree(staging).IgnoreError(); }

absl::Status Publisher::Publish(const std::string& staging, const std::string& model,
                                int64_t version, bool rejected) {
  std::string model_dir = absl::StrCat(root_, "/", model);
  std::string dest = PublishedDir(model, version);
  struct stat st;
  bool exists = ::lstat(dest.c_str(), &st) == 0;
  if (rejected && exists && ModelFileExists(dest)) {
    Discard(staging);
    return absl::FailedPreconditionError(
        absl::StrCat("kept the earlier artifact '", dest, "': the re-run was rejected"));
  }
  // Durability of the contents before the name.
  DIR* d = ::opendir(staging.c_str());
  if (d == nullptr) return ErrnoStatus(errno, "cannot read staging directory", staging);
  std::vector<std::string> files;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") files.push_back(absl::StrCat(staging, "/", n));
  }
  ::closedir(d);
  for (const std::string& f : files) {
    absl::Status s = FsyncPath(f);
    if (!s.ok()) return s;
  }
  absl::Status s = FsyncPath(staging);
  if (!s.ok()) return s;
  s = MkdirIfMissing(model_dir);
  if (!s.ok()) return s;
  s = FsyncPath(root_);
  if (!s.ok()) return s;
  if (before_rename_) before_rename_(model, version);
  if (exists) {
    // Atomic swap: readers see the old or the new directory, never neither.
    if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, dest.c_str(), RENAME_EXCHANGE) != 0) {
      return ErrnoStatus(errno, "cannot exchange into", dest);
    }
    s = FsyncPath(model_dir);
    if (!s.ok()) return s;
    // `staging` now names the old directory.
    s = RemoveTree(staging);
    if (!s.ok()) return s;
    return FsyncPath(root_);
  }
  if (::rename(staging.c_str(), dest.c_str()) != 0) return ErrnoStatus(errno, "cannot rename into", dest);
  s = FsyncPath(model_dir);
  if (!s.ok()) return s;
  return FsyncPath(root_);
}

}  // namespace sentier
