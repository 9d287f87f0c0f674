// model_format.h — the model-format seam: everything the pipeline does with an archive goes through
// one ModelFormat, so that the stages (runtime/pipeline/pipeline.h) never know which format a model came in.
//
//   const ModelFormat* format = *FormatFor("ranker/3/model.pt");       // TorchScript
//   absl::StatusOr<Model> model = format->Load("ranker/3/model.pt");   // checked, then read
//   auto inputs = format->SampleInputs(*model, "ranker/3/inputs.pt");  // "": the archive's own
//   auto module = format->Runnable(*model);                          // what steps run on
//   absl::Status saved = format->Save(*model, "stage/model.pt");     // atomic, read back first
//
// What a format provides:
//   CheckArchive  a hostile file (not an archive, entries out of bounds or too large, truncated)
//                 is refused before anything reads it, with a message naming the file and entry;
//   Load          the archive as the engine's Model: the forward graph the rules rewrite and, for
//                 archives with parameters, the module that holds them;
//   SampleInputs  the forward's arguments, from a file beside the archive or from the archive;
//   Runnable      the module whose steps (a forward; forward + backward) the checker compares and
//                 the gate and the validation time. The engine's one executable form is a
//                 TorchScript module: the checker's float64 reference, its gradients, device moves
//                 and timings all run on it. A format whose archives hold another program builds
//                 that module at Load and writes its own form back at Save;
//   Save          the rewritten Model in the format, written atomically, never a file the format's
//                 own reader would refuse;
//   KeepOriginal  the artifact of an "unchanged" decision: the original, byte for byte.
// TorchScript archives (.pt), exported programs (.pt2, runtime/pt2/) and text IR (.ir, a bare
// graph: no module, so no samples, gate or validation) are the built-in formats. Tests add their own (runtime/pipeline/format_test.cc).
#ifndef SENTIER_RUNTIME_MODEL_FORMAT_H_
#define SENTIER_RUNTIME_MODEL_FORMAT_H_

#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/api/module.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/model_io.h"

namespace sentier {

class ModelFormat {
 public:
  virtual ~ModelFormat() = default;

  // The format's name in messages and reports ("torchscript", "text IR").
  virtual absl::string_view name() const = 0;
  // Whether `path` names an archive of this format (by its name).
  virtual bool Names(absl::string_view path) const = 0;

  // CheckArchive: OK when `path` is sound enough to be read; InvalidArgument naming the file and
  // what is wrong otherwise. Load calls it first.
  virtual absl::Status CheckArchive(const std::string& path) const = 0;
  virtual absl::StatusOr<Model> Load(const std::string& path) const = 0;
  // SampleInputs: forward's arguments from `inputs_path` (rebuilt with the forward's declared
  // types), or, with an empty path, those the archive holds (NotFound where it holds none).
  virtual absl::StatusOr<std::vector<c10::IValue>> SampleInputs(const Model& model,
                                                                const std::string& inputs_path) const = 0;
  // CanSave: whether `model` can be written in this format (InvalidArgument saying why not), so
  // that a pipeline refuses before it works rather than at the end.
  virtual absl::Status CanSave(const Model& model) const = 0;
  virtual absl::Status Save(const Model& model, const std::string& path) const = 0;
  // KeepOriginal: `artifact_path` becomes the original `as_loaded` came from, byte for byte.
  virtual absl::Status KeepOriginal(const Model& as_loaded, const std::string& artifact_path) const;
  // RunAs: how the checker, the gate and the timings run this format's models, in words for
  // reports (an exported program is run as its TorchScript translation, not under Python).
  virtual std::string RunAs() const { return "the TorchScript module, as torch.jit.load runs it"; }
  // StaticShapes: whether the format's programs are specialized to their sample inputs' shapes
  // (an exported program): checks then compare at those shapes only, never at twice the batch.
  virtual bool StaticShapes() const { return false; }
  // Whether its artifacts can hold in-place writes of a module's buffers (batched_batch_norms
  // copies joined running statistics back into each member's): a TorchScript archive can; the
  // exported-program writer takes ATen operators on values only.
  virtual bool WritesModuleBuffers() const { return true; }
  // Runnable: the module whose steps are compared and timed (FailedPrecondition for a model
  // without one).
  virtual absl::StatusOr<torch::jit::Module> Runnable(const Model& model) const;
};

// The built-in formats.
const ModelFormat& TorchScriptFormat();  // .pt: torch.jit.save archives
const ModelFormat& TextIrFormat();       // .ir: a graph as text
// ExportedProgramFormat() (.pt2: torch.export.save archives) is in runtime/pt2/pt2_format.h.

// FormatFor: the built-in format that names `path`: text IR for ".ir", an exported program for
// ".pt2", else TorchScript (read as torch.jit.load would, whatever the name: .pt, .pth, .zip).
absl::StatusOr<const ModelFormat*> FormatFor(absl::string_view path);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_MODEL_FORMAT_H_
