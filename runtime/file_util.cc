// file_util.cc — shared file I/O (see the header).
#include "runtime/file_util.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "passes/digest.h"

namespace sentier {
namespace {

absl::Status Errno(const std::string& what, const std::string& path) { return ErrnoStatus(errno, what, path); }

}  // namespace

absl::Status ErrnoStatus(int err, const std::string& what, const std::string& path) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " '", path, "'"));
}

absl::Status WriteFileSynced(const std::string& path, const std::string& contents) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", path);
  size_t off = 0;
  while (off < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + off, contents.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status st = Errno("cannot write", path);
      ::close(fd);
      return st;
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    absl::Status st = Errno("cannot fsync", path);
    ::close(fd);
    return st;
  }
  if (::close(fd) != 0) return Errno("cannot close", path);
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  std::filesystem::path p(path);
  std::string tmp = (p.parent_path() / absl::StrCat(".tmp-", p.filename().string(), "-",
                                                    ::getpid())).string();
  absl::Status st = WriteFileSynced(tmp, contents);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    st = Errno("cannot rename into", path);
    ::unlink(tmp.c_str());
    return st;
  }
  std::string dir = p.parent_path().string();
  return FsyncPath(dir.empty() ? "." : dir);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Errno("cannot read", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Errno("cannot read", path);
  return ss.str();
}

absl::Status CheckWritableDirOf(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return Errno("cannot write into the directory", dir);
  if (!S_ISDIR(st.st_mode)) return ErrnoStatus(ENOTDIR, "cannot write into the directory", dir);
  if (::access(dir.c_str(), W_OK) != 0) return Errno("cannot write into the directory", dir);
  return absl::OkStatus();
}

absl::Status FsyncPath(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  if (::fsync(fd) != 0) {
    absl::Status st = Errno("cannot fsync", path);
    ::close(fd);
    return st;
  }
  ::close(fd);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Sha256OfFile(const std::string& path) {
  auto bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  return Sha256Hex(*bytes);
}

namespace {
int RemoveEntry(const char* path, const struct stat*, int type, struct FTW*) {
  int rc = (type == FTW_DP) ? ::rmdir(path) : ::unlink(path);
  return (rc == 0 || errno == ENOENT) ? 0 : -1;
}
}  // namespace

// With nftw rather than std::filesystem::remove_all: pip LibTorch 2.x exports its own copy of
// the latter, and an executable that bound to it crashed (see CMakeLists.txt).
absl::Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return Errno("cannot remove", path);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Errno("cannot remove", path);
    return absl::OkStatus();
  }
  if (::nftw(path.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS) != 0) {
    return Errno("cannot remove", path);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ListRuleFiles(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    struct stat st;
    if (::stat(p.c_str(), &st) != 0) return ErrnoStatus(errno, "cannot read rules", p);
    if (!S_ISDIR(st.st_mode)) {
      files.push_back(p);
      continue;
    }
    std::error_code ec;
    std::vector<std::string> found;
    for (const auto& e : std::filesystem::directory_iterator(p, ec)) {
      if (e.path().extension() == ".rules") found.push_back(e.path().string());
    }
    if (ec) return ErrnoStatus(ec.value(), "cannot list rules directory", p);
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

}  // namespace sentier
