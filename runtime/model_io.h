// model_io.h — reading and writing models, sample inputs, rule files and reports.
//
// All file I/O of Sentier lives in runtime/ (passes/ does none). Writers never leave a partial
// file: they write a temporary file in the destination's directory, fsync it, rename it over the
// destination and fsync the directory. Every error names the file.
//
//   absl::StatusOr<Model> m = LoadModel("model.pt");       // or a text-IR graph: "graph.ir"
//   OptimizeGraph(m->graph, rules, opts);
//   absl::Status st = SaveModel(*m, "model.opt.pt");
#ifndef SENTIER_RUNTIME_MODEL_IO_H_
#define SENTIER_RUNTIME_MODEL_IO_H_

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/api/module.h>

#include "absl/status/statusor.h"
#include "passes/rule_set.h"
#include "runtime/file_util.h"  // ReadFile, WriteFileAtomically, Sha256OfFile

namespace sentier {

// ModelFormatData: what a format keeps from Load to Save besides the module (an exported
// program's JSON and archive entries, say); each format knows its own subclass.
struct ModelFormatData {
  virtual ~ModelFormatData() = default;
};

// Model: a TorchScript module (whose `forward` graph is `graph`, edited in place), or a bare
// graph read from a text-IR file.
struct Model {
  std::string path;
  bool is_module = false;
  torch::jit::Module module;  // valid when is_module
  std::shared_ptr<torch::jit::Graph> graph;
  std::shared_ptr<const ModelFormatData> format_data;  // the loading format's own, or null
};

// LoadModel: `.pt` (TorchScript archive; its forward graph) or `.ir` (text IR, `# ...` comment
// lines ignored). InvalidArgumentError for missing, empty, truncated or corrupt files. Archives
// (here and in LoadSampleInputs) pass CheckArchive before LibTorch reads them: offsets and sizes
// inside the file, and entries claiming at most 4x the file's size + 1 MiB uncompressed.
absl::StatusOr<Model> LoadModel(const std::string& path);

// CheckReadableFile: OK for a readable, regular, non-empty file; an error naming it otherwise.
absl::Status CheckReadableFile(const std::string& path);

// MaxUncompressedArchiveBytes: what an archive of `file_bytes` may claim its entries hold.
// LibTorch writes archives with stored entries, whose uncompressed sizes add up to less than the
// file; more than 4x its size plus 1 MiB (deflated entries made elsewhere) is taken for a zip bomb
// and refused before LibTorch allocates what it claims.
int64_t MaxUncompressedArchiveBytes(size_t file_bytes);

// SaveModel: writes `.pt` (module archive; requires a module) or `.ir` (graph text) atomically.
// A `.pt` is loaded back before it is published, so a file that torch::jit::load rejects is never
// written.
absl::Status SaveModel(const Model& model, const std::string& path);

// LoadSampleInputs: the forward's arguments, written by Python's torch.save or C++
// torch::pickle_save as a tuple (or list) of them: tensors, lists, tuples, dicts, None; a single
// tensor is taken as a 1-tuple.
absl::StatusOr<std::vector<c10::IValue>> LoadSampleInputs(const std::string& path);

// LoadPickledValue: the value a file written by Python's torch.save or C++ pickle_save holds (a
// state_dict, say), after the archive check; errors start "cannot read <what> '<path>'".
absl::StatusOr<c10::IValue> LoadPickledValue(const std::string& path, const std::string& what);

// UnpickleArchive: the value torch.save-format `bytes` hold, after the archive check; errors
// start "cannot read <what>: " (LoadPickledValue's, for bytes that are not a file of their own,
// such as an entry of an exported program).
absl::StatusOr<c10::IValue> UnpickleArchive(const std::string& bytes, const std::string& what);

// LoadSampleInputsFor: LoadSampleInputs, then rebuilt with the static types `module`'s forward
// declares (typed lists and dicts, tuples, defaults for missing trailing arguments: see
// passes/sample_inputs.h). A single value that is not a tensor (a list, a dict) is the forward's
// one argument. InvalidArgumentError naming the file and the argument that does not fit.
absl::StatusOr<std::vector<c10::IValue>> LoadSampleInputsFor(const std::string& path,
                                                             const torch::jit::Module& module);

// LoadRules: parses and compiles rule files; each path is a `.rules` file or a directory whose
// `*.rules` files are read in name order.
absl::StatusOr<std::shared_ptr<const RuleSet>> LoadRules(const std::vector<std::string>& paths);

// DefaultRulesDir: the rule library shipped with the binary (Bazel runfiles), or `patterns/`
// under the current directory; overridden by $SENTIER_RULES_DIR.
std::string DefaultRulesDir();


// GraphToDot: a Graphviz rendering of a graph (top-level nodes; nested blocks as one node).
std::string GraphToDot(const torch::jit::Graph& graph);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_MODEL_IO_H_
