// registry_watcher.h — the daemon's source: polls a model registry and reports settled versions.
//
// Layout: ROOT/<model>/<version>/{model.pt,inputs.pt} or {model.pt2[,inputs.pt]} (version_files.h). <model> matches
// [A-Za-z0-9][A-Za-z0-9._-]*, <version> is a positive decimal integer without leading zeros;
// anything else (writers' tmp-… staging dirs, dot files) is ignored. A version is reported only
// once its directory listing (names, sizes, mtimes) is unchanged across two consecutive polls
// ("settle"). Entries whose symlinks lead outside ROOT are ignored (directories) or refused
// (files: the version is reported with `refused_reason`), as are files above max_model_bytes.
// The watcher has no thread: the daemon (or a test) calls PollOnce().
//
//   auto w = RegistryWatcher::Create({.root = "/registry"});
//   auto snap = (*w)->PollOnce();   // first poll: nothing settled yet
//   snap = (*w)->PollOnce();        // now every unchanged version is in snap->models
#ifndef SENTIER_RUNTIME_DAEMON_REGISTRY_WATCHER_H_
#define SENTIER_RUNTIME_DAEMON_REGISTRY_WATCHER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sentier {

struct WatcherOptions {
  std::string root;
  int64_t max_model_bytes = 0;  // 0: no limit
  int shard_index = 0;          // only models with ShardOf(name, shard_count) == shard_index
  int shard_count = 1;
};

// VersionInfo: one settled version.
struct VersionInfo {
  std::string model;
  int64_t version = 0;
  std::string dir;             // ROOT/<model>/<version>
  std::string signature;       // names, sizes and mtimes of its entries
  std::string refused_reason;  // non-empty: the version must not be loaded (security, size)
  int model_files = 0;         // model.pt and model.pt2 seen (more than one: refused)
};

struct RegistrySnapshot {
  // Settled versions per model, versions ascending.
  std::map<std::string, std::vector<VersionInfo>> models;
  int unsettled = 0;  // valid versions seen whose files are still changing
};

// IsValidModelName / ParseVersionName: the registry's naming rules.
bool IsValidModelName(absl::string_view name);
bool ParseVersionName(absl::string_view name, int64_t* version);
// ShardOf: first 8 bytes of sha256(name), big-endian, modulo `count`.
int ShardOf(absl::string_view model, int count);
// ParseShard: "i/n" with 0 <= i < n.
bool ParseShard(absl::string_view spec, int* index, int* count);

class RegistryWatcher {
 public:
  // Create: InvalidArgumentError for a bad shard; NotFound/PermissionDenied when ROOT cannot be
  // read.
  static absl::StatusOr<std::unique_ptr<RegistryWatcher>> Create(const WatcherOptions& options);

  // PollOnce: scans ROOT once. Errors only when ROOT itself cannot be read.
  absl::StatusOr<RegistrySnapshot> PollOnce();

 private:
  explicit RegistryWatcher(const WatcherOptions& options, std::string canonical_root)
      : options_(options), canonical_root_(std::move(canonical_root)) {}
  // InsideRoot: `path`, an entry of a directory inside the root, resolves inside the root.
  bool InsideRoot(const std::string& path) const;
  void WarnOnce(const std::string& key, const std::string& message);
  // The steps of PollOnce (see the .cc).
  bool IsModelToScan(const std::string& model, const std::string& mdir);
  bool IsVersionToScan(const std::string& model, const std::string& vname, const std::string& vdir,
                       int64_t* version);
  void AddVersionFile(const std::string& vdir, const std::string& f, VersionInfo* info) const;
  void ScanModel(const std::string& model, const std::string& mdir,
                 std::map<std::string, std::string>* current, RegistrySnapshot* snap);

  WatcherOptions options_;
  std::string canonical_root_;
  std::map<std::string, std::string> previous_;  // "model/version" -> signature at last poll
  std::set<std::string> warned_;
};

}  // namespace sentier

#endif  // SENTIER_RUNTIME_DAEMON_REGISTRY_WATCHER_H_
