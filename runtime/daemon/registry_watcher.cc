#include "runtime/daemon/registry_watcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <glog/logging.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "passes/digest.h"
#include "runtime/file_util.h"
#include "runtime/daemon/version_files.h"

namespace sentier {
namespace {

struct Entry {
  std::string name;
  bool is_dir = false;
};

// ListDir: entries of `dir` (no . and ..); errno-style error.
absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return ErrnoStatus(errno, "cannot read", dir);
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::string RealPath(const std::string& p) {
  char buf[PATH_MAX];
  if (::realpath(p.c_str(), buf) == nullptr) return "";
  return buf;
}

}  // namespace

bool IsValidModelName(absl::string_view name) {
  if (name.empty() || name.size() > 255) return false;
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (!alnum(name[0])) return false;
  for (char c : name) {
    if (!alnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

bool ParseVersionName(absl::string_view name, int64_t* version) {
  if (name.empty() || name.size() > 18 || name[0] < '1' || name[0] > '9') return false;
  for (char c : name) {
    if (c < '0' || c > '9') return false;
  }
  return absl::SimpleAtoi(name, version) && *version > 0;
}

int ShardOf(absl::string_view model, int count) {
  if (count <= 1) return 0;
  std::string hex = Sha256Hex(model);
  uint64_t v = std::strtoull(hex.substr(0, 16).c_str(), nullptr, 16);
  return static_cast<int>(v % static_cast<uint64_t>(count));
}

bool ParseShard(absl::string_view spec, int* index, int* count) {
  std::vector<std::string> parts = absl::StrSplit(spec, '/');
  if (parts.size() != 2) return false;
  if (!absl::SimpleAtoi(parts[0], index) || !absl::SimpleAtoi(parts[1], count)) return false;
  return *count >= 1 && *index >= 0 && *index < *count;
}

absl::StatusOr<std::unique_ptr<RegistryWatcher>> RegistryWatcher::Create(
    const WatcherOptions& options) {
  if (options.shard_count < 1 || options.shard_index < 0 ||
      options.shard_index >= options.shard_count) {
    return absl::InvalidArgumentError(absl::StrCat("bad shard ", options.shard_index, "/",
                                                   options.shard_count));
  }
  auto names = ListDir(options.root);
  if (!names.ok()) {
    return absl::Status(names.status().code(),
                        absl::StrCat("registry unreadable: ", names.status().message()));
  }
  std::string canon = RealPath(options.root);
  if (canon.empty()) return absl::NotFoundError(absl::StrCat("cannot resolve '", options.root, "'"));
  return std::unique_ptr<RegistryWatcher>(new RegistryWatcher(options, canon));
}

// Called for entries of directories already known to lie inside the root: an entry that is not
// a symlink lies inside too, and only a symlink needs the (costly) resolution of its real path.
bool RegistryWatcher::InsideRoot(const std::string& path) const {
  struct stat lst;
  if (::lstat(path.c_str(), &lst) == 0 && !S_ISLNK(lst.st_mode)) return true;
  std::string real = RealPath(path);
  if (real.empty()) return false;
  return real == canonical_root_ || real.rfind(canonical_root_ + "/", 0) == 0;
}

void RegistryWatcher::WarnOnce(const std::string& key, const std::string& message) {
  if (warned_.insert(key).second) LOG(WARNING) << message;
}

// Whether `model`, an entry of the root at `mdir`, is a model directory of this shard.
bool RegistryWatcher::IsModelToScan(const std::string& model, const std::string& mdir) {
  if (!IsValidModelName(model)) {
    // Staging dirs (tmp-…, .tmp) are normal; say so only for names that look meant as models.
    if (model[0] != '.' && model.rfind("tmp-", 0) != 0) {
      WarnOnce(mdir, absl::StrCat("registry: ignoring '", mdir,
                                  "': model names must match [A-Za-z0-9][A-Za-z0-9._-]*"));
    }
    return false;
  }
  struct stat st;
  if (::stat(mdir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  if (!InsideRoot(mdir)) {
    WarnOnce(mdir, absl::StrCat("[", model, "] registry: ignoring '", mdir,
                                "': a symlink leading outside the registry"));
    return false;
  }
  return ShardOf(model, options_.shard_count) == options_.shard_index;
}

// Whether `vname`, an entry of `model`'s directory at `vdir`, is a version directory; sets
// `*version`.
bool RegistryWatcher::IsVersionToScan(const std::string& model, const std::string& vname,
                                      const std::string& vdir, int64_t* version) {
  if (!ParseVersionName(vname, version)) {
    if (vname[0] != '.' && vname.rfind("tmp-", 0) != 0) {
      WarnOnce(vdir, absl::StrCat("[", model, "] registry: ignoring '", vdir,
                                  "': version directories must be named by a positive "
                                  "number without leading zeros"));
    }
    return false;
  }
  struct stat st;
  if (::stat(vdir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  if (!InsideRoot(vdir)) {
    WarnOnce(vdir, absl::StrCat("[", model, "/", *version, "] registry: ignoring '", vdir,
                                "': a symlink leading outside the registry"));
    return false;
  }
  return true;
}

// Adds the entry `f` of the version directory to the version's signature and, for model.pt,
// model.pt2 and inputs.pt, refuses the version when the file cannot or must not be loaded.
void RegistryWatcher::AddVersionFile(const std::string& vdir, const std::string& f, VersionInfo* info) const {
  std::string fp = absl::StrCat(vdir, "/", f);
  struct stat fst;
  if (::stat(fp.c_str(), &fst) != 0) {
    absl::StrAppend(&info->signature, f, ":dangling;");
    if (info->refused_reason.empty() && (IsModelFile(f) || f == kInputsFile)) {
      info->refused_reason = absl::StrCat(f, " is a dangling symlink");
    }
    return;
  }
  int64_t mtime_ns = static_cast<int64_t>(fst.st_mtim.tv_sec) * 1000000000 + fst.st_mtim.tv_nsec;
  // An unreadable file marks the signature, so that making it readable (chmod changes no
  // mtime) changes the signature and the version is taken up again.
  bool readable = ::faccessat(AT_FDCWD, fp.c_str(), R_OK, AT_EACCESS) == 0;
  int access_errno = readable ? 0 : errno;
  absl::StrAppend(&info->signature, f, ":", static_cast<int64_t>(fst.st_size), ":",
                  mtime_ns, readable ? "" : ":unreadable", ";");
  if (!IsModelFile(f) && f != kInputsFile) return;
  if (IsModelFile(f) && ++info->model_files > 1) {
    info->refused_reason = absl::StrCat("the version holds both ", kTorchScriptModelFile, " and ", kExportedModelFile,
                                        ": one model per version");
  }
  if (!info->refused_reason.empty()) return;
  if (!readable && S_ISREG(fst.st_mode)) {
    info->refused_reason = absl::StrCat(f, " is not readable (", std::strerror(access_errno), ")");
  } else if (!InsideRoot(fp)) {
    info->refused_reason = absl::StrCat(f, " is a symlink leading outside the registry");
  } else if (!S_ISREG(fst.st_mode)) {
    info->refused_reason = absl::StrCat(f, " is not a regular file");
  } else if (options_.max_model_bytes > 0 && fst.st_size > options_.max_model_bytes) {
    info->refused_reason = absl::StrCat(f, " has ", static_cast<int64_t>(fst.st_size),
                                        " bytes, above --max_model_bytes=", options_.max_model_bytes);
  }
}

// Lists the versions of `model`: a version whose signature is the one of the last poll has
// settled and goes to `snap`, the others count as unsettled. Each signature goes to `current`.
void RegistryWatcher::ScanModel(const std::string& model, const std::string& mdir,
                                std::map<std::string, std::string>* current, RegistrySnapshot* snap) {
  auto versions = ListDir(mdir);
  if (!versions.ok()) {
    WarnOnce(mdir, absl::StrCat("[", model, "] registry: ", versions.status().message()));
    return;
  }
  std::vector<VersionInfo> settled;
  for (const std::string& vname : *versions) {
    int64_t v = 0;
    std::string vdir = absl::StrCat(mdir, "/", vname);
    if (!IsVersionToScan(model, vname, vdir, &v)) continue;
    auto files = ListDir(vdir);
    if (!files.ok()) continue;
    VersionInfo info;
    info.model = model;
    info.version = v;
    info.dir = vdir;
    for (const std::string& f : *files) AddVersionFile(vdir, f, &info);
    std::string key = absl::StrCat(model, "/", v);
    (*current)[key] = info.signature;
    auto prev = previous_.find(key);
    if (!info.signature.empty() && prev != previous_.end() && prev->second == info.signature) {
      settled.push_back(std::move(info));
    } else {
      ++snap->unsettled;
    }
  }
  std::sort(settled.begin(), settled.end(),
            [](const VersionInfo& a, const VersionInfo& b) { return a.version < b.version; });
  if (!settled.empty()) snap->models[model] = std::move(settled);
}

absl::StatusOr<RegistrySnapshot> RegistryWatcher::PollOnce() {
  auto models = ListDir(options_.root);
  if (!models.ok()) {
    return absl::Status(models.status().code(),
                        absl::StrCat("registry unreadable: ", models.status().message()));
  }
  RegistrySnapshot snap;
  std::map<std::string, std::string> current;
  for (const std::string& model : *models) {
    std::string mdir = absl::StrCat(options_.root, "/", model);
    if (IsModelToScan(model, mdir)) ScanModel(model, mdir, &current, &snap);
  }
  previous_ = std::move(current);
  return snap;
}

}  // namespace sentier
