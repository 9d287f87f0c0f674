// pt2_format.cc — the exported-program format (pt2_format.h).
#include "runtime/pt2/pt2_format.h"

#include <filesystem>

#include <torch/nativert/ModelRunnerHandle.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "passes/torch_error.h"
#include "runtime/file_util.h"
#include "runtime/pt2/exported_program.h"

namespace sentier {
namespace {

absl::StatusOr<Pt2Archive> ReadArchiveFile(const std::string& path) {
  if (absl::Status readable = CheckReadableFile(path); !readable.ok()) return readable;
  auto bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  return ReadPt2Archive(*bytes, path);
}

class ExportedProgram : public ModelFormat {
 public:
  absl::string_view name() const override { return "exported program"; }
  bool Names(absl::string_view path) const override { return absl::EndsWith(path, ".pt2"); }

  absl::Status CheckArchive(const std::string& path) const override { return ReadArchiveFile(path).status(); }

  absl::StatusOr<Model> Load(const std::string& path) const override {
    auto archive = ReadArchiveFile(path);
    if (!archive.ok()) return archive.status();
    return ModuleFromProgram(std::move(*archive), path);
  }

  absl::StatusOr<std::vector<c10::IValue>> SampleInputs(const Model& model,
                                                        const std::string& inputs_path) const override {
    std::string bytes, what;
    if (inputs_path.empty()) {
      auto source = std::dynamic_pointer_cast<const ExportedProgramSource>(model.format_data);
      if (!source) return absl::FailedPreconditionError("not an exported program");
      auto it = source->archive.entries.find(std::string(kPt2SampleInputsEntry));
      if (it == source->archive.entries.end()) {
        return absl::NotFoundError(absl::StrCat("exported program '", model.path, "' holds no sample inputs"));
      }
      bytes = it->second;
      what = absl::StrCat("the sample inputs of '", model.path, "' (entry '", kPt2SampleInputsEntry, "')");
    } else {
      if (absl::Status readable = CheckReadableFile(inputs_path); !readable.ok()) return readable;
      auto file = ReadFile(inputs_path);
      if (!file.ok()) return file.status();
      bytes = *file;
      what = absl::StrCat("sample inputs '", inputs_path, "'");
    }
    auto pickled = UnpickleArchive(bytes, what);
    if (!pickled.ok()) return pickled.status();
    return FlatSampleInputs(model, *pickled, what);
  }

  absl::Status CanSave(const Model& model) const override {
    if (model.is_module && std::dynamic_pointer_cast<const ExportedProgramSource>(model.format_data)) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("'", model.path, "' was not read from an exported program, so no .pt2 artifact can be made"));
  }

  absl::Status Save(const Model& model, const std::string& path) const override;
  bool StaticShapes() const override { return true; }
  bool WritesModuleBuffers() const override { return false; }
  std::string RunAs() const override {
    return "its TorchScript translation (runtime/pt2), not ExportedProgram.module() under Python; the artifact "
           "was also loaded and run in nativert before it was written";
  }
};

// The archive's own sample inputs, or zeros of the program's input shapes where it holds none.
absl::StatusOr<std::vector<c10::IValue>> MetadataInputs(const ModelFormat& format, const Model& model) {
  auto inputs = format.SampleInputs(model, "");
  if (inputs.ok() || !absl::IsNotFound(inputs.status())) return inputs;
  return absl::FailedPreconditionError(
      absl::StrCat("'", model.path, "' holds no sample inputs: export it with example inputs (torch.export.save keeps them)"));
}

absl::Status ExportedProgram::Save(const Model& model, const std::string& path) const {
  auto inputs = MetadataInputs(*this, model);
  if (!inputs.ok()) return inputs.status();
  auto archive = ProgramFromModule(model, *inputs);
  if (!archive.ok()) return archive.status();
  auto bytes = WritePt2Archive(*archive);
  if (!bytes.ok()) return bytes.status();
  std::string staged = absl::StrCat(path, ".check.pt2");
  if (absl::Status ok = WriteFileAtomically(staged, *bytes); !ok.ok()) return ok;
  absl::Status checked = Load(staged).status();
  if (checked.ok()) {
    auto ran = RunInNativeRuntime(staged, NativeRuntimeInputs(model, *inputs));
    if (!ran.ok() && !absl::IsUnimplemented(ran.status())) checked = ran.status();
  }
  std::error_code ignored;
  std::filesystem::remove(staged, ignored);
  if (!checked.ok()) {
    return absl::InternalError(absl::StrCat("the exported program written for '", path, "' does not load back: ",
                                            checked.message()));
  }
  return WriteFileAtomically(path, *bytes);
}

}  // namespace

absl::StatusOr<std::vector<c10::IValue>> RunInNativeRuntime(const std::string& path,
                                                            const std::vector<c10::IValue>& inputs) {
  try {
    torch::nativert::ModelRunnerHandle runner(path, "model");
    return runner.runWithFlatInputsAndOutputs(inputs);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("nativert cannot run '", path, "': ", TorchErrorMessage(e.what())));
  }
}

const ModelFormat& ExportedProgramFormat() {
  static const ExportedProgram* format = new ExportedProgram();
  return *format;
}

}  // namespace sentier
