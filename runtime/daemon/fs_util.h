// fs_util.h — small POSIX helpers for the daemon's durable writes (no torch headers).
//
//   absl::Status st = WriteFileSynced("/out/.tmp-x/report.json", text);  // write + fsync
//   st = FsyncDir("/out/.tmp-x");
#ifndef SENTIER_RUNTIME_DAEMON_FS_UTIL_H_
#define SENTIER_RUNTIME_DAEMON_FS_UTIL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sentier {

// WriteFileSynced: creates/truncates `path`, writes `contents`, fsyncs the file.
absl::Status WriteFileSynced(const std::string& path, const std::string& contents);
// WriteFileDurably: temp file beside `path`, fsync, rename over `path`, fsync the directory.
absl::Status WriteFileDurably(const std::string& path, const std::string& contents);
// ReadWholeFile: the bytes of `path`; NotFoundError when it does not exist.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);
// FsyncPath: fsync of a file or directory.
absl::Status FsyncPath(const std::string& path);
// Sha256OfFileHex: sha256 of the file's bytes, lowercase hex.
absl::StatusOr<std::string> Sha256OfFileHex(const std::string& path);
// RemoveTree: recursive removal; OK when absent.
absl::Status RemoveTree(const std::string& path);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_DAEMON_FS_UTIL_H_
