#include "runtime/daemon/rules_tracker.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <random>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "runtime/daemon/optimize_job.h"
#include "runtime/file_util.h"

namespace sentier {

std::string RulesTracker::Signature() const {
  auto files = ListRuleFiles(paths_);
  if (!files.ok()) return absl::StrCat("error:", files.status().message());
  std::string sig;
  for (const std::string& f : *files) {
    struct stat st;
    if (::stat(f.c_str(), &st) != 0) {
      absl::StrAppend(&sig, f, ":missing;");
    } else {
      absl::StrAppend(&sig, f, ":", static_cast<int64_t>(st.st_size), ":",
                      static_cast<int64_t>(st.st_mtim.tv_sec), ".", st.st_mtim.tv_nsec, ";");
    }
  }
  return sig;
}

bool RulesTracker::MaybeReload() {
  std::string sig = Signature();
  if (sig == signature_) return !fp_.empty();
  signature_ = sig;
  auto info = LoadRulesFingerprint(paths_);
  if (!info.ok()) {
    LOG(ERROR) << "rules: " << info.status().message()
               << (fp_.empty() ? "" : absl::StrCat("; keeping the previous rule set ", fp_));
    return !fp_.empty();
  }
  if (info->fingerprint == fp_) return true;
  // Snapshot the files the fingerprint was computed from, for the jobs to load.
  auto files = ListRuleFiles(paths_);
  if (!files.ok()) {
    LOG(ERROR) << "rules: " << files.status().message();
    return !fp_.empty();
  }
  std::string dir = absl::StrCat(snapshot_root_, "/rules-", info->fingerprint);
  std::string tmp = absl::StrCat(snapshot_root_, "/.tmp-rules-", ::getpid(), "-",
                                 absl::Hex(std::random_device()()));
  RemoveTree(tmp).IgnoreError();
  std::error_code ec;
  std::filesystem::create_directories(tmp, ec);
  int i = 0;
  for (const std::string& f : *files) {
    auto text = ReadFile(f);
    if (!text.ok()) {
      LOG(ERROR) << "rules: " << text.status().message();
      return !fp_.empty();
    }
    char prefix[16];
    std::snprintf(prefix, sizeof(prefix), "%04d-", i++);
    absl::Status written = WriteFileSynced(
        absl::StrCat(tmp, "/", prefix, std::filesystem::path(f).filename().string()), *text);
    if (!written.ok()) {  // disk full, a file-size limit: not a change of the rules
      LOG(ERROR) << "rules: cannot write the snapshot: " << written.message()
                 << (fp_.empty() ? "" : absl::StrCat("; keeping the previous rule set ", fp_));
      RemoveTree(tmp).IgnoreError();
      return !fp_.empty();
    }
  }
  auto snap = LoadRulesFingerprint({tmp});
  if (!snap.ok()) {
    LOG(ERROR) << "rules: changed while being read: " << snap.status().message();
    signature_.clear();
    RemoveTree(tmp).IgnoreError();
    return !fp_.empty();
  }
  int renamed = ::rename(tmp.c_str(), dir.c_str());
  if (renamed != 0 && (errno == EEXIST || errno == ENOTEMPTY)) {
    // Already there: made by another replica (or an earlier run) from the same rules; kept if it
    // still holds them, replaced otherwise.
    auto there = LoadRulesFingerprint({dir});
    if (there.ok() && there->fingerprint == snap->fingerprint) {
      RemoveTree(tmp).IgnoreError();
      renamed = 0;
    } else {
      RemoveTree(dir).IgnoreError();
      renamed = ::rename(tmp.c_str(), dir.c_str());
    }
  }
  if (renamed != 0) {
    LOG(ERROR) << "rules: " << ErrnoStatus(errno, "cannot create snapshot", dir).message();
    RemoveTree(tmp).IgnoreError();
    return !fp_.empty();
  }
  fp_ = snap->fingerprint;
  dir_ = dir;
  LOG(INFO) << "rules: loaded " << snap->rules << " rules, fingerprint " << fp_;
  return true;
}

}  // namespace sentier
