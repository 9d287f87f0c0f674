// graph_runner.cc — interpreter runs and numeric comparison of graphs (see the header).
#include "runtime/graph_runner.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <cstring>
#include <functional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/str_format.h"
#include "passes/module_state.h"
#include "passes/sample_inputs.h"
#include "passes/torch_error.h"

namespace sentier {

using torch::jit::Graph;

namespace {

// Per graph input: whether its name starts with `prefix`.
std::vector<bool> InputsNamed(const Graph& graph, absl::string_view prefix) {
  std::vector<bool> out;
  for (const torch::jit::Value* v : graph.inputs()) out.push_back(absl::StartsWith(v->debugName(), prefix));
  return out;
}

}  // namespace

std::vector<bool> ParamInputs(const Graph& graph) { return InputsNamed(graph, "param_"); }

std::vector<bool> BufferInputs(const Graph& graph) { return InputsNamed(graph, "param_buffer_"); }

absl::StatusOr<std::vector<c10::IValue>> RandomInputsFor(const Graph& graph, uint64_t seed,
                                                          int64_t batch_scale) {
  // A template from the complete types — floats of mean 0 and spread 1, integers whose every
  // column spans 0..3 (rows alternate 0 and 3), bools — from which the project's one
  // random-input generator (RandomInputsLike) draws.
  std::vector<c10::IValue> templ;
  for (const torch::jit::Value* v : graph.inputs()) {
    auto t = v->type()->cast<c10::TensorType>();
    auto sizes = t ? t->sizes().concrete_sizes() : c10::nullopt;
    if (!t || !sizes || !t->scalarType()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "graph input %", v->debugName(), " needs a complete tensor type such as Float(4, 12)"));
    }
    c10::ScalarType st = *t->scalarType();
    int64_t n = 1;
    for (int64_t d : *sizes) n *= d;
    at::Tensor x;
    if (c10::isFloatingType(st)) {
      x = (at::arange(n, at::kDouble).remainder(2) * 2 - 1).to(st);  // mean 0, spread 1
    } else if (st == c10::ScalarType::Bool) {
      x = at::arange(n, at::kLong).remainder(2).to(at::kBool);
    } else if (!sizes->empty()) {
      std::vector<int64_t> column(sizes->size(), 1);
      column[0] = (*sizes)[0];
      x = (at::arange((*sizes)[0], at::kLong).remainder(2) * 3).view(column).expand(*sizes).to(st);
    } else {
      x = at::zeros({}, at::TensorOptions().dtype(st)) + 3;
    }
    templ.emplace_back(x.reshape(*sizes).contiguous());
  }
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return RandomInputsLike(templ, gen, batch_scale, ParamInputs(graph));
}

namespace {

// Fresh copies of the input tensors (in any structure), so that a run that writes to its inputs
// leaves the caller's alone.
std::vector<c10::IValue> CloneInputs(const std::vector<c10::IValue>& inputs) {
  return MapTensors(inputs, [](const at::Tensor& t) { return t.detach().clone(); });
}

}  // namespace

absl::StatusOr<std::vector<c10::IValue>> RunGraph(const std::shared_ptr<Graph>& graph,
                                                  const std::vector<c10::IValue>& inputs) {
  try {
    torch::jit::Code code(graph, "sentier_run");
    torch::jit::InterpreterState state(code);
    std::vector<c10::IValue> stack = inputs;
    state.run(stack);
    return stack;
  } catch (const std::exception& e) {
    std::string what = e.what();
    return absl::InvalidArgumentError(
        absl::StrCat("running the graph failed: ", TorchErrorMessage(what)));
  }
}

namespace {
thread_local int64_t aten_op_count = 0;
thread_local int64_t launch_count = 0;
// One entry per open record (autograd frames excepted): whether it is an aten op, and whether an
// op that launches ran inside it.
struct OpenRecord {
  bool aten = false;
  bool launched_inside = false;
  bool opaque = false;
};
thread_local std::vector<OpenRecord> open_records;
thread_local int64_t open_opaque = 0;  // opaque ops open (see CountsAsOneLaunch)

// The autograd engine records each backward node it runs under this name, around the node's
// own aten ops: it is a frame, not an op, so the ops inside count as top-level.
bool IsAutogradFrame(const at::RecordFunction& fn) {
  return std::strncmp(fn.name(), "autograd::engine::evaluate_function", 35) == 0;
}

// Aten ops that launch nothing on a GPU when nothing inside them does: views and reshapes of
// metadata, allocations without a fill, shape and type queries, conjugation flags of real tensors,
// and the conversions that returned their input (contiguous, to, type_as on a tensor that already
// was so; atleast_1d/2d/3d, which aten::hstack calls on each input, on one that already has the
// rank).
bool LaunchesNothing(absl::string_view op) {
  static const auto* const kNone = new absl::flat_hash_set<std::string>{
      "alias", "as_strided", "as_strided_", "atleast_1d", "atleast_2d", "atleast_3d",
      "broadcast_to", "chunk", "contiguous", "detach",
      "detach_", "diagonal", "dim", "empty", "empty_like", "empty_strided", "expand", "expand_as",
      "flatten", "is_contiguous", "is_nonzero", "lift_fresh", "movedim", "moveaxis", "narrow",
      "new_empty", "new_empty_strided", "numel", "permute", "requires_grad_", "reshape",
      "reshape_as", "resize_", "result_type", "select", "set_", "size", "slice", "split",
      "split_with_sizes", "squeeze", "squeeze_", "stride", "t", "to", "transpose", "transpose_",
      "type_as", "unbind", "unflatten", "unfold", "unsafe_split", "unsafe_split_with_sizes",
      "unsqueeze", "unsqueeze_", "view", "view_as", "_local_scalar_dense", "_reshape_alias",
      "_unsafe_view", "item", "_version", "retain_grad", "_shape_as_tensor", "resolve_conj",
      "resolve_neg", "conj", "_conj", "_neg_view", "_resize_output_", "is_same_size", "sym_size",
      "sym_numel", "sym_stride", "lift", "_has_compatible_shallow_copy_type"};
  return kNone->contains(op);
}

// Aten ops counted as one launch whatever they call: the embedding lookups and their backward,
// whose CPU implementations (sorts, index_add, per-bag loops) say nothing of their CUDA kernels,
// and differ between the per-table and the batched forms a rewrite compares.
bool CountsAsOneLaunch(absl::string_view op) {
  static const auto* const kOpaque = new absl::flat_hash_set<std::string>{
      "embedding", "embedding_bag", "_embedding_bag", "_embedding_bag_forward_only",
      "embedding_backward", "embedding_dense_backward", "embedding_sparse_backward",
      "_embedding_bag_backward", "_embedding_bag_dense_backward", "_embedding_bag_sparse_backward",
      "_embedding_bag_per_sample_weights_backward"};
  return kOpaque->contains(op);
}

std::unique_ptr<at::ObserverContext> CountOp(const at::RecordFunction& fn) {
  if (IsAutogradFrame(fn)) return nullptr;
  const bool aten = std::strncmp(fn.name(), "aten::", 6) == 0;
  if (aten && open_records.empty()) ++aten_op_count;  // top-level: inside no other record
  const bool opaque = aten && open_opaque == 0 && CountsAsOneLaunch(absl::string_view(fn.name()).substr(6));
  if (opaque) ++open_opaque;
  open_records.push_back({aten, false, opaque});
  return nullptr;
}

// An aten op is one launch where no op inside it launched (addmm, whose only calls are views and
// conjugation flags; not linear, inside which addmm launched) and it is not one that launches
// nothing (a view).
void EndOp(const at::RecordFunction& fn, at::ObserverContext*) {
  if (IsAutogradFrame(fn) || open_records.empty()) return;
  const OpenRecord done = open_records.back();
  open_records.pop_back();
  if (done.opaque) {
    --open_opaque;
    ++launch_count;
    if (!open_records.empty()) open_records.back().launched_inside = true;
    return;
  }
  if (open_opaque > 0) return;  // inside an op counted whole
  bool launched = done.launched_inside;
  if (!launched && done.aten && !LaunchesNothing(absl::string_view(fn.name()).substr(6))) {
    ++launch_count;
    launched = true;
  }
  if (launched && !open_records.empty()) open_records.back().launched_inside = true;
}

// CountedRun: `run` once as a warm-up (one-time work is not counted), then again with the aten
// ops counted; the module in inputs[0] keeps its state (BatchNorm's running statistics, SetAttr).
absl::StatusOr<OpTally> CountedRun(const std::vector<c10::IValue>& inputs,
                                   const std::function<absl::Status()>& run) {
  ModuleStateGuard keep(inputs.empty() ? c10::IValue() : inputs[0]);
  absl::Status warm = run();
  if (!warm.ok()) return warm;
  aten_op_count = 0;
  launch_count = 0;
  open_records.clear();
  open_opaque = 0;
  at::CallbackHandle handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(CountOp, EndOp).scopes({at::RecordScope::FUNCTION}));
  absl::Status counted = run();
  at::removeCallback(handle);
  if (!counted.ok()) return counted;
  return OpTally{aten_op_count, launch_count};
}

}  // namespace

absl::StatusOr<int64_t> CountAtenOps(const std::shared_ptr<Graph>& graph,
                                     const std::vector<c10::IValue>& inputs) {
  auto tally = TallyOps(graph, inputs);
  if (!tally.ok()) return tally.status();
  return tally->aten_ops;
}

absl::StatusOr<OpTally> TallyOps(const std::shared_ptr<Graph>& graph,
                                 const std::vector<c10::IValue>& inputs) {
  c10::NoGradGuard no_grad;
  // Fresh inputs for each run, copied before the count.
  std::vector<std::vector<c10::IValue>> copies = {CloneInputs(inputs), CloneInputs(inputs)};
  size_t next = 0;
  return CountedRun(inputs, [&]() -> absl::Status {
    return RunGraph(graph, copies[next++]).status();
  });
}

namespace {

// A training step's inputs: copies of the caller's, floating ones requiring grad, and what the
// step differentiates to (the module's parameters and buffers that require grad, and those
// copies). Made before the count, so that copying is not counted.
struct StepInputs {
  std::vector<c10::IValue> values;
  std::vector<at::Tensor> leaves;
};

StepInputs PrepareStep(const std::vector<c10::IValue>& inputs) {
  StepInputs s;
  if (!inputs.empty() && inputs[0].isObject()) {
    torch::jit::Module m(inputs[0].toObject());
    for (const at::Tensor& p : m.parameters()) {
      if (p.requires_grad()) s.leaves.push_back(p);
    }
    for (const at::Tensor& b : m.buffers()) {
      if (b.requires_grad()) s.leaves.push_back(b);
    }
  }
  s.values = MapTensors(inputs, [&](const at::Tensor& t) {
    at::Tensor c = t.detach().clone();
    if (c10::isFloatingType(c.scalar_type())) {
      c.requires_grad_(true);
      s.leaves.push_back(c);
    }
    return c;
  });
  return s;
}

// One training step of `graph` (see CountAtenOpsPerTrainingStep).
absl::Status TrainingStep(const std::shared_ptr<Graph>& graph, const StepInputs& s) {
  auto out = RunGraph(graph, s.values);
  if (!out.ok()) return out.status();
  at::Tensor loss;
  for (const auto& [path, t] : FlattenTensors(*out, "output")) {
    if (!c10::isFloatingType(t.scalar_type()) || !t.requires_grad()) continue;
    loss = loss.defined() ? loss + t.sum() : t.sum();
  }
  if (!loss.defined() || s.leaves.empty()) return absl::OkStatus();
  try {
    torch::autograd::grad({loss}, s.leaves, {}, c10::nullopt, false, /*allow_unused=*/true);
  } catch (const std::exception& e) {
    std::string what = e.what();
    return absl::InvalidArgumentError(absl::StrCat("the backward failed: ", TorchErrorMessage(what)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> CountAtenOpsPerTrainingStep(const std::shared_ptr<Graph>& graph,
                                                    const std::vector<c10::IValue>& inputs) {
  auto tally = TallyOpsPerTrainingStep(graph, inputs);
  if (!tally.ok()) return tally.status();
  return tally->aten_ops;
}

absl::StatusOr<OpTally> TallyOpsPerTrainingStep(const std::shared_ptr<Graph>& graph,
                                                const std::vector<c10::IValue>& inputs) {
  c10::AutoGradMode grad(true);
  std::vector<StepInputs> steps = {PrepareStep(inputs), PrepareStep(inputs)};
  size_t next = 0;
  return CountedRun(inputs, [&] { return TrainingStep(graph, steps[next++]); });
}

}  // namespace sentier
