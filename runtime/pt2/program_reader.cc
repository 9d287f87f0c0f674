// program_reader.cc — an exported program's JSON as the engine's module (exported_program.h):
// the signature's parameters and buffers as attributes at their dotted names, user inputs as
// graph inputs, and each ATen node bound by name to its overload's schema.
#include <unordered_map>

#include <ATen/core/function_schema.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/operator.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "passes/canonicalize/passes.h"
#include "passes/stacked_parameters.h"
#include "passes/torch_error.h"
#include "runtime/pt2/exported_program.h"
#include "runtime/pt2/program_internal.h"

namespace sentier {
namespace {

using nlohmann::json;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

absl::Status Refuse(const std::string& where, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// ModuleTree: the module and its submodules by dotted path, created as attributes need them.
class ModuleTree {
 public:
  ModuleTree() : cu_(std::make_shared<torch::jit::CompilationUnit>()),
                 root_(c10::QualifiedName("__torch__.sentier.ExportedProgram"), cu_, /*shouldMangle=*/true) {}

  torch::jit::Module& root() { return root_; }

  // The module that holds `path`'s last component, and that component.
  std::pair<torch::jit::Module, std::string> Owner(const std::string& path) {
    std::vector<std::string> parts = absl::StrSplit(path, '.');
    torch::jit::Module m = root_;
    std::string prefix;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      prefix = prefix.empty() ? parts[i] : absl::StrCat(prefix, ".", parts[i]);
      auto it = children_.find(prefix);
      if (it == children_.end()) {
        torch::jit::Module child(c10::QualifiedName("__torch__.sentier.ExportedSubmodule"), cu_, true);
        m.register_module(parts[i], child);
        it = children_.emplace(prefix, child).first;
      }
      m = it->second;
    }
    return {m, parts.back()};
  }

 private:
  std::shared_ptr<torch::jit::CompilationUnit> cu_;
  torch::jit::Module root_;
  std::unordered_map<std::string, torch::jit::Module> children_;
};

bool ValidAttributePath(const std::string& path) {
  if (path.empty()) return false;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    if (part.empty()) return false;
    for (char c : part) {
      if (!(isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
    }
  }
  return true;
}

class ProgramReader {
 public:
  ProgramReader(const json& program, const std::string& where) : program_(program), where_(where) {}

  absl::StatusOr<Model> Read(const Pt2Archive& archive, ExportedProgramSource& source);

 private:
  absl::Status CheckHeader();
  absl::Status AddInputs(const json& specs, const std::map<std::string, at::Tensor>& weights,
                         const std::map<std::string, at::Tensor>& constants, ExportedProgramSource& source);
  absl::Status AddAttribute(const std::string& placeholder, const std::string& path, const at::Tensor& t, bool param);
  absl::Status AddNode(const json& node, size_t index);
  absl::StatusOr<Node*> BindNode(const std::string& op, const std::string& overload, const json& inputs,
                                 const std::string& where);
  absl::StatusOr<Node*> TryOverload(const c10::FunctionSchema& schema, const json& inputs, const std::string& where);
  absl::StatusOr<Value*> ArgValue(const json& arg, const c10::Argument& formal, const std::string& where);
  absl::Status MapOutputs(Node* n, const json& outputs, const std::string& where);
  absl::Status AddOutputs();
  absl::StatusOr<Value*> TensorNamed(const json& ref, const std::string& where);

  const json& program_;
  std::string where_;
  ModuleTree tree_;
  std::shared_ptr<Graph> graph_ = std::make_shared<Graph>();
  Value* self_ = nullptr;
  std::unordered_map<std::string, Value*> env_;
  std::vector<Node*> scratch_;  // constants made for an overload that did not bind
};

absl::Status ProgramReader::CheckHeader() {
  auto version = pt2::Field(program_, "schema_version", where_);
  if (!version.ok()) return version.status();
  auto major = pt2::Field(**version, "major", where_ + ": schema_version");
  if (!major.ok()) return major.status();
  if (!(*major)->is_number_integer() || (*major)->get<int64_t>() != pt2::kSchemaMajor) {
    return Refuse(where_, absl::StrCat("schema version ", (**version).dump(), " is not known (this reader knows major ",
                                       pt2::kSchemaMajor, ")"));
  }
  // Static shapes only: every tensor's sizes are ints.
  const json& values = program_.value("graph_module", json::object()).value("graph", json::object()).value("tensor_values", json::object());
  if (!values.is_object()) return Refuse(where_, "graph.tensor_values is not an object");
  for (const auto& [name, meta] : values.items()) {
    for (const json& size : meta.value("sizes", json::array())) {
      if (absl::Status ok = pt2::IntOf(size, absl::StrCat(where_, ": tensor '", name, "'")).status(); !ok.ok()) return ok;
    }
  }
  return absl::OkStatus();
}

absl::Status ProgramReader::AddAttribute(const std::string& placeholder, const std::string& path, const at::Tensor& t,
                                         bool param) {
  if (!ValidAttributePath(path)) return Refuse(where_, absl::StrCat("'", path, "' is not a module attribute name"));
  auto [owner, name] = tree_.Owner(path);
  if (owner.hasattr(name)) return Refuse(where_, absl::StrCat("'", path, "' appears twice"));
  owner.register_parameter(name, param ? t.detach().requires_grad_(true) : t, /*is_buffer=*/!param);
  // The chain of GetAttr from self, made where the graph starts.
  Value* v = self_;
  std::vector<std::string> parts = absl::StrSplit(path, '.');
  for (const auto& part : parts) v = graph_->insertGetAttr(v, part);
  env_[placeholder] = v;
  return absl::OkStatus();
}

absl::Status ProgramReader::AddInputs(const json& specs, const std::map<std::string, at::Tensor>& weights,
                                      const std::map<std::string, at::Tensor>& constants,
                                      ExportedProgramSource& source) {
  if (!specs.is_array()) return Refuse(where_, "signature.input_specs is not a list");
  for (size_t i = 0; i < specs.size(); ++i) {
    const json& spec = specs[i];
    std::string at = absl::StrCat(where_, ": signature.input_specs[", i, "]");
    if (!spec.is_object() || spec.size() != 1) return Refuse(at, "not an input spec");
    const std::string kind = spec.begin().key();
    const json& body = spec.begin().value();
    absl::Status added;
    if (kind == "parameter" || kind == "buffer") {
      std::string target = body.value(kind == "parameter" ? "parameter_name" : "buffer_name", "");
      auto w = weights.find(target);
      if (w == weights.end()) return Refuse(at, absl::StrCat("no weight entry for '", target, "'"));
      added = AddAttribute(body.value("arg", json::object()).value("name", ""), target, w->second, kind == "parameter");
    } else if (kind == "tensor_constant") {
      std::string target = body.value("tensor_constant_name", "");
      auto c = constants.find(target);
      if (c == constants.end()) return Refuse(at, absl::StrCat("no constant entry for '", target, "'"));
      std::string attr = absl::StrCat("sentier_constant_", source.constants.size());
      source.constants[attr] = target;
      added = AddAttribute(body.value("arg", json::object()).value("name", ""), attr, c->second, false);
    } else if (kind == "constant_input") {  // a None or constant argument: inlined where used
      auto value = ArgValue(body.value("value", json::object()), c10::Argument("value", c10::AnyType::get()), at);
      if (!value.ok()) return value.status();
      env_[body.value("name", "")] = *value;
      scratch_.clear();
    } else if (kind == "user_input") {
      const json arg = body.value("arg", json::object());
      if (!arg.contains("as_tensor")) return Refuse(at, "a user input that is not a tensor is not supported");
      std::string name = arg["as_tensor"].value("name", "");
      env_[name] = graph_->addInput(absl::StrCat("input_", i))->setType(c10::TensorType::get());
    } else {
      return Refuse(at, absl::StrCat("input kind '", kind, "' is not supported"));
    }
    if (!added.ok()) return added;
  }
  return absl::OkStatus();
}

absl::StatusOr<Value*> ProgramReader::TensorNamed(const json& ref, const std::string& where) {
  std::string name = ref.is_object() ? ref.value("name", "") : "";
  auto it = env_.find(name);
  if (it == env_.end()) return Refuse(where, absl::StrCat("tensor '", name.substr(0, 80), "' is not defined before its use"));
  return it->second;
}

// A constant for `formal` from a JSON scalar (or list of scalars) argument.
absl::StatusOr<c10::IValue> ScalarValue(const std::string& tag, const json& v, const c10::TypePtr& formal) {
  const c10::TypePtr type = formal->kind() == c10::TypeKind::OptionalType ? formal->castRaw<c10::OptionalType>()->getElementType() : formal;
  auto num = [&](const json& x) -> std::optional<c10::IValue> {
    if (x.is_number_integer()) {
      if (type->kind() == c10::TypeKind::FloatType) return c10::IValue(x.get<double>());
      return c10::IValue(x.get<int64_t>());
    }
    if (x.is_number_float()) return c10::IValue(x.get<double>());
    if (x.is_string()) {  // the schema spells non-finite floats as strings
      std::string s = x.get<std::string>();
      if (s == "Infinity") return c10::IValue(std::numeric_limits<double>::infinity());
      if (s == "-Infinity") return c10::IValue(-std::numeric_limits<double>::infinity());
      if (s == "NaN") return c10::IValue(std::numeric_limits<double>::quiet_NaN());
    }
    return std::nullopt;
  };
  if (tag == "as_int" || tag == "as_float") {
    if (auto n = num(v)) return *n;
  } else if (tag == "as_bool" && v.is_boolean()) {
    return c10::IValue(v.get<bool>());
  } else if (tag == "as_string" && v.is_string()) {
    return c10::IValue(v.get<std::string>());
  } else if (tag == "as_scalar_type" && v.is_number_integer()) {
    if (auto t = pt2::ScalarTypeFromSchema(v.get<int64_t>())) return c10::IValue(static_cast<int64_t>(*t));
  } else if (tag == "as_memory_format" && v.is_number_integer()) {
    if (auto f = pt2::MemoryFormatFromSchema(v.get<int64_t>())) return c10::IValue(static_cast<int64_t>(*f));
  } else if (tag == "as_layout" && v.is_number_integer() && v.get<int64_t>() == pt2::kSchemaStridedLayout) {
    return c10::IValue(static_cast<int64_t>(c10::kStrided));
  } else if (tag == "as_device" && v.is_object() && v.value("type", "").size() < 16) {
    std::string d = v.value("type", "cpu");
    if (v.contains("index") && v["index"].is_number_integer()) d += ":" + std::to_string(v["index"].get<int64_t>());
    try {
      return c10::IValue(c10::Device(d));
    } catch (const std::exception&) {
    }
  } else if (tag == "as_ints" || tag == "as_sym_ints" || tag == "as_floats" || tag == "as_bools") {
    if (!v.is_array()) return absl::InvalidArgumentError("not a list");
    std::vector<int64_t> ints;
    std::vector<double> floats;
    c10::List<bool> bools;
    for (const json& x : v) {
      if (tag == "as_bools" && x.is_boolean()) bools.push_back(x.get<bool>());
      else if (tag == "as_floats" && x.is_number()) floats.push_back(x.get<double>());
      else if (tag != "as_floats" && tag != "as_bools") {
        auto n = pt2::IntOf(x, "list element");
        if (!n.ok()) return n.status();
        ints.push_back(*n);
      } else {
        return absl::InvalidArgumentError("bad list element");
      }
    }
    if (tag == "as_bools") return c10::IValue(bools);
    if (tag == "as_floats") return c10::IValue(floats);
    return c10::IValue(ints);
  } else if (tag == "as_sym_int") {
    auto n = pt2::IntOf(v, "argument");
    if (!n.ok()) return n.status();
    return c10::IValue(*n);
  }
  return absl::InvalidArgumentError(absl::StrCat("'", tag, "' argument ", v.dump().substr(0, 60), " is not supported"));
}

absl::StatusOr<Value*> ProgramReader::ArgValue(const json& arg, const c10::Argument& formal, const std::string& where) {
  if (!arg.is_object() || arg.size() != 1) return Refuse(where, "not an argument");
  const std::string tag = arg.begin().key();
  const json& v = arg.begin().value();
  if (tag == "as_tensor") return TensorNamed(v, where);
  if (tag == "as_none") {
    Node* c = graph_->createNone();
    graph_->insertNode(c);
    scratch_.push_back(c);
    return c->output();
  }
  if (tag == "as_optional_tensor") {
    if (v.is_object() && v.contains("as_tensor")) return TensorNamed(v["as_tensor"], where);
    return ArgValue(json{{"as_none", true}}, formal, where);
  }
  if (tag == "as_tensors" || tag == "as_optional_tensors") {
    if (!v.is_array()) return Refuse(where, "not a list");
    std::vector<Value*> items;
    bool optional = tag == "as_optional_tensors";
    for (const json& item : v) {
      absl::StatusOr<Value*> t = optional ? ArgValue(item, formal, where) : TensorNamed(item, where);
      if (!t.ok()) return t.status();
      items.push_back(*t);
    }
    c10::TypePtr elem = optional ? c10::OptionalType::ofTensor() : c10::TensorType::get();
    Node* list = graph_->insertNode(graph_->createList(elem, items));
    scratch_.push_back(list);
    return list->output();
  }
  absl::StatusOr<c10::IValue> constant = ScalarValue(tag, v, formal.type());
  if (!constant.ok()) return Refuse(where, std::string(constant.status().message()));
  Value* c = graph_->insertConstant(*constant);
  scratch_.push_back(c->node());
  return c;
}

absl::StatusOr<Node*> ProgramReader::TryOverload(const c10::FunctionSchema& schema, const json& inputs,
                                                 const std::string& where) {
  std::unordered_map<std::string, const json*> by_name;
  for (const json& named : inputs) {
    if (!named.is_object() || !named.contains("name") || !named["name"].is_string() || !named.contains("arg")) {
      return Refuse(where, "an input is not a named argument");
    }
    by_name[named["name"].get<std::string>()] = &named["arg"];
  }
  std::vector<Value*> values;
  size_t used = 0;
  for (const c10::Argument& formal : schema.arguments()) {
    auto it = by_name.find(formal.name());
    if (it != by_name.end()) {
      auto v = ArgValue(*it->second, formal, absl::StrCat(where, " argument '", formal.name(), "'"));
      if (!v.ok()) return v.status();
      values.push_back(*v);
      ++used;
    } else if (formal.default_value()) {
      Value* c = graph_->insertConstant(*formal.default_value());
      scratch_.push_back(c->node());
      values.push_back(c);
    } else {
      return Refuse(where, absl::StrCat("argument '", formal.name(), "' is missing"));
    }
  }
  if (used != by_name.size()) return Refuse(where, "an argument is not in the schema");
  Node* n = graph_->create(c10::Symbol::fromQualString(schema.name()), values, schema.returns().size());
  for (size_t i = 0; i < schema.returns().size(); ++i) n->output(i)->setType(schema.returns()[i].type());
  graph_->insertNode(n);
  const c10::FunctionSchema* bound = n->maybeSchema();
  if (bound == nullptr || bound->overload_name() != schema.overload_name()) {
    n->destroy();
    return Refuse(where, absl::StrCat("arguments do not fit ", schema.name(), ".", schema.overload_name()));
  }
  return n;
}

absl::StatusOr<Node*> ProgramReader::BindNode(const std::string& op, const std::string& overload, const json& inputs,
                                              const std::string& where) {
  auto ops = torch::jit::getAllOperatorsFor(c10::Symbol::fromQualString("aten::" + op));
  std::stable_sort(ops.begin(), ops.end(), [&](const auto& a, const auto& b) {
    auto rank = [&](const auto& o) {
      const std::string& name = o->schema().overload_name();
      return name == overload ? 0 : (name == "Scalar" || absl::StrContains(name, "Scalar")) ? 1 : 2;
    };
    return rank(a) < rank(b);
  });
  absl::Status first = Refuse(where, absl::StrCat("operator aten.", op, ".", overload, " is not known to this LibTorch"));
  for (const auto& candidate : ops) {
    if (candidate->schema().is_vararg()) continue;
    size_t before = scratch_.size();
    absl::StatusOr<Node*> n = TryOverload(candidate->schema(), inputs, where);
    if (n.ok()) {
      scratch_.resize(before);  // its constants are in use
      return n;
    }
    for (size_t i = scratch_.size(); i > before; --i) {
      if (!scratch_[i - 1]->hasUses()) scratch_[i - 1]->destroy();
    }
    scratch_.resize(before);
    if (candidate->schema().overload_name() == overload) first = n.status();
  }
  return first;
}

absl::Status ProgramReader::MapOutputs(Node* n, const json& outputs, const std::string& where) {
  if (!outputs.is_array()) return Refuse(where, "outputs is not a list");
  const auto& returns = n->schema().returns();
  if (outputs.size() != returns.size()) {
    return Refuse(where, absl::StrCat(outputs.size(), " outputs for ", returns.size(), " results"));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const json& out = outputs[i];
    if (!out.is_object() || out.size() != 1) return Refuse(where, "an output is not an argument");
    const std::string tag = out.begin().key();
    const json& v = out.begin().value();
    if (tag == "as_none") continue;
    if (tag == "as_tensor") {
      env_[v.value("name", "")] = n->output(i)->setType(c10::TensorType::get());
    } else if (tag == "as_tensors" && v.is_array()) {
      Node* unpack = graph_->insertNode(graph_->createListUnpack(n->output(i), v.size()));
      for (size_t k = 0; k < v.size(); ++k) env_[v[k].value("name", "")] = unpack->output(k);
    } else {
      return Refuse(where, absl::StrCat("an output '", tag, "' is not supported"));
    }
  }
  return absl::OkStatus();
}

absl::Status ProgramReader::AddNode(const json& node, size_t index) {
  std::string where = absl::StrCat(where_, ": graph.nodes[", index, "]");
  if (!node.is_object() || !node.contains("target") || !node["target"].is_string()) return Refuse(where, "no target");
  std::string target = node["target"].get<std::string>();
  where = absl::StrCat(where, " (", node.value("name", "?"), ", ", target.substr(0, 80), ")");
  constexpr absl::string_view kAten = "torch.ops.aten.";
  std::vector<std::string> parts = absl::StrSplit(target, '.');
  if (!absl::StartsWith(target, kAten) || parts.size() != 5) {
    return Refuse(where, "the operator is not an ATen operator this reader knows");
  }
  std::string overload = parts[4] == "default" ? "" : parts[4];
  auto inputs = pt2::Field(node, "inputs", where);
  if (!inputs.ok()) return inputs.status();
  if (!(*inputs)->is_array()) return Refuse(where, "inputs is not a list");
  auto n = BindNode(parts[3], overload, **inputs, where);
  if (!n.ok()) return n.status();
  auto outputs = pt2::Field(node, "outputs", where);
  if (!outputs.ok()) return outputs.status();
  return MapOutputs(*n, **outputs, where);
}

absl::Status ProgramReader::AddOutputs() {
  const json& specs = program_["graph_module"]["signature"]["output_specs"];
  if (!specs.is_array() || specs.empty()) return Refuse(where_, "signature.output_specs is not a non-empty list");
  std::vector<Value*> outs;
  for (size_t i = 0; i < specs.size(); ++i) {
    std::string at = absl::StrCat(where_, ": signature.output_specs[", i, "]");
    if (!specs[i].is_object() || !specs[i].contains("user_output")) {
      return Refuse(at, "only user outputs are supported (this program returns "
                        + (specs[i].is_object() && !specs[i].empty() ? specs[i].begin().key() : std::string("?")) + ")");
    }
    const json arg = specs[i]["user_output"].value("arg", json::object());
    if (!arg.contains("as_tensor")) return Refuse(at, "a user output that is not a tensor is not supported");
    auto v = TensorNamed(arg["as_tensor"], at);
    if (!v.ok()) return v.status();
    outs.push_back(*v);
  }
  if (outs.size() == 1) {
    graph_->registerOutput(outs[0]);
  } else {
    graph_->registerOutput(graph_->insertNode(graph_->createTuple(outs))->output());
  }
  return absl::OkStatus();
}

absl::StatusOr<Model> ProgramReader::Read(const Pt2Archive& archive, ExportedProgramSource& source) {
  if (absl::Status ok = CheckHeader(); !ok.ok()) return ok;
  auto weights = pt2::ReadWeights(archive, std::string(kPt2WeightsConfigEntry), "data/weights/");
  if (!weights.ok()) return Refuse(where_, std::string(weights.status().message()));
  auto constants = pt2::ReadWeights(archive, std::string(kPt2ConstantsConfigEntry), "data/constants/");
  if (!constants.ok()) return Refuse(where_, std::string(constants.status().message()));
  const json& gm = program_.value("graph_module", json::object());
  if (!gm.contains("graph") || !gm.contains("signature") || !gm["signature"].contains("input_specs")) {
    return Refuse(where_, "graph_module.graph or its signature is missing");
  }
  self_ = graph_->addInput("self")->setType(tree_.root().type());
  if (absl::Status ok = AddInputs(gm["signature"]["input_specs"], *weights, *constants, source); !ok.ok()) return ok;
  const json& nodes = gm["graph"].value("nodes", json::array());
  if (!nodes.is_array()) return Refuse(where_, "graph.nodes is not a list");
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (absl::Status ok = AddNode(nodes[i], i); !ok.ok()) return ok;
  }
  if (absl::Status ok = AddOutputs(); !ok.ok()) return ok;
  DropExportGuards(graph_, nullptr);  // the engine's form has none (passes/canonicalize)
  torch::jit::Module module = tree_.root();
  auto fn = module._ivalue()->compilation_unit()->create_function(
      c10::QualifiedName(*module.type()->name(), "forward"), graph_);
  module.type()->addMethod(fn);
  Model model;
  auto layout = archive.entries.find(std::string(kPt2ParamLayoutEntry));
  if (layout != archive.entries.end()) {  // a stacked layout's record, as the TorchScript form keeps it
    auto read = ParamLayout::FromJson(layout->second);
    absl::Status restored = read.ok() ? RestoreParamLayout(module, *read) : read.status();
    if (!restored.ok()) {
      return Refuse(where_, absl::StrCat("entry '", kPt2ParamLayoutEntry, "': ", restored.message()));
    }
  }
  model.is_module = true;
  model.module = module;
  model.graph = graph_;
  return model;
}

}  // namespace

absl::StatusOr<Model> ModuleFromProgram(Pt2Archive archive, const std::string& path) {
  auto source = std::make_shared<ExportedProgramSource>();
  std::string where = absl::StrCat("cannot read exported program '", path, "': entry '", kPt2ProgramEntry, "'");
  source->program = json::parse(archive.entries[std::string(kPt2ProgramEntry)], nullptr, /*allow_exceptions=*/false);
  if (source->program.is_discarded() || !source->program.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": malformed JSON"));
  }
  absl::StatusOr<Model> model;
  try {
    model = ProgramReader(source->program, where).Read(archive, *source);
  } catch (const std::exception& e) {  // a JSON value of the wrong kind, a LibTorch check
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", TorchErrorMessage(e.what(), 300)));
  }
  if (!model.ok()) return model.status();
  source->archive = std::move(archive);
  model->path = path;
  model->format_data = source;
  return model;
}

}  // namespace sentier
