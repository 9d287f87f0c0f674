// stacked_parameters_layout.cc — the checkpoint interchange of stored stacked parameters: the
// layout record (ParamLayout, as JSON in the module's `sentier_param_layout` attribute), the
// original state_dict's names and shapes, and the TorchScript methods original_state_dict() and
// load_original_state_dict() that read and write the original names through views of the
// stored parameters.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "passes/internal/stacked_parameters_parts.h"
#include "passes/stacked_parameters.h"
#include "passes/torch_error.h"

namespace sentier {

std::string ParamLayout::ToJson() const {
  nlohmann::json j;
  j["version"] = 1;
  j["stacked"] = nlohmann::json::array();
  for (const StackedParameter& p : stacked) {
    j["stacked"].push_back({{"name", p.name}, {"op", p.op}, {"dim", p.dim}, {"members", p.members}, {"sizes", p.sizes}});
  }
  j["removed_methods"] = removed_methods;
  j["original_names"] = original_names;
  j["original_shapes"] = original_shapes;
  return j.dump();
}

absl::StatusOr<ParamLayout> ParamLayout::FromJson(const std::string& text) {
  ParamLayout layout;
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    for (const auto& p : j.at("stacked")) {
      StackedParameter s;
      s.name = p.at("name").get<std::string>();
      s.op = p.at("op").get<std::string>();
      s.dim = p.at("dim").get<int64_t>();
      s.members = p.at("members").get<std::vector<std::string>>();
      s.sizes = p.at("sizes").get<std::vector<int64_t>>();
      layout.stacked.push_back(std::move(s));
    }
    if (j.contains("removed_methods")) {
      layout.removed_methods = j.at("removed_methods").get<std::vector<std::string>>();
    }
    layout.original_names = j.at("original_names").get<std::vector<std::string>>();
    layout.original_shapes = j.at("original_shapes").get<std::vector<std::vector<int64_t>>>();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed parameter layout: ", e.what()));
  }
  return layout;
}

absl::StatusOr<ParamLayout> ReadParamLayout(const torch::jit::Module& module) {
  if (!module.hasattr(kParamLayoutAttribute)) return ParamLayout{};
  c10::IValue v = module.attr(kParamLayoutAttribute);
  if (!v.isString()) return absl::InvalidArgumentError("sentier_param_layout is not a string");
  return ParamLayout::FromJson(v.toStringRef());
}

namespace internal {
namespace stacked_parameters {
namespace {

// The TorchScript access path from `self` to a qualified name: `.name`, or getattr(x, "0") for
// attribute names that are not identifiers (the entries of ModuleList and Sequential).
std::string Access(const std::string& qualified) {
  std::string out = "self";
  for (absl::string_view part : absl::StrSplit(qualified, '.')) {
    bool identifier = !part.empty() && !absl::ascii_isdigit(part[0]) &&
                      std::all_of(part.begin(), part.end(), [](char ch) { return absl::ascii_isalnum(ch) || ch == '_'; });
    out = identifier ? absl::StrCat(out, ".", part) : absl::StrCat("getattr(", out, ", \"", part, "\")");
  }
  return out;
}

// A string literal for TorchScript source (the names are module paths: letters, digits, '.', '_').
std::string Quote(const std::string& s) { return absl::StrCat("\"", s, "\""); }

// Checkpoints stay interchangeable: original_state_dict() gives the original names, as views of
// the stored parameters, and load_original_state_dict() loads through them.
std::string StateDictMethodsSource(const ParamLayout& layout) {
  absl::flat_hash_map<std::string, std::string> view;  // original name -> expression
  for (const StackedParameter& p : layout.stacked) {
    int64_t offset = 0;
    for (size_t k = 0; k < p.members.size(); ++k) {
      view[p.members[k]] = p.op == "stack"
                               ? absl::StrCat(Access(p.name), ".select(", p.dim, ", ", k, ")")
                               : absl::StrCat(Access(p.name), ".narrow(", p.dim, ", ", offset, ", ", p.sizes[k], ")");
      offset += p.sizes[k];
    }
  }
  std::string src = "def original_state_dict(self) -> Dict[str, Tensor]:\n    d: Dict[str, Tensor] = {}\n";
  for (const std::string& n : layout.original_names) {
    auto it = view.find(n);
    absl::StrAppend(&src, "    d[", Quote(n), "] = ", it != view.end() ? it->second : Access(n), "\n");
  }
  absl::StrAppend(&src, "    return d\n\n");
  // Loading goes through those views (copy_ into a view writes the stored parameter), in one
  // loop: a statement per name would make the method slow to compile and to save.
  absl::StrAppend(&src,
                  "def load_original_state_dict(self, sd: Dict[str, Tensor]):\n"
                  "    d = self.original_state_dict()\n"
                  "    for k in sd.keys():\n"
                  "        assert k in d, \"load_original_state_dict: unexpected key \" + k\n"
                  "    for k in d.keys():\n"
                  "        assert k in sd, \"load_original_state_dict: missing key \" + k\n"
                  "        assert sd[k].size() == d[k].size(), \"load_original_state_dict: key \" + k + \" has the wrong shape\"\n"
                  "        d[k].detach().copy_(sd[k])\n");
  return src;
}

}  // namespace

// The original state_dict: names and shapes, before anything moves.
void RecordOriginalState(const torch::jit::Module& module, ParamLayout* layout) {
  for (const auto& np : module.named_parameters(/*recurse=*/true)) {
    layout->original_names.push_back(np.name);
    layout->original_shapes.push_back(np.value.sizes().vec());
  }
  for (const auto& nb : module.named_buffers(/*recurse=*/true)) {
    layout->original_names.push_back(nb.name);
    layout->original_shapes.push_back(nb.value.sizes().vec());
  }
}

// Records the layout in the module and defines its state_dict methods.
absl::Status RecordLayout(torch::jit::Module& module, const ParamLayout& layout) {
  std::string src = StateDictMethodsSource(layout);
  try {
    module.register_attribute(kParamLayoutAttribute, c10::StringType::get(), layout.ToJson());
    module.define(src);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("storing stacked parameters: the state_dict methods do not compile: ",
                                            TorchErrorMessage(e.what())));
  }
  return absl::OkStatus();
}

}  // namespace stacked_parameters
}  // namespace internal

absl::Status RestoreParamLayout(torch::jit::Module& module, const ParamLayout& layout) {
  return internal::stacked_parameters::RecordLayout(module, layout);
}

}  // namespace sentier
