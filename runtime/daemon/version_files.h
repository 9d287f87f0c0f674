// version_files.h — the files of a registry version: ROOT/<model>/<version>/ holds one model,
// `model.pt` (a TorchScript archive, with `inputs.pt`) or `model.pt2` (an exported program, whose
// sample inputs are in the archive; an `inputs.pt` beside it, pickled `(args, kwargs)`, is read
// instead when present). The artifact is published under the same name as the model it came from.
#ifndef SENTIER_RUNTIME_DAEMON_VERSION_FILES_H_
#define SENTIER_RUNTIME_DAEMON_VERSION_FILES_H_

#include <string>

#include "absl/strings/string_view.h"

namespace sentier {

inline constexpr absl::string_view kTorchScriptModelFile = "model.pt";
inline constexpr absl::string_view kExportedModelFile = "model.pt2";
inline constexpr absl::string_view kInputsFile = "inputs.pt";

// IsModelFile: `model.pt` or `model.pt2`.
bool IsModelFile(absl::string_view name);

// ModelFileIn: the name of the model file `dir` holds: model.pt2 when it holds that one and no
// model.pt, else model.pt (which may be missing: the job says so).
std::string ModelFileIn(const std::string& dir);

// RemoveModelFiles: deletes model.pt and model.pt2 from `dir` (a rejected version's stage).
void RemoveModelFiles(const std::string& dir);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_DAEMON_VERSION_FILES_H_
