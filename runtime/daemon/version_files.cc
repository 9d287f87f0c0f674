// version_files.cc — the names of a registry version's files (version_files.h).
#include "runtime/daemon/version_files.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace sentier {

bool IsModelFile(absl::string_view name) { return name == kTorchScriptModelFile || name == kExportedModelFile; }

std::string ModelFileIn(const std::string& dir) {
  auto exists = [&](absl::string_view f) { return ::access(absl::StrCat(dir, "/", f).c_str(), F_OK) == 0; };
  if (!exists(kTorchScriptModelFile) && exists(kExportedModelFile)) return std::string(kExportedModelFile);
  return std::string(kTorchScriptModelFile);
}

void RemoveModelFiles(const std::string& dir) {
  ::unlink(absl::StrCat(dir, "/", kTorchScriptModelFile).c_str());
  ::unlink(absl::StrCat(dir, "/", kExportedModelFile).c_str());
}

}  // namespace sentier
