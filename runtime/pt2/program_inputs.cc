// program_inputs.cc — sample inputs for an exported program: the pickled `(args, kwargs)` pair
// flattened as torch's pytree does, each leaf checked against the program's input metadata.
#include "absl/strings/str_cat.h"
#include "runtime/pt2/exported_program.h"
#include "runtime/pt2/program_internal.h"

namespace sentier {
namespace {

// Leaves in pytree order: tuples and lists by position, dicts by their key order, None empty.
absl::Status Flatten(const c10::IValue& v, std::vector<c10::IValue>& out, int depth) {
  if (depth > 32) return absl::InvalidArgumentError("nested too deeply");
  if (v.isNone()) return absl::OkStatus();
  if (v.isTuple()) {
    for (const auto& e : v.toTupleRef().elements()) {
      if (absl::Status ok = Flatten(e, out, depth + 1); !ok.ok()) return ok;
    }
    return absl::OkStatus();
  }
  if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (absl::Status ok = Flatten(e, out, depth + 1); !ok.ok()) return ok;
    }
    return absl::OkStatus();
  }
  if (v.isGenericDict()) {
    for (const auto& e : v.toGenericDict()) {
      if (absl::Status ok = Flatten(e.value(), out, depth + 1); !ok.ok()) return ok;
    }
    return absl::OkStatus();
  }
  out.push_back(v);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<c10::IValue>> FlatSampleInputs(const Model& model, const c10::IValue& pickled,
                                                          const std::string& what) {
  auto source = std::dynamic_pointer_cast<const ExportedProgramSource>(model.format_data);
  if (!source) return absl::FailedPreconditionError(absl::StrCat("'", model.path, "' is not an exported program"));
  std::vector<c10::IValue> flat;
  if (absl::Status ok = Flatten(pickled, flat, 0); !ok.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", ok.message()));
  }
  const nlohmann::json& gm = source->program["graph_module"];
  std::vector<std::string> names;
  for (const nlohmann::json& spec : gm["signature"]["input_specs"]) {
    if (spec.contains("user_input")) names.push_back(spec["user_input"]["arg"]["as_tensor"].value("name", ""));
  }
  if (flat.size() != names.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", flat.size(), " values for the program's ", names.size(), " inputs"));
  }
  const nlohmann::json& values = gm["graph"]["tensor_values"];
  for (size_t i = 0; i < flat.size(); ++i) {
    std::string at = absl::StrCat(what, ": input ", i, " ('", names[i], "')");
    if (!flat[i].isTensor()) return absl::InvalidArgumentError(absl::StrCat(at, " is not a tensor"));
    const at::Tensor& t = flat[i].toTensor();
    if (!values.contains(names[i])) continue;
    const nlohmann::json& meta = values[names[i]];
    auto dtype = pt2::ScalarTypeFromSchema(meta.value("dtype", 0));
    std::vector<int64_t> sizes;
    for (const auto& s : meta.value("sizes", nlohmann::json::array())) {
      auto n = pt2::IntOf(s, at);
      if (!n.ok()) return n.status();
      sizes.push_back(*n);
    }
    if ((dtype && t.scalar_type() != *dtype) || t.sizes().vec() != sizes) {
      return absl::InvalidArgumentError(c10::str(at, " is ", t.scalar_type(), t.sizes(),
                                                 "; the program was exported for ", dtype ? c10::toString(*dtype) : "?",
                                                 c10::IntArrayRef(sizes)));
    }
  }
  return flat;
}

std::vector<c10::IValue> NativeRuntimeInputs(const Model& model, const std::vector<c10::IValue>& flat) {
  auto source = std::dynamic_pointer_cast<const ExportedProgramSource>(model.format_data);
  if (!source) return flat;
  std::vector<c10::IValue> out;
  size_t next = 0;
  for (const nlohmann::json& spec : source->program["graph_module"]["signature"]["input_specs"]) {
    if (spec.contains("constant_input")) out.emplace_back();
    if (spec.contains("user_input") && next < flat.size()) out.push_back(flat[next++]);
  }
  return out;
}

}  // namespace sentier
