// graph_runner.h — runs TorchScript graphs and compares two of them on numbers.
//
// Used by the rule tests and by the model tests: original and rewritten graphs run on the same
// random inputs; outputs, and gradients of every floating input under a fixed random projection
// of the outputs, must agree within float32 tolerance (|a - b| <= atol + rtol * |b|).
//
//   auto inputs = RandomInputsFor(*graph, /*seed=*/1, /*batch_scale=*/1);
//   auto diff = CompareGraphs(original, rewritten, *inputs, /*check_grads=*/true);
//   if (!diff.ok()) ...  // diff.status().message() names the output and the error
#ifndef SENTIER_RUNTIME_GRAPH_RUNNER_H_
#define SENTIER_RUNTIME_GRAPH_RUNNER_H_

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "absl/status/statusor.h"

#include "passes/graph_fwd.h"

namespace sentier {

// RandomInputsFor: one tensor per graph input from its complete type (`Float(4, 12)`, `Long(8)`),
// normal floats and small non-negative ints; dim 0 is multiplied by `batch_scale`, except for
// inputs named `param_*` (parameters passed as inputs in test graphs: they have no batch dim).
// IsParamInput tells which those are.
std::vector<bool> ParamInputs(const torch::jit::Graph& graph);
absl::StatusOr<std::vector<c10::IValue>> RandomInputsFor(const torch::jit::Graph& graph,
                                                          uint64_t seed, int64_t batch_scale);

// RunGraph: runs `graph` on `inputs` with the interpreter; returns its outputs.
absl::StatusOr<std::vector<c10::IValue>> RunGraph(const std::shared_ptr<torch::jit::Graph>& graph,
                                                  const std::vector<c10::IValue>& inputs);

struct CompareOptions {
  double rtol = 1.3e-6;
  double atol = 1e-5;
  bool check_grads = true;
  uint64_t seed = 7;
};

// CompareGraphs: OK when outputs (and gradients) agree; FailedPrecondition naming the first
// output or gradient that differs, with max abs error; other errors when a graph fails to run.
absl::Status CompareGraphs(const std::shared_ptr<torch::jit::Graph>& reference,
                           const std::shared_ptr<torch::jit::Graph>& candidate,
                           const std::vector<c10::IValue>& inputs, const CompareOptions& options);

// CountAtenOps: top-level aten operators executed by one run of `graph` on `inputs` (calls an
// operator makes internally are not counted), with RecordFunction callbacks: the CPU proxy for
// GPU kernel launches.
// LibTorch 1.13.1's oneDNN path of aten::gelu_backward (CPU, approximate="none") reads a
// non-contiguous grad_output as if it were contiguous, so gelu after a permute or transpose gets
// garbage gradients (uninitialized memory, different on every run) in the original model and
// the optimized one alike. The first call probes for that defect and, where it shows, turns
// oneDNN off for this process; later calls return the first answer. Comparisons call it
// (CompareGraphs, EquivalenceChecker) so that they judge rewrites, not this defect. Returns
// true when oneDNN was turned off.
bool AvoidOneDnnGeluBackwardDefect();

absl::StatusOr<int64_t> CountAtenOps(const std::shared_ptr<torch::jit::Graph>& graph,
                                     const std::vector<c10::IValue>& inputs);

// CompareIValues: structural comparison of nested tuples/lists of tensors.
absl::Status CompareIValues(const c10::IValue& a, const c10::IValue& b, const std::string& where,
                            const CompareOptions& options);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_GRAPH_RUNNER_H_
