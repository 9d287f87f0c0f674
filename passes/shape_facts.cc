// shape_facts.cc — records tensor sizes by running a copy of the graph on sample inputs.
//
// The copy gets every top-level tensor value as an extra output and is run by the plain
// interpreter (no optimization, no grad). A second run with each input tensor doubled along dim 0
// tells which dims follow the batch size; those are marked dynamic.
#include "passes/shape_facts.h"

#include <memory>
#include <unordered_map>
#include <vector>

#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "passes/module_state.h"
#include "passes/sample_inputs.h"
#include "passes/torch_error.h"

namespace sentier {

using torch::jit::Graph;
using torch::jit::Value;

void ShapeFacts::Set(const Value* v, TensorFact fact) { facts_[v->unique()] = std::move(fact); }

const TensorFact* ShapeFacts::Find(const Value* v) const {
  auto it = facts_.find(v->unique());
  return it == facts_.end() ? nullptr : &it->second;
}

void ShapeFacts::Propagate(const Value* from, const Value* to) {
  auto it = facts_.find(from->unique());
  if (it == facts_.end() || facts_.contains(to->unique())) return;
  TensorFact copy = it->second;  // copied first: inserting may rehash and move `it`
  facts_[to->unique()] = std::move(copy);
}

c10::optional<int64_t> ShapeFacts::StaticRank(const Value* v) const {
  if (const TensorFact* f = Find(v)) return static_cast<int64_t>(f->sizes.size());
  auto t = v->type()->cast<c10::TensorType>();
  if (t && t->dim()) return static_cast<int64_t>(*t->dim());
  return c10::nullopt;
}

c10::optional<int64_t> ShapeFacts::StaticSize(const Value* v, int64_t dim) const {
  if (const TensorFact* f = Find(v)) {
    int64_t r = static_cast<int64_t>(f->sizes.size());
    if (dim < 0) dim += r;
    if (dim < 0 || dim >= r || f->dynamic[dim]) return c10::nullopt;
    return f->sizes[dim];
  }
  auto t = v->type()->cast<c10::TensorType>();
  if (!t) return c10::nullopt;
  auto sizes = t->sizes().concrete_sizes();
  if (!sizes) return c10::nullopt;
  int64_t r = static_cast<int64_t>(sizes->size());
  if (dim < 0) dim += r;
  // Sizes written in IR types are taken as static except dim 0, the batch dim by convention.
  if (dim <= 0 || dim >= r) return c10::nullopt;
  return (*sizes)[dim];
}

namespace {

// A copy of `graph` with all its top-level tensor values (`probes`) as extra outputs, compiled
// once for the interpreter, run on the samples and again at twice the batch.
class ProbedGraph {
 public:
  ProbedGraph(const std::shared_ptr<Graph>& graph, const std::vector<Value*>& probes)
      : copy_(graph->copy()), probes_(probes.size()) {
    // Graph::copy clones inputs and nodes in order, so the two graphs walk in lockstep.
    std::unordered_map<const Value*, Value*> map;
    for (size_t k = 0; k < graph->inputs().size(); ++k) map[graph->inputs()[k]] = copy_->inputs()[k];
    auto it_a = graph->nodes().begin();
    auto it_b = copy_->nodes().begin();
    for (; it_a != graph->nodes().end(); ++it_a, ++it_b) {
      for (size_t k = 0; k < it_a->outputs().size(); ++k) map[it_a->outputs()[k]] = it_b->outputs()[k];
    }
    original_outputs_ = copy_->outputs().size();
    for (Value* p : probes) copy_->registerOutput(map.at(p));
  }

  // The probes' values on `inputs`, in the order of `probes`.
  absl::StatusOr<std::vector<c10::IValue>> Run(const std::vector<c10::IValue>& inputs) {
    if (inputs.size() != copy_->inputs().size()) {
      return absl::InvalidArgumentError(absl::StrCat("the graph takes ", copy_->inputs().size(),
                                                     " inputs, the samples give ", inputs.size()));
    }
    try {
      c10::NoGradGuard no_grad;
      ModuleStateGuard keep(inputs.empty() ? c10::IValue() : inputs[0]);  // a measurement, not training
      if (!code_) code_ = std::make_unique<torch::jit::Code>(copy_, "sentier_shape_facts");
      torch::jit::InterpreterState state(*code_);
      std::vector<c10::IValue> stack = inputs;
      state.run(stack);
      if (stack.size() != original_outputs_ + probes_) {
        return absl::InternalError("unexpected number of outputs while recording shape facts");
      }
      return std::vector<c10::IValue>(stack.begin() + original_outputs_, stack.end());
    } catch (const std::exception& e) {
      std::string what = e.what();
      return absl::InvalidArgumentError(
          absl::StrCat("running the graph on the sample inputs failed: ", TorchErrorMessage(what)));
    }
  }

 private:
  std::shared_ptr<Graph> copy_;
  size_t probes_;
  size_t original_outputs_ = 0;
  std::unique_ptr<torch::jit::Code> code_;
};

// A module tensor (a parameter or buffer read by prim::GetAttr) or a constant: its sizes do not
// follow the inputs, whatever the second run did.
bool FixedByTheModel(const Value* v) {
  return v->node()->kind() == c10::prim::GetAttr || v->node()->kind() == c10::prim::Constant;
}

}  // namespace

absl::StatusOr<ShapeFacts> RecordShapeFacts(const std::shared_ptr<Graph>& graph,
                                            const std::vector<c10::IValue>& inputs,
                                            const std::vector<bool>& fixed_inputs) {
  std::vector<Value*> probes;
  for (Value* v : graph->inputs()) {
    if (v->type()->kind() == c10::TypeKind::TensorType) probes.push_back(v);
  }
  for (torch::jit::Node* n : graph->nodes()) {
    for (Value* v : n->outputs()) {
      if (v->type()->kind() == c10::TypeKind::TensorType) probes.push_back(v);
    }
  }
  ProbedGraph probed(graph, probes);
  auto first = probed.Run(inputs);
  if (!first.ok()) return first.status();
  // Second run at twice the batch size (offsets of EmbeddingBag inputs continue, see
  // sample_inputs.h); inputs that do not follow the batch keep their size.
  std::vector<c10::IValue> doubled = DoubleBatch(inputs);
  for (size_t i = 0; i < inputs.size() && i < fixed_inputs.size(); ++i) {
    if (fixed_inputs[i]) doubled[i] = inputs[i];
  }
  auto second = probed.Run(doubled);
  ShapeFacts facts;
  for (size_t k = 0; k < probes.size(); ++k) {
    const c10::IValue& a = (*first)[k];
    if (!a.isTensor()) continue;
    const at::Tensor& t = a.toTensor();
    TensorFact f;
    f.sizes = t.sizes().vec();
    f.dtype = t.scalar_type();
    f.device = t.device();
    f.dynamic.assign(f.sizes.size(), false);
    if (second.ok() && (*second)[k].isTensor()) {
      const at::Tensor& t2 = (*second)[k].toTensor();
      if (t2.dim() != t.dim()) {
        f.dynamic.assign(f.sizes.size(), true);
      } else {
        for (int64_t d = 0; d < t.dim(); ++d) f.dynamic[d] = t.size(d) != t2.size(d);
        f.sizes_at_double_batch = t2.sizes().vec();
      }
    } else if (!f.sizes.empty() && !FixedByTheModel(probes[k])) {
      f.dynamic[0] = true;
    }
    facts.Set(probes[k], std::move(f));
  }
  return facts;
}

}  // namespace sentier
