// file_util.h — the file I/O every part of Sentier shares (POSIX, no torch headers): whole-file
// reads, crash-safe writes, fsync, sha256 of a file, recursive removal.
//
//   absl::Status st = WriteFileAtomically("/out/report.json", text);  // complete or absent
//   absl::StatusOr<std::string> bytes = ReadFile("/reg/ranker/3/model.pt");
//
// Errors name the file and carry the absl code of the errno (absl::ErrnoToStatus): NotFound for
// a missing file, PermissionDenied, ResourceExhausted for a full disk, and so on. ErrnoStatus is
// the project's one errno mapping; every POSIX call site builds its error with it.
#ifndef SENTIER_RUNTIME_FILE_UTIL_H_
#define SENTIER_RUNTIME_FILE_UTIL_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sentier {

// ErrnoStatus: `<what> '<path>': <strerror(err)>` with the absl code of `err`.
absl::Status ErrnoStatus(int err, const std::string& what, const std::string& path);

// ReadFile: the bytes of `path`.
absl::StatusOr<std::string> ReadFile(const std::string& path);
// WriteFileSynced: creates/truncates `path`, writes `contents`, fsyncs the file.
absl::Status WriteFileSynced(const std::string& path, const std::string& contents);
// WriteFileAtomically: a temporary file beside `path`, fsynced, renamed over `path`, and the
// directory fsynced: after a crash or a failed write the file is complete or absent (the
// temporary file is removed on failure).
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents);
// CheckWritableDirOf: the directory that will hold `path` (its parent; "." for a bare name)
// exists, is a directory and is writable — so a tool can refuse an output it could not write
// before spending minutes on the work.
absl::Status CheckWritableDirOf(const std::string& path);
// FsyncPath: fsync of a file or directory.
absl::Status FsyncPath(const std::string& path);
// Sha256OfFile: sha256 of the file's bytes, lowercase hex.
absl::StatusOr<std::string> Sha256OfFile(const std::string& path);
// RemoveTree: recursive removal (symbolic links are removed, not followed); OK when absent.
absl::Status RemoveTree(const std::string& path);
// ListRuleFiles: the rule files `paths` name, in load order: a directory gives its `*.rules`
// files (not subdirectories) sorted by name, a file itself; paths in the order given.
absl::StatusOr<std::vector<std::string>> ListRuleFiles(const std::vector<std::string>& paths);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_FILE_UTIL_H_
