// graph_runner.cc — interpreter runs and numeric comparison of graphs (see the header).
#include "runtime/graph_runner.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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
  std::vector<bool> params = ParamInputs(graph);
  size_t index = 0;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<c10::IValue> out;
  for (const torch::jit::Value* v : graph.inputs()) {
    auto t = v->type()->cast<c10::TensorType>();
    auto sizes = t ? t->sizes().concrete_sizes() : c10::nullopt;
    if (!t || !sizes || !t->scalarType()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "graph input %", v->debugName(), " needs a complete tensor type such as Float(4, 12)"));
    }
    std::vector<int64_t> shape = *sizes;
    if (!shape.empty() && !params[index]) shape[0] *= batch_scale;
    ++index;
    c10::ScalarType st = *t->scalarType();
    auto opts = at::TensorOptions().dtype(st);
    if (c10::isFloatingType(st)) {
      out.emplace_back(at::randn(shape, gen, opts));
    } else if (st == c10::ScalarType::Bool) {
      out.emplace_back(at::randint(0, 2, shape, gen, at::TensorOptions().dtype(at::kLong)).to(at::kBool));
    } else {
      out.emplace_back(at::randint(0, 4, shape, gen, opts));
    }
  }
  return out;
}

namespace {

std::vector<c10::IValue> CloneInputs(const std::vector<c10::IValue>& inputs, bool requires_grad) {
  std::vector<c10::IValue> out;
  for (const c10::IValue& iv : inputs) {
    if (iv.isTensor()) {
      at::Tensor t = iv.toTensor().detach().clone();
      if (requires_grad && c10::isFloatingType(t.scalar_type())) t.requires_grad_(true);
      out.emplace_back(t);
    } else {
      out.push_back(iv);
    }
  }
  return out;
}

void CollectTensors(const c10::IValue& iv, std::vector<at::Tensor>* out) {
  if (iv.isTensor()) {
    out->push_back(iv.toTensor());
  } else if (iv.isTuple()) {
    for (const c10::IValue& e : iv.toTupleRef().elements()) CollectTensors(e, out);
  } else if (iv.isList()) {
    for (const c10::IValue& e : iv.toListRef()) CollectTensors(e, out);
  }
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
        absl::StrCat("running the graph failed: ", what.substr(0, what.find('\n'))));
  }
}

namespace {
thread_local int64_t aten_op_count = 0;
thread_local int64_t op_depth = 0;

// Counts top-level aten ops only: ops that an op calls internally (empty, as_strided, the addmm
// inside linear) are not separate launches of the graph.
std::unique_ptr<at::ObserverContext> CountOp(const at::RecordFunction& fn) {
  if (op_depth == 0 && std::strncmp(fn.name(), "aten::", 6) == 0) ++aten_op_count;
  ++op_depth;
  return nullptr;
}

void EndOp(const at::RecordFunction&, at::ObserverContext*) { --op_depth; }
}  // namespace

absl::StatusOr<int64_t> CountAtenOps(const std::shared_ptr<Graph>& graph,
                                     const std::vector<c10::IValue>& inputs) {
  c10::NoGradGuard no_grad;
  std::vector<c10::IValue> cloned = CloneInputs(inputs, false);
  // Warm-up run first, so one-time work is not counted.
  auto warm = RunGraph(graph, cloned);
  if (!warm.ok()) return warm.status();
  cloned = CloneInputs(inputs, false);
  aten_op_count = 0;
  op_depth = 0;
  at::CallbackHandle handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(CountOp, EndOp).scopes({at::RecordScope::FUNCTION}));
  auto run = RunGraph(graph, cloned);
  at::removeCallback(handle);
  if (!run.ok()) return run.status();
  return aten_op_count;
}

absl::Status CompareIValues(const c10::IValue& a, const c10::IValue& b, const std::string& where,
                            const CompareOptions& options) {
  if (a.isTensor() != b.isTensor()) {
    return absl::FailedPreconditionError(absl::StrCat(where, ": tensor vs non-tensor"));
  }
  if (a.isTensor()) {
    at::Tensor x = a.toTensor().detach();
    at::Tensor y = b.toTensor().detach();
    if (x.sizes() != y.sizes()) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": shape ", c10::str(x.sizes()), " vs reference ", c10::str(y.sizes())));
    }
    if (x.scalar_type() != y.scalar_type()) {
      return absl::FailedPreconditionError(absl::StrCat(where, ": dtype differs"));
    }
    if (!c10::isFloatingType(x.scalar_type())) {
      if (!at::equal(x, y)) return absl::FailedPreconditionError(absl::StrCat(where, ": values differ"));
      return absl::OkStatus();
    }
    if (x.numel() == 0) return absl::OkStatus();
    if (!at::allclose(x, y, options.rtol, options.atol, /*equal_nan=*/true)) {
      double err = (x.to(at::kDouble) - y.to(at::kDouble)).abs().max().item<double>();
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: max abs error %.3g exceeds atol %.1g + rtol %.1g * |ref|", where, err,
          options.atol, options.rtol));
    }
    return absl::OkStatus();
  }
  if (a.isTuple() || a.isList()) {
    std::vector<c10::IValue> xs, ys;
    if (a.isTuple()) {
      for (const auto& e : a.toTupleRef().elements()) xs.push_back(e);
    } else {
      for (const auto& e : a.toListRef()) xs.push_back(e);
    }
    if (b.isTuple()) {
      for (const auto& e : b.toTupleRef().elements()) ys.push_back(e);
    } else if (b.isList()) {
      for (const auto& e : b.toListRef()) ys.push_back(e);
    }
    if (xs.size() != ys.size()) {
      return absl::FailedPreconditionError(absl::StrCat(where, ": ", xs.size(), " elements vs ", ys.size()));
    }
    for (size_t k = 0; k < xs.size(); ++k) {
      absl::Status st = CompareIValues(xs[k], ys[k], absl::StrCat(where, "[", k, "]"), options);
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }
  if (!(a == b)) return absl::FailedPreconditionError(absl::StrCat(where, ": values differ"));
  return absl::OkStatus();
}

bool AvoidOneDnnGeluBackwardDefect() {
  static const bool turned_off = [] {
    c10::AutoGradMode no_grad(false);
    at::Tensor x = at::linspace(-3.0, 3.0, 64, at::kFloat).reshape({8, 8});
    at::Tensor grad = at::linspace(0.5, 1.5, 64, at::kFloat).reshape({8, 8}).t();  // non-contiguous
    at::Tensor expected = at::gelu_backward(grad.contiguous(), x, "none");
    if (at::allclose(at::gelu_backward(grad, x, "none"), expected, 1e-5, 1e-6)) return false;
    at::globalContext().setUserEnabledMkldnn(false);
    return true;
  }();
  return turned_off;
}

absl::Status CompareGraphs(const std::shared_ptr<Graph>& reference,
                           const std::shared_ptr<Graph>& candidate,
                           const std::vector<c10::IValue>& inputs, const CompareOptions& options) {
  AvoidOneDnnGeluBackwardDefect();
  std::vector<c10::IValue> ref_in = CloneInputs(inputs, options.check_grads);
  std::vector<c10::IValue> cand_in = CloneInputs(inputs, options.check_grads);
  auto ref_out = RunGraph(reference, ref_in);
  if (!ref_out.ok()) return ref_out.status();
  auto cand_out = RunGraph(candidate, cand_in);
  if (!cand_out.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the rewritten graph fails where the original runs: ", cand_out.status().message()));
  }
  if (ref_out->size() != cand_out->size()) {
    return absl::FailedPreconditionError("different number of outputs");
  }
  for (size_t k = 0; k < ref_out->size(); ++k) {
    absl::Status st =
        CompareIValues((*cand_out)[k], (*ref_out)[k], absl::StrCat("output ", k), options);
    if (!st.ok()) return st;
  }
  if (!options.check_grads) return absl::OkStatus();
  // Gradients of every floating input under one fixed random projection of the outputs.
  auto backward = [&](const std::vector<c10::IValue>& outs, const std::vector<c10::IValue>& ins)
      -> std::vector<at::Tensor> {
    std::vector<at::Tensor> ts;
    for (const c10::IValue& o : outs) CollectTensors(o, &ts);
    at::Generator gen = at::detail::createCPUGenerator(options.seed);
    at::Tensor loss;
    for (const at::Tensor& t : ts) {
      if (!t.requires_grad() || !c10::isFloatingType(t.scalar_type())) continue;
      at::Tensor proj = at::randn(t.sizes(), gen, at::TensorOptions().dtype(t.scalar_type()));
      at::Tensor term = (t * proj).sum();
      loss = loss.defined() ? loss + term : term;
    }
    std::vector<at::Tensor> grads;
    std::vector<at::Tensor> leaves;
    for (const c10::IValue& iv : ins) {
      if (iv.isTensor() && iv.toTensor().requires_grad()) leaves.push_back(iv.toTensor());
    }
    if (!loss.defined() || leaves.empty()) return grads;
    grads = torch::autograd::grad({loss}, leaves, {}, c10::nullopt, false, /*allow_unused=*/true);
    for (size_t k = 0; k < grads.size(); ++k) {
      if (!grads[k].defined()) grads[k] = at::zeros_like(leaves[k]);
    }
    return grads;
  };
  try {
    std::vector<at::Tensor> gr = backward(*ref_out, ref_in);
    std::vector<at::Tensor> gc = backward(*cand_out, cand_in);
    if (gr.size() != gc.size()) return absl::FailedPreconditionError("different gradient sets");
    for (size_t k = 0; k < gr.size(); ++k) {
      absl::Status st = CompareIValues(gc[k], gr[k], absl::StrCat("gradient of input ", k), options);
      if (!st.ok()) return st;
    }
  } catch (const std::exception& e) {
    std::string what = e.what();
    return absl::FailedPreconditionError(
        absl::StrCat("backward failed: ", what.substr(0, what.find('\n'))));
  }
  return absl::OkStatus();
}

}  // namespace sentier
