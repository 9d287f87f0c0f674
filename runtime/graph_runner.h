// graph_runner.h — runs TorchScript graphs: random inputs from a graph's types, one run with the
// interpreter, and the count of aten ops one run executes. Whether two graphs or models compute
// the same is EquivalenceChecker's to say (runtime/equivalence_checker.h), nobody else's.
//
//   auto inputs = RandomInputsFor(*graph, /*seed=*/1, /*batch_scale=*/1);
//   auto outputs = RunGraph(graph, *inputs);
//   auto ops = CountAtenOps(graph, *inputs);
//   auto step_ops = CountAtenOpsPerTrainingStep(graph, *inputs);
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
// normal floats and small non-negative ints (0..3), drawn by RandomInputsLike
// (passes/sample_inputs.h) from a template of that type; dim 0 is multiplied by `batch_scale`,
// except for inputs named `param_*` (parameters passed as inputs in test graphs: they have no
// batch dim). ParamInputs tells which those are; BufferInputs which of them, named
// `param_buffer_*`, are buffers (a batch norm's running statistics: no gradient is taken of them).
std::vector<bool> ParamInputs(const torch::jit::Graph& graph);
std::vector<bool> BufferInputs(const torch::jit::Graph& graph);
absl::StatusOr<std::vector<c10::IValue>> RandomInputsFor(const torch::jit::Graph& graph,
                                                          uint64_t seed, int64_t batch_scale);

// RunGraph: runs `graph` on `inputs` with the interpreter; returns its outputs.
absl::StatusOr<std::vector<c10::IValue>> RunGraph(const std::shared_ptr<torch::jit::Graph>& graph,
                                                  const std::vector<c10::IValue>& inputs);

// OpTally: what one run executed, counted with RecordFunction callbacks.
//  - aten_ops: top-level aten operators (calls an operator makes internally are not counted),
//    views included: what the graph asks for.
//  - launches: the CPU proxy for GPU kernel launches: the aten operators inside which no other
//    operator launched (the addmm inside linear, the fill and the copy inside a slice's
//    backward), less those that launch nothing on a GPU (views, allocations, shape queries,
//    conjugation flags, conversions that return their input); an embedding lookup or its
//    backward is one launch whatever its CPU implementation calls. A view costs 0 here and 1 in
//    aten_ops; a view's backward (a zero fill and a copy into it) 2 here and 1 there. On CUDA the
//    executor's fuser merges more (pointwise chains and their concatenation), which neither
//    count sees.
struct OpTally {
  int64_t aten_ops = 0;
  int64_t launches = 0;
};

// TallyOps: one run of `graph` on `inputs`, after one uncounted warm-up run.
absl::StatusOr<OpTally> TallyOps(const std::shared_ptr<torch::jit::Graph>& graph,
                                 const std::vector<c10::IValue>& inputs);

// TallyOpsPerTrainingStep: the same over a training step (CountAtenOpsPerTrainingStep).
absl::StatusOr<OpTally> TallyOpsPerTrainingStep(const std::shared_ptr<torch::jit::Graph>& graph,
                                                const std::vector<c10::IValue>& inputs);

// CountAtenOps: TallyOps' aten_ops: top-level aten operators executed by one run of `graph` on
// `inputs`.
absl::StatusOr<int64_t> CountAtenOps(const std::shared_ptr<torch::jit::Graph>& graph,
                                     const std::vector<c10::IValue>& inputs);

// CountAtenOpsPerTrainingStep: the same count over a training step: the forward with gradients
// on, then the backward of the sum of every floating output that requires grad, to the module's
// parameters and buffers that require grad and the floating inputs (a batched rewrite often adds
// cheap forward ops and removes many backward ones). Gradients are returned, not accumulated:
// the module's `.grad`s are untouched. Without anything to differentiate, the forward's count.
absl::StatusOr<int64_t> CountAtenOpsPerTrainingStep(const std::shared_ptr<torch::jit::Graph>& graph,
                                                    const std::vector<c10::IValue>& inputs);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_GRAPH_RUNNER_H_
