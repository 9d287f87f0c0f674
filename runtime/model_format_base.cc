// model_format_base.cc — what every format of the seam (model_format.h) shares unless it says
// otherwise: the original kept byte for byte, and the loaded module as what steps run on.
#include "absl/strings/str_cat.h"
#include "runtime/file_util.h"
#include "runtime/model_format.h"

namespace sentier {

absl::Status ModelFormat::KeepOriginal(const Model& as_loaded, const std::string& artifact_path) const {
  auto bytes = ReadFile(as_loaded.path);
  if (!bytes.ok()) return bytes.status();
  return WriteFileAtomically(artifact_path, *bytes);
}

absl::StatusOr<torch::jit::Module> ModelFormat::Runnable(const Model& model) const {
  if (!model.is_module) {
    return absl::FailedPreconditionError(absl::StrCat("'", model.path, "' is a bare graph: it has no module to run"));
  }
  return model.module;
}

}  // namespace sentier
