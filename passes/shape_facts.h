// shape_facts.h — sizes, dtypes and devices of every tensor value, learned from sample inputs.
//
// Scripted TorchScript graphs carry no sizes. RecordShapeFacts runs a copy of the graph once on
// the sample inputs (CPU, no grad) with every top-level tensor value made an output, and records
// what each value looked like. It then runs it a second time with every input tensor doubled
// along dimension 0 (the batch dimension by convention; tensors inside lists, tuples and dicts
// too, EmbeddingBag offsets continued: DoubleBatch in sample_inputs.h); any dimension that changed between the
// two runs is marked dynamic, and rules never rely on a dynamic size. When the second run fails
// (an input whose dim 0 is not a batch dimension), dimension 0 of every value but the module's
// tensors (prim::GetAttr) and constants is marked dynamic.
//
//   absl::StatusOr<ShapeFacts> facts = RecordShapeFacts(*graph, inputs);
//   c10::optional<int64_t> d1 = facts->StaticSize(value, 1);
//
// NOTE: values inside nested blocks (loops, ifs) get no facts.
#ifndef SENTIER_PASSES_SHAPE_FACTS_H_
#define SENTIER_PASSES_SHAPE_FACTS_H_

#include <vector>

#include <ATen/core/ivalue.h>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

#include "passes/graph_fwd.h"

namespace sentier {

// TensorFact: what one tensor value looked like on the sample inputs.
struct TensorFact {
  std::vector<int64_t> sizes;
  std::vector<bool> dynamic;  // dynamic[d]: size of dim d changed with the batch size
  std::vector<int64_t> sizes_at_double_batch;  // sizes in the second run (empty if it failed)
  c10::ScalarType dtype = c10::ScalarType::Float;
  c10::Device device = c10::Device(c10::kCPU);
};

// ShapeFacts: facts per graph value. Keys are the values of the graph the facts were recorded
// on; values created later by rewrites have no facts (rules then fall back to types in the IR).
// Keys are Value::unique() ids, which a graph never reuses (addresses of destroyed values are).
class ShapeFacts {
 public:
  void Set(const torch::jit::Value* v, TensorFact fact);
  const TensorFact* Find(const torch::jit::Value* v) const;
  // StaticRank / StaticSize: from the facts, else from a complete TensorType in the IR (where
  // dim 0 is taken to be the batch dim and never static).
  c10::optional<int64_t> StaticRank(const torch::jit::Value* v) const;
  c10::optional<int64_t> StaticSize(const torch::jit::Value* v, int64_t dim) const;
  size_t size() const { return facts_.size(); }

  // Propagate: `to` replaced `from` in a rewrite whose identity makes them equal, so `to` gets
  // `from`'s fact (rewrites add facts for the values they create; no existing fact changes).
  void Propagate(const torch::jit::Value* from, const torch::jit::Value* to);

 private:
  absl::flat_hash_map<size_t, TensorFact> facts_;
};

// RecordShapeFacts: runs `graph` on `inputs` (graph inputs in order; for a method graph the first
// is the module object) and records facts for its top-level tensor values.
// `fixed_inputs[i]` true: input i does not follow the batch (e.g. a parameter passed as an
// input) and is not doubled in the second run.
absl::StatusOr<ShapeFacts> RecordShapeFacts(const std::shared_ptr<torch::jit::Graph>& graph,
                                            const std::vector<c10::IValue>& inputs,
                                            const std::vector<bool>& fixed_inputs = {});

}  // namespace sentier

#endif  // SENTIER_PASSES_SHAPE_FACTS_H_
