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

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "passes/module_state.h"
#include "passes/sample_inputs.h"
#include "passes/torch_error.h"

namespace sentier {

using torch::jit::Graph;

std::vector<bool> ParamInputs(const Graph& graph) {
  std::vector<bool> out;
  for (const torch::jit::Value* v : graph.inputs()) {
    out.push_back(v->debugName().rfind("param_", 0) == 0);
  }
  return out;
}

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
thread_local int64_t op_depth = 0;

// The autograd engine records each backward node it runs under this name, around the node's
// own aten ops: it is a frame, not an op, so the ops inside count as top-level.
bool IsAutogradFrame(const at::RecordFunction& fn) {
  return std::strncmp(fn.name(), "autograd::engine::evaluate_function", 35) == 0;
}

// Counts top-level aten ops only: ops that an op calls internally (empty, as_strided, the addmm
// inside linear) are not separate launches of the graph.
std::unique_ptr<at::ObserverContext> CountOp(const at::RecordFunction& fn) {
  if (IsAutogradFrame(fn)) return nullptr;
  if (op_depth == 0 && std::strncmp(fn.name(), "aten::", 6) == 0) ++aten_op_count;
  ++op_depth;
  return nullptr;
}

void EndOp(const at::RecordFunction& fn, at::ObserverContext*) {
  if (!IsAutogradFrame(fn)) --op_depth;
}

// CountedRun: `run` once as a warm-up (one-time work is not counted), then again with the aten
// ops counted; the module in inputs[0] keeps its state (BatchNorm's running statistics, SetAttr).
absl::StatusOr<int64_t> CountedRun(const std::vector<c10::IValue>& inputs,
                                   const std::function<absl::Status()>& run) {
  ModuleStateGuard keep(inputs.empty() ? c10::IValue() : inputs[0]);
  absl::Status warm = run();
  if (!warm.ok()) return warm;
  aten_op_count = 0;
  op_depth = 0;
  at::CallbackHandle handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(CountOp, EndOp).scopes({at::RecordScope::FUNCTION}));
  absl::Status counted = run();
  at::removeCallback(handle);
  if (!counted.ok()) return counted;
  return aten_op_count;
}

}  // namespace

absl::StatusOr<int64_t> CountAtenOps(const std::shared_ptr<Graph>& graph,
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
  c10::AutoGradMode grad(true);
  std::vector<StepInputs> steps = {PrepareStep(inputs), PrepareStep(inputs)};
  size_t next = 0;
  return CountedRun(inputs, [&] { return TrainingStep(graph, steps[next++]); });
}

}  // namespace sentier
