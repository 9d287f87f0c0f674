// model_format.cc — the built-in model formats behind the seam of model_format.h: TorchScript
// archives (model_io.h's LoadModel and SaveModel, with the archive check before LibTorch reads
// anything) and text IR.
#include "runtime/model_format.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/archive_check.h"
#include "runtime/file_util.h"
#include "runtime/pt2/pt2_format.h"

namespace sentier {
namespace {

class TorchScript : public ModelFormat {
 public:
  absl::string_view name() const override { return "torchscript"; }
  bool Names(absl::string_view path) const override { return absl::EndsWith(path, ".pt"); }

  absl::Status CheckArchive(const std::string& path) const override {
    if (absl::Status readable = CheckReadableFile(path); !readable.ok()) return readable;
    auto data = ReadFile(path);
    if (!data.ok()) return data.status();
    absl::Status sound = sentier::CheckArchive(*data, MaxUncompressedArchiveBytes(data->size()));
    if (sound.ok()) return sound;
    return absl::InvalidArgumentError(absl::StrCat("cannot load TorchScript archive '", path, "': ", sound.message()));
  }

  // LoadModel checks the archive's bytes itself, on the bytes it then reads.
  absl::StatusOr<Model> Load(const std::string& path) const override { return LoadModel(path); }

  absl::StatusOr<std::vector<c10::IValue>> SampleInputs(const Model& model,
                                                        const std::string& inputs_path) const override {
    if (inputs_path.empty()) return absl::NotFoundError("a TorchScript archive holds no sample inputs");
    if (!std::filesystem::exists(inputs_path)) {
      return absl::InvalidArgumentError(absl::StrCat("sample inputs '", inputs_path, "' are missing"));
    }
    return model.is_module ? LoadSampleInputsFor(inputs_path, model.module) : LoadSampleInputs(inputs_path);
  }

  absl::Status CanSave(const Model& model) const override {
    if (model.is_module) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("'", model.path, "' is not a TorchScript module, so no .pt artifact can be made"));
  }

  absl::Status Save(const Model& model, const std::string& path) const override { return SaveModel(model, path); }
};

class TextIr : public ModelFormat {
 public:
  absl::string_view name() const override { return "text IR"; }
  bool Names(absl::string_view path) const override { return absl::EndsWith(path, ".ir"); }
  absl::Status CheckArchive(const std::string& path) const override { return CheckReadableFile(path); }
  absl::StatusOr<Model> Load(const std::string& path) const override { return LoadModel(path); }

  absl::StatusOr<std::vector<c10::IValue>> SampleInputs(const Model&, const std::string& inputs_path) const override {
    if (inputs_path.empty()) return absl::NotFoundError("text IR holds no sample inputs");
    if (!std::filesystem::exists(inputs_path)) {
      return absl::InvalidArgumentError(absl::StrCat("sample inputs '", inputs_path, "' are missing"));
    }
    return LoadSampleInputs(inputs_path);
  }

  absl::Status CanSave(const Model&) const override { return absl::OkStatus(); }

  absl::Status Save(const Model& model, const std::string& path) const override {
    return WriteFileAtomically(path, model.graph->toString());
  }

  // The graph as loaded (its comments and spelling are not kept).
  absl::Status KeepOriginal(const Model& as_loaded, const std::string& artifact_path) const override {
    return Save(as_loaded, artifact_path);
  }
};

}  // namespace

const ModelFormat& TorchScriptFormat() {
  static const TorchScript* format = new TorchScript();
  return *format;
}

const ModelFormat& TextIrFormat() {
  static const TextIr* format = new TextIr();
  return *format;
}

absl::StatusOr<const ModelFormat*> FormatFor(absl::string_view path) {
  if (TextIrFormat().Names(path)) return &TextIrFormat();
  if (ExportedProgramFormat().Names(path)) return &ExportedProgramFormat();
  return &TorchScriptFormat();  // any other name: read as torch.jit.load would (.pt, .pth, .zip)
}

}  // namespace sentier
