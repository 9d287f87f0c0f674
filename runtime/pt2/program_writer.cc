// program_writer.cc — the rewritten module back as an exported program (exported_program.h):
// one recorded run gives every tensor's metadata and folds size reads to constants, then each
// ATen node is written with its arguments named by its schema.
#include <optional>
#include <set>
#include <unordered_map>

#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "passes/stacked_parameters.h"
#include "runtime/graph_runner.h"
#include "runtime/pt2/exported_program.h"
#include "runtime/pt2/program_internal.h"

namespace sentier {
namespace {

using nlohmann::json;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

absl::Status CannotWrite(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("cannot write an exported program: ", what));
}

// RecordValues: every value of `graph` produced by a node (and the inputs), after one run of
// the forward on `inputs` with `module` (a copy: a training-mode run updates running statistics).
absl::StatusOr<std::unordered_map<const Value*, c10::IValue>> RecordValues(Graph& graph, const torch::jit::Module& module,
                                                                          const std::vector<c10::IValue>& inputs) {
  std::vector<Value*> watched;
  for (Node* n : graph.nodes()) {
    for (Value* v : n->outputs()) watched.push_back(v);
  }
  size_t first = graph.outputs().size();
  for (Value* v : watched) graph.registerOutput(v);
  std::vector<c10::IValue> stack = {module.deepcopy()._ivalue()};
  stack.insert(stack.end(), inputs.begin(), inputs.end());
  auto copy = graph.copy();
  while (graph.outputs().size() > first) graph.eraseOutput(graph.outputs().size() - 1);
  auto outputs = RunGraph(copy, stack);
  if (!outputs.ok()) return outputs.status();
  std::unordered_map<const Value*, c10::IValue> seen;
  for (size_t i = 0; i < watched.size(); ++i) seen[watched[i]] = (*outputs)[first + i];
  for (size_t i = 0; i < inputs.size() && i + 1 < graph.inputs().size(); ++i) seen[graph.inputs()[i + 1]] = inputs[i];
  return seen;
}

// FoldSizes: size, rank, device and dtype reads of tensors become the recorded values (the
// program's shapes are static), then constant propagation folds the arithmetic on them.
void FoldSizes(std::shared_ptr<Graph> shared, const std::unordered_map<const Value*, c10::IValue>& seen) {
  Graph& graph = *shared;
  // Shapes, devices and dtypes are the program's own: torch.export writes them as constants too.
  static const std::set<std::string> kShapeReads = {"aten::size", "aten::dim",    "aten::numel", "aten::len",
                                                    "prim::shape", "prim::device", "prim::dtype"};
  std::vector<Node*> reads;
  for (Node* n : graph.nodes()) {
    if (kShapeReads.count(n->kind().toQualString()) && n->outputs().size() == 1) reads.push_back(n);
  }
  for (Node* n : reads) {
    auto it = seen.find(n->output());
    if (it == seen.end()) continue;
    torch::jit::WithInsertPoint at(n);
    n->output()->replaceAllUsesWith(graph.insertConstant(it->second));
  }
  torch::jit::ConstantPropagation(shared);
  torch::jit::EliminateDeadCode(shared);
}

class ProgramWriter {
 public:
  ProgramWriter(const torch::jit::Module& module, const ExportedProgramSource& source)
      : module_(module), source_(source) {}

  absl::StatusOr<Pt2Archive> Write(Graph& graph, const std::unordered_map<const Value*, c10::IValue>& seen);

 private:
  std::string NameFor(const Value* v, const std::string& hint);
  std::string Unique(const std::string& hint);
  absl::Status AddInputs(Graph& graph);
  absl::StatusOr<json> ArgFor(Value* v, const c10::Argument& formal);
  absl::Status AddNode(Node* n);
  absl::Status AliasListElements(Node* n);
  std::optional<std::vector<std::string>> ListElements(Value* list);
  absl::StatusOr<json> OutputFor(Value* out);
  json TensorValues() const;

  const torch::jit::Module& module_;
  const ExportedProgramSource& source_;
  const std::unordered_map<const Value*, c10::IValue>* seen_ = nullptr;
  std::unordered_map<const Value*, std::string> names_;
  std::unordered_map<const Value*, std::vector<std::string>> lists_;  // a Tensor[] value's elements
  std::set<std::string> taken_;
  std::map<std::string, at::Tensor> metas_;  // name -> a tensor with the value's metadata
  json nodes_ = json::array();
  json input_specs_ = json::array();  // parameters, buffers and constants (placeholders first)
  json user_specs_ = json::array();   // then the user's inputs
  int graph_constants_ = 0;
  std::map<std::string, at::Tensor> weights_, constants_;
  std::vector<std::string> params_;
};

std::string ProgramWriter::NameFor(const Value* v, const std::string& hint) {
  auto it = names_.find(v);
  if (it != names_.end()) return it->second;
  return names_[v] = Unique(hint);
}

std::string ProgramWriter::Unique(const std::string& hint) {
  std::string base;
  for (char c : hint) base += (isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (base.empty() || isdigit(static_cast<unsigned char>(base[0]))) base = "t" + base;
  std::string name = base;
  for (int k = 1; taken_.count(name); ++k) name = absl::StrCat(base, "_", k);
  taken_.insert(name);
  return name;
}

// The attribute path `v` reads (a prim::GetAttr chain from self), or "" for another value.
std::string AttributePath(const Value* v) {
  std::vector<std::string> parts;
  while (v->node()->kind() == c10::prim::GetAttr) {
    parts.push_back(v->node()->s(c10::attr::name));
    v = v->node()->input(0);
  }
  if (v->node()->kind() != c10::prim::Param || parts.empty()) return "";
  std::reverse(parts.begin(), parts.end());
  return absl::StrJoin(parts, ".");
}

absl::Status ProgramWriter::AddInputs(Graph& graph) {
  std::set<std::string> params, buffers;
  for (const auto& p : module_.named_parameters(/*recurse=*/true)) params.insert(p.name);
  for (const auto& b : module_.named_buffers(/*recurse=*/true)) buffers.insert(b.name);
  std::map<std::string, std::string> original_placeholders;  // dotted name -> placeholder
  for (const json& spec : source_.program["graph_module"]["signature"]["input_specs"]) {
    for (const char* kind : {"parameter", "buffer"}) {
      if (!spec.contains(kind)) continue;
      original_placeholders[spec[kind].value(std::string(kind) + "_name", "")] = spec[kind]["arg"].value("name", "");
    }
  }
  std::map<std::string, std::vector<Value*>> reads;
  for (Node* n : graph.nodes()) {
    if (n->kind() != c10::prim::GetAttr) continue;
    std::string path = AttributePath(n->output());
    if (params.count(path) || buffers.count(path)) reads[path].push_back(n->output());
  }
  auto add = [&](const std::string& path, const at::Tensor& t, const char* kind) {
    std::string constant;
    if (auto c = source_.constants.find(path); c != source_.constants.end()) constant = c->second;
    std::string hint = original_placeholders.count(path) ? original_placeholders[path]
                       : absl::StrCat(constant.empty() ? (std::string(kind) == "parameter" ? "p_" : "b_") : "c_",
                                      constant.empty() ? path : constant);
    std::string name = Unique(hint);
    for (Value* v : reads[path]) names_[v] = name;
    metas_[name] = t;
    if (!constant.empty()) {
      input_specs_.push_back({{"tensor_constant", {{"arg", {{"name", name}}}, {"tensor_constant_name", constant}}}});
      constants_[constant] = t;
    } else if (std::string(kind) == "parameter") {
      input_specs_.push_back({{"parameter", {{"arg", {{"name", name}}}, {"parameter_name", path}}}});
      weights_[path] = t;
      params_.push_back(path);
    } else {
      input_specs_.push_back({{"buffer", {{"arg", {{"name", name}}}, {"buffer_name", path}, {"persistent", true}}}});
      weights_[path] = t;
    }
  };
  for (const auto& p : module_.named_parameters(true)) add(p.name, p.value, "parameter");
  for (const auto& b : module_.named_buffers(true)) {
    if (!source_.constants.count(b.name)) add(b.name, b.value, "buffer");
  }
  for (const auto& b : module_.named_buffers(true)) {
    if (source_.constants.count(b.name)) add(b.name, b.value, "buffer");
  }
  // The user inputs keep their placeholders' names, and constant inputs (a None argument) their
  // places among them.
  size_t next = 1;
  for (const json& spec : source_.program["graph_module"]["signature"]["input_specs"]) {
    if (spec.contains("constant_input")) {
      user_specs_.push_back(spec);
      continue;
    }
    if (!spec.contains("user_input")) continue;
    if (next >= graph.inputs().size()) return CannotWrite("the forward's inputs changed in number");
    Value* in = graph.inputs()[next++];
    std::string name = NameFor(in, spec["user_input"]["arg"]["as_tensor"].value("name", ""));
    auto seen = seen_->find(in);
    if (seen != seen_->end() && seen->second.isTensor()) metas_[name] = seen->second.toTensor();
    user_specs_.push_back({{"user_input", {{"arg", {{"as_tensor", {{"name", name}}}}}}}});
  }
  if (next != graph.inputs().size()) return CannotWrite("the forward's inputs changed in number");
  return absl::OkStatus();
}

json ScalarArg(const c10::IValue& c, const c10::TypePtr& formal) {
  c10::TypePtr type = formal->kind() == c10::TypeKind::OptionalType ? formal->castRaw<c10::OptionalType>()->getElementType() : formal;
  if (c.isNone()) return {{"as_none", true}};
  if (c.isInt()) {
    int64_t v = c.toInt();
    if (type->kind() == c10::TypeKind::ScalarTypeType) return {{"as_scalar_type", pt2::SchemaScalarType(static_cast<c10::ScalarType>(v))}};
    if (type->kind() == c10::TypeKind::MemoryFormatType) return {{"as_memory_format", pt2::SchemaMemoryFormat(static_cast<c10::MemoryFormat>(v))}};
    if (type->kind() == c10::TypeKind::LayoutType) return {{"as_layout", pt2::kSchemaStridedLayout}};
    if (type->kind() == c10::TypeKind::FloatType) return {{"as_float", static_cast<double>(v)}};
    return {{"as_int", v}};
  }
  if (c.isDouble()) return {{"as_float", c.toDouble()}};
  if (c.isBool()) return {{"as_bool", c.toBool()}};
  if (c.isString()) return {{"as_string", c.toStringRef()}};
  if (c.isIntList()) return {{"as_ints", c.toIntVector()}};
  if (c.isDoubleList()) return {{"as_floats", c.toDoubleVector()}};
  if (c.isBoolList()) {
    std::vector<bool> v;
    for (bool b : c.toBoolList()) v.push_back(b);
    return {{"as_bools", v}};
  }
  if (c.isDevice()) {
    json d = {{"type", c.toDevice().is_cuda() ? "cuda" : "cpu"}, {"index", nullptr}};
    if (c.toDevice().has_index()) d["index"] = c.toDevice().index();
    return {{"as_device", d}};
  }
  return nullptr;
}

absl::StatusOr<json> ProgramWriter::ArgFor(Value* v, const c10::Argument& formal) {
  if (names_.count(v)) return json{{"as_tensor", {{"name", names_[v]}}}};
  Node* p = v->node();
  if (p->kind() == c10::prim::ListConstruct) {
    c10::TypePtr elem = p->output()->type()->castRaw<c10::ListType>()->getElementType();
    bool tensors = elem->kind() == c10::TypeKind::TensorType ||
                   (elem->kind() == c10::TypeKind::OptionalType &&
                    elem->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType);
    if (!tensors) {  // a list of scalars: each must be constant
      c10::impl::GenericList items(elem);
      for (Value* item : p->inputs()) {
        auto c = torch::jit::toIValue(item);
        if (!c) return CannotWrite(absl::StrCat("list element %", item->debugName(), " is not a constant"));
        items.push_back(*c);
      }
      std::vector<int64_t> ints;
      for (const c10::IValue& c : items) {
        if (!c.isInt()) return CannotWrite("a list of scalars that are not ints");
        ints.push_back(c.toInt());
      }
      return json{{"as_ints", ints}};
    }
    bool optional = elem->kind() == c10::TypeKind::OptionalType;
    json items = json::array();
    for (Value* item : p->inputs()) {
      if (names_.count(item)) items.push_back({{"as_tensor", {{"name", names_[item]}}}});
      else if (optional && item->mustBeNone()) items.push_back({{"as_none", true}});
      else return CannotWrite(absl::StrCat("list element %", item->debugName(), " is not a tensor the graph computes"));
    }
    if (optional) return json{{"as_optional_tensors", items}};
    json names = json::array();
    for (json& item : items) names.push_back(item["as_tensor"]);
    return json{{"as_tensors", names}};
  }
  if (auto elems = ListElements(v)) {
    json names = json::array();
    for (const auto& n : *elems) names.push_back({{"name", n}});
    return json{{"as_tensors", names}};
  }
  auto c = torch::jit::toIValue(v);
  if (!c) return CannotWrite(absl::StrCat("value %", v->debugName(), " (from ", p->kind().toQualString(),
                                          ") is not a tensor or a constant (computed from tensor data?)"));
  if (c->isTensor()) {  // a tensor constant of the graph: lifted, as torch.export lifts them
    std::string constant;
    do {
      constant = absl::StrCat("sentier_graph_constant_", graph_constants_++);
    } while (constants_.count(constant));
    std::string name = NameFor(v, "c_" + constant);
    metas_[name] = c->toTensor();
    constants_[constant] = c->toTensor();
    input_specs_.push_back({{"tensor_constant", {{"arg", {{"name", name}}}, {"tensor_constant_name", constant}}}});
    return json{{"as_tensor", {{"name", name}}}};
  }
  json arg = ScalarArg(*c, formal.real_type());
  if (arg.is_null()) {
    return CannotWrite(absl::StrCat("constant %", v->debugName(), " (", c->tagKind(), ", for argument '", formal.name(),
                                    "' of ", formal.real_type()->str(), ") has a type the schema cannot hold"));
  }
  return arg;
}

absl::StatusOr<json> ProgramWriter::OutputFor(Value* out) {
  auto seen = seen_->find(out);
  if (out->type()->kind() == c10::TypeKind::TensorType || (seen != seen_->end() && seen->second.isTensor())) {
    std::string name = NameFor(out, out->debugName());
    if (seen != seen_->end() && seen->second.isTensor()) metas_[name] = seen->second.toTensor();
    return json{{"as_tensor", {{"name", name}}}};
  }
  if (seen != seen_->end() && seen->second.isTensorList()) {
    std::vector<std::string> names;
    Node* unpack = out->uses().size() == 1 && out->uses()[0].user->kind() == c10::prim::ListUnpack ? out->uses()[0].user : nullptr;
    auto list = seen->second.toTensorVector();
    json items = json::array();
    for (size_t i = 0; i < list.size(); ++i) {
      const Value* elem = unpack ? unpack->output(i) : nullptr;
      std::string name = elem ? NameFor(elem, elem->debugName()) : Unique(absl::StrCat(out->debugName(), "_", i));
      metas_[name] = list[i];
      names.push_back(name);
      items.push_back({{"name", name}});
    }
    lists_[out] = names;
    return json{{"as_tensors", items}};
  }
  if (!out->hasUses()) return json{{"as_none", true}};
  return CannotWrite(absl::StrCat("%", out->debugName(), " (", out->node()->kind().toQualString(),
                                  ") is not a tensor: an exported program cannot hold it"));
}

absl::Status ProgramWriter::AddNode(Node* n) {
  const c10::FunctionSchema* schema = n->maybeSchema();
  if (!schema || n->kind().ns() != c10::namespaces::aten) {
    return CannotWrite(absl::StrCat("node ", n->kind().toQualString(), " is not an ATen operator"));
  }
  json inputs = json::array();
  for (size_t i = 0; i < schema->arguments().size(); ++i) {
    const c10::Argument& formal = schema->arguments()[i];
    auto arg = ArgFor(n->input(i), formal);
    if (!arg.ok()) return arg.status();
    inputs.push_back({{"name", formal.name()}, {"arg", *arg}, {"kind", formal.kwarg_only() ? 2 : 1}});
  }
  json outputs = json::array();
  for (Value* out : n->outputs()) {
    auto o = OutputFor(out);
    if (!o.ok()) return o.status();
    outputs.push_back(*o);
  }
  std::string overload = schema->overload_name().empty() ? "default" : schema->overload_name();
  std::string op = schema->name().substr(schema->name().find("::") + 2);
  json node = {{"target", absl::StrCat("torch.ops.aten.", op, ".", overload)},
               {"inputs", inputs},
               {"outputs", outputs},
               {"metadata", json::object()},
               {"is_hop_single_tensor_return", nullptr}};
  // A node with one tensor result is named by it (as torch.export names them); one with several,
  // or with a list, gets its own name: FX reads each result through a getitem of that name.
  if (outputs.size() == 1 && outputs[0].contains("as_tensor")) node["name"] = outputs[0]["as_tensor"]["name"];
  else node["name"] = Unique(op);
  nodes_.push_back(node);
  return absl::OkStatus();
}

// The names of a tensor list's elements, where the graph says them: a ListConstruct, a list an
// operator returned, a concatenation (aten::add.t) or a constant slice of such lists.
std::optional<std::vector<std::string>> ProgramWriter::ListElements(Value* list) {
  if (lists_.count(list)) return lists_[list];
  Node* p = list->node();
  if (p->kind() == c10::prim::ListConstruct) {
    std::vector<std::string> elems;
    for (Value* item : p->inputs()) {
      if (!names_.count(item)) return std::nullopt;
      elems.push_back(names_[item]);
    }
    return elems;
  }
  if (p->kind() == c10::aten::add && p->inputs().size() == 2 && p->output()->type()->kind() == c10::TypeKind::ListType) {
    auto a = ListElements(p->input(0)), b = ListElements(p->input(1));
    if (!a || !b) return std::nullopt;
    a->insert(a->end(), b->begin(), b->end());
    return a;
  }
  if (p->kind() == c10::aten::list && p->inputs().size() == 1) return ListElements(p->input(0));  // a copy
  if (p->kind() == c10::aten::slice && p->output()->type()->kind() == c10::TypeKind::ListType) {
    auto elems = ListElements(p->input(0));
    auto start = torch::jit::toIValue(p->input(1)), stop = torch::jit::toIValue(p->input(2)),
         step = torch::jit::toIValue(p->input(3));
    if (!elems || !start || !stop || !step) return std::nullopt;
    const int64_t n = elems->size();
    auto clampi = [n](const c10::IValue& v, int64_t dflt) {
      if (v.isNone()) return dflt;
      int64_t i = v.toInt() < 0 ? v.toInt() + n : v.toInt();
      return std::max<int64_t>(0, std::min<int64_t>(i, n));
    };
    int64_t s0 = clampi(*start, 0), s1 = clampi(*stop, n), st = step->isNone() ? 1 : step->toInt();
    if (st <= 0) return std::nullopt;
    std::vector<std::string> out;
    for (int64_t i = s0; i < s1; i += st) out.push_back((*elems)[i]);
    return out;
  }
  return std::nullopt;
}

// A ListUnpack or a constant-index __getitem__ of a tensor list names the list's elements; the
// other list operators (concatenation, slices) are read where their lists are used.
absl::Status ProgramWriter::AliasListElements(Node* n) {
  auto elems = ListElements(n->input(0));
  if (!elems) {
    return CannotWrite(absl::StrCat("%", n->input(0)->debugName(), " (", n->input(0)->node()->kind().toQualString(),
                                    ") is read as a list of tensors the graph does not spell out"));
  }
  if (n->kind() == c10::prim::ListUnpack) {
    if (elems->size() != n->outputs().size()) return CannotWrite("a list unpacked into another number of values");
    for (size_t i = 0; i < elems->size(); ++i) names_[n->output(i)] = (*elems)[i];
    return absl::OkStatus();
  }
  auto index = torch::jit::toIValue(n->input(1));
  if (!index || !index->isInt()) {
    return CannotWrite(absl::StrCat("%", n->output()->debugName(), " indexes a list with a value that is not constant"));
  }
  int64_t i = index->toInt() < 0 ? index->toInt() + static_cast<int64_t>(elems->size()) : index->toInt();
  if (i < 0 || i >= static_cast<int64_t>(elems->size())) return CannotWrite("a list index out of range");
  names_[n->output()] = (*elems)[i];
  return absl::OkStatus();
}

json ProgramWriter::TensorValues() const {
  json values = json::object();
  for (const auto& [name, t] : metas_) values[name] = pt2::TensorMetaJson(t);
  return values;
}

absl::StatusOr<Pt2Archive> ProgramWriter::Write(Graph& graph, const std::unordered_map<const Value*, c10::IValue>& seen) {
  seen_ = &seen;
  if (absl::Status ok = AddInputs(graph); !ok.ok()) return ok;
  for (Node* n : graph.nodes()) {
    switch (n->kind()) {
      case c10::prim::Constant:
      case c10::prim::GetAttr:
      case c10::prim::ListConstruct:
      case c10::prim::TupleConstruct:
        continue;
      case c10::prim::ListUnpack:
      case c10::aten::__getitem__:
        if (absl::Status ok = AliasListElements(n); !ok.ok()) return ok;
        continue;
      case c10::aten::add:
      case c10::aten::slice:
      case c10::aten::list:
        if (n->output()->type()->kind() == c10::TypeKind::ListType) continue;  // read where used
        if (absl::Status ok = AddNode(n); !ok.ok()) return ok;
        continue;
      default:
        if (absl::Status ok = AddNode(n); !ok.ok()) return ok;
    }
  }
  // Outputs: the return value, or the elements of the returned tuple.
  std::vector<Value*> outs;
  Value* ret = graph.outputs()[0];
  if (ret->node()->kind() == c10::prim::TupleConstruct) outs.assign(ret->node()->inputs().begin(), ret->node()->inputs().end());
  else outs.push_back(ret);
  json program = source_.program;
  json& g = program["graph_module"]["graph"];
  json& sig = program["graph_module"]["signature"];
  if (!sig["output_specs"].is_array() || sig["output_specs"].size() != outs.size()) return CannotWrite("the forward's outputs changed in number");
  json graph_outputs = json::array();
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!names_.count(outs[i])) return CannotWrite(absl::StrCat("output ", i, " is not a tensor the graph computes"));
    json arg = {{"as_tensor", {{"name", names_[outs[i]]}}}};
    graph_outputs.push_back(arg);
    sig["output_specs"][i]["user_output"]["arg"] = arg;
  }
  for (const json& spec : user_specs_) input_specs_.push_back(spec);
  json graph_inputs = json::array();
  for (const json& spec : input_specs_) {
    const json& body = spec.begin().value();
    if (spec.contains("constant_input")) graph_inputs.push_back(body["value"]);
    else graph_inputs.push_back(body["arg"].contains("as_tensor") ? body["arg"] : json{{"as_tensor", body["arg"]}});
  }
  g["inputs"] = graph_inputs;
  g["outputs"] = graph_outputs;
  g["nodes"] = nodes_;
  g["tensor_values"] = TensorValues();
  sig["input_specs"] = input_specs_;
  Pt2Archive archive = source_.archive;
  archive.entries[std::string(kPt2ProgramEntry)] = program.dump();
  archive.entries.erase(std::string(kPt2ParamLayoutEntry));
  if (module_.hasattr(kParamLayoutAttribute)) {
    archive.entries[std::string(kPt2ParamLayoutEntry)] = module_.attr(kParamLayoutAttribute).toStringRef();
  }
  if (absl::Status ok = pt2::WriteWeights(weights_, params_, std::string(kPt2WeightsConfigEntry), "data/weights/", archive); !ok.ok()) return ok;
  if (absl::Status ok = pt2::WriteWeights(constants_, {}, std::string(kPt2ConstantsConfigEntry), "data/constants/", archive); !ok.ok()) return ok;
  return archive;
}

}  // namespace

absl::StatusOr<Pt2Archive> ProgramFromModule(const Model& model, const std::vector<c10::IValue>& inputs) {
  auto source = std::dynamic_pointer_cast<const ExportedProgramSource>(model.format_data);
  if (!model.is_module || !source) return CannotWrite(absl::StrCat("'", model.path, "' was not read from an exported program"));
  std::shared_ptr<Graph> graph = model.graph->copy();
  auto seen = RecordValues(*graph, model.module, inputs);
  if (!seen.ok()) return CannotWrite(std::string(seen.status().message()));
  FoldSizes(graph, *seen);
  seen = RecordValues(*graph, model.module, inputs);  // the folded graph's own values
  if (!seen.ok()) return CannotWrite(std::string(seen.status().message()));
  try {
    return ProgramWriter(model.module, *source).Write(*graph, *seen);
  } catch (const std::exception& e) {
    return CannotWrite(std::string(e.what()).substr(0, 300));
  }
}

}  // namespace sentier
