// model_io.cc — file formats and crash-safe writes (see the header).
#include "runtime/model_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/version.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/archive_check.h"
#include "runtime/file_util.h"
#include "passes/rule_parser.h"
#include "passes/sample_inputs.h"
#include "passes/torch_error.h"

namespace sentier {
namespace {

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Text IR: drop comment lines (they carry CHECK lines in tests).
std::string StripIrComments(const std::string& text) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    absl::string_view t = line;
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    if (absl::StartsWith(t, "#")) continue;
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

// ReadCheckedArchive: the file's bytes once CheckArchive accepts them (LibTorch's reader trusts
// the archive's offsets and sizes); `what` starts the error message.
absl::StatusOr<std::string> ReadCheckedArchive(const std::string& path, const char* what) {
  auto data = ReadFile(path);
  if (!data.ok()) return data.status();
  absl::Status sound = CheckArchive(*data, MaxUncompressedArchiveBytes(data->size()));
  if (!sound.ok()) return absl::InvalidArgumentError(absl::StrCat(what, " '", path, "': ", sound.message()));
  return data;
}

}  // namespace

absl::Status CheckReadableFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "cannot read", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a regular file"));
  }
  if (st.st_size == 0) return absl::InvalidArgumentError(absl::StrCat("'", path, "' is empty"));
  return absl::OkStatus();
}

int64_t MaxUncompressedArchiveBytes(size_t file_bytes) {
  return 4 * static_cast<int64_t>(file_bytes) + (int64_t{1} << 20);
}

absl::StatusOr<Model> LoadModel(const std::string& path) {
  absl::Status readable = CheckReadableFile(path);
  if (!readable.ok()) return readable;
  Model m;
  m.path = path;
  if (absl::EndsWith(path, ".ir")) {
    auto text = ReadFile(path);
    if (!text.ok()) return text.status();
    m.graph = std::make_shared<torch::jit::Graph>();
    try {
      torch::jit::parseIR(StripIrComments(*text), m.graph.get());
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot parse IR in '", path, "': ", TorchErrorMessage(e.what())));
    }
    return m;
  }
  // The bytes are checked and then loaded from memory, the same bytes.
  auto data = ReadCheckedArchive(path, "cannot load TorchScript archive");
  if (!data.ok()) return data.status();
  try {
    std::istringstream in(*data);
    m.module = torch::jit::load(in, c10::Device(c10::kCPU));
  } catch (const std::exception& e) {
    std::string why = TorchErrorMessage(e.what());
    if (absl::StartsWith(why, "Unknown builtin op")) {
      // An operator newer than this LibTorch: the archive was saved by a later PyTorch.
      absl::StrAppend(&why, " (this LibTorch is ", TORCH_VERSION,
                      "; the archive was probably saved by a newer PyTorch)");
    }
    return absl::InvalidArgumentError(
        absl::StrCat("cannot load TorchScript archive '", path, "': ", why));
  }
  auto method = m.module.find_method("forward");
  if (!method) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' has no forward method"));
  }
  m.is_module = true;
  m.graph = method->graph();
  return m;
}

absl::Status SaveModel(const Model& model, const std::string& path) {
  if (absl::EndsWith(path, ".ir")) return WriteFileAtomically(path, model.graph->toString());
  if (!model.is_module) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot write '", path, "': a .pt archive needs a TorchScript module input, not text IR"));
  }
  // Serialized in memory, loaded back from there, and only then written by WriteFileAtomically:
  // LibTorch's archive writer, writing to a file that fails (disk full, file-size limit), throws
  // from its destructor during the unwinding and terminates the process.
  std::string bytes;
  try {
    std::ostringstream out;
    model.module.save(out);
    bytes = out.str();
    std::istringstream in(bytes);
    torch::jit::Module check = torch::jit::load(in, c10::Device(c10::kCPU));
    (void)check;
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("cannot write a loadable archive to '", path, "': ", TorchErrorMessage(e.what())));
  }
  return WriteFileAtomically(path, bytes);
}

absl::StatusOr<c10::IValue> UnpickleArchive(const std::string& bytes, const std::string& what) {
  absl::Status sound = CheckArchive(bytes, MaxUncompressedArchiveBytes(bytes.size()));
  if (!sound.ok()) return absl::InvalidArgumentError(absl::StrCat("cannot read ", what, ": ", sound.message()));
  try {
    return torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", what, ": ", TorchErrorMessage(e.what())));
  }
}

absl::StatusOr<c10::IValue> LoadPickledValue(const std::string& path, const std::string& what) {
  absl::Status readable = CheckReadableFile(path);
  if (!readable.ok()) return readable;
  auto data = ReadFile(path);
  if (!data.ok()) return data.status();
  return UnpickleArchive(*data, absl::StrCat(what, " '", path, "'"));
}

namespace {
absl::StatusOr<c10::IValue> LoadPickled(const std::string& path) { return LoadPickledValue(path, "sample inputs"); }
}  // namespace

absl::StatusOr<std::vector<c10::IValue>> LoadSampleInputs(const std::string& path) {
  auto iv = LoadPickled(path);
  if (!iv.ok()) return iv.status();
  std::vector<c10::IValue> out;
  if (iv->isTuple()) {
    for (const c10::IValue& e : iv->toTupleRef().elements()) out.push_back(e);
  } else if (iv->isList()) {
    for (const c10::IValue& e : iv->toListRef()) out.push_back(e);
  } else if (iv->isTensor()) {
    out.push_back(*iv);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "sample inputs '", path, "' must be a tuple of the forward's arguments, found ", iv->tagKind()));
  }
  return out;
}

absl::StatusOr<std::vector<c10::IValue>> LoadSampleInputsFor(const std::string& path,
                                                             const torch::jit::Module& module) {
  auto iv = LoadPickled(path);
  if (!iv.ok()) return iv.status();
  auto method = module.find_method("forward");
  if (!method) return absl::InvalidArgumentError("the model has no forward method");
  const c10::FunctionSchema& schema = method->function().getSchema();
  // A tuple (or list) of the arguments; else, or when that does not fit, the value is the one
  // argument (a tensor, a dict, or the list a forward(xs: List[Tensor]) takes).
  std::vector<std::vector<c10::IValue>> readings;
  if (iv->isTuple()) {
    readings.emplace_back(iv->toTupleRef().elements().begin(), iv->toTupleRef().elements().end());
  } else if (iv->isList()) {
    std::vector<c10::IValue> elements;
    for (const c10::IValue& e : iv->toListRef()) elements.push_back(e);
    readings.push_back(std::move(elements));
  }
  readings.push_back({*iv});
  absl::Status first = absl::OkStatus();
  for (const auto& args : readings) {
    auto conformed = ConformToSchema(schema, args);
    if (conformed.ok()) return conformed;
    if (first.ok()) first = conformed.status();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("sample inputs '", path, "' do not fit forward: ", first.message()));
}

absl::StatusOr<std::shared_ptr<const RuleSet>> LoadRules(const std::vector<std::string>& paths) {
  auto files = ListRuleFiles(paths);
  if (!files.ok()) return files.status();
  std::vector<Rule> all;
  for (const std::string& f : *files) {
    auto text = ReadFile(f);
    if (!text.ok()) return text.status();
    auto parsed = ParseRules(*text, f);
    if (!parsed.ok()) return parsed.status();
    for (Rule& r : *parsed) all.push_back(std::move(r));
  }
  return RuleSet::Create(std::move(all));
}

std::string DefaultRulesDir() {
  auto is_dir = [](const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  };
  if (const char* env = std::getenv("SENTIER_RULES_DIR")) return env;
  std::vector<std::string> candidates;
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = '\0';
    candidates.push_back(absl::StrCat(exe, ".runfiles/sentier/patterns"));
  }
  for (const char* var : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* v = std::getenv(var)) candidates.push_back(absl::StrCat(v, "/sentier/patterns"));
  }
  if (n > 0) {
    // Installed next to the binary (CMake builds): <bin>/../patterns or <bin>/patterns.
    std::string dir = DirName(exe);
    candidates.push_back(absl::StrCat(dir, "/patterns"));
    candidates.push_back(absl::StrCat(dir, "/../patterns"));
  }
  candidates.push_back("patterns");
  for (const std::string& c : candidates) {
    if (is_dir(c)) return c;
  }
  return "patterns";
}

std::string GraphToDot(const torch::jit::Graph& graph) {
  std::ostringstream out;
  out << "digraph sentier {\n  node [shape=box, fontname=\"monospace\"];\n";
  std::unordered_map<const torch::jit::Node*, int> ids;
  int next = 0;
  out << "  n" << next << " [label=\"inputs\"];\n";
  ids[graph.param_node()] = next++;
  for (const torch::jit::Node* n : graph.nodes()) {
    if (n->kind() == c10::prim::Constant) continue;
    ids[n] = next;
    out << "  n" << next++ << " [label=\"" << n->kind().toQualString() << "\"];\n";
  }
  out << "  n" << next << " [label=\"outputs\"];\n";
  ids[graph.return_node()] = next;
  for (const torch::jit::Node* n : graph.nodes()) {
    if (n->kind() == c10::prim::Constant) continue;
    for (const torch::jit::Value* in : n->inputs()) {
      auto it = ids.find(in->node());
      if (it != ids.end()) out << "  n" << it->second << " -> n" << ids[n] << ";\n";
    }
  }
  for (const torch::jit::Value* o : graph.outputs()) {
    auto it = ids.find(o->node());
    if (it != ids.end()) out << "  n" << it->second << " -> n" << next << ";\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace sentier
