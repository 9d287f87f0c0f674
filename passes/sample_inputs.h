// sample_inputs.h — the arguments of a model's forward, in whatever structure it takes them.
//
// Models take one tensor, several, a List[Tensor], a Dict[str, Tensor], tuples, nested
// containers, Optional arguments given as None, integer index and offset tensors (EmbeddingBag).
// Everything in Sentier that handles inputs — shape facts, the graph runner, the equivalence
// checker, the gate's timing, sentier_check, sentierd, model_bench — goes through these helpers,
// so that every caller sees the same structure and the same random draws:
//   * ConformToSchema rebuilds arguments read from a pickle (generic lists and dicts) with the
//     static types that forward's schema declares: a List[Tensor] argument gets a typed list,
//     never a List[Any] (which TorchScript refuses);
//   * MapTensors / FlattenTensors walk the structure (device moves, casts, requires_grad);
//   * DoubleBatch doubles the batch (dim 0 of every tensor), continuing EmbeddingBag offsets;
//   * ShrinkBatch cuts a large batch to its first rows, where that is unambiguous (shape facts
//     need shapes, not a production-sized batch);
//   * RandomInputsLike draws fresh inputs of the samples' structure, shapes and dtypes: floats
//     from each tensor's mean and spread, integers within the observed range (per feature column
//     for a (batch, features) index tensor: each column indexes its own table), offsets kept
//     monotone. A float column whose sample values are all whole and non-negative (ids stored as
//     floats in a one-tensor CTR input, cast per feature with `.long()`) is drawn as whole numbers
//     within its observed range. It is the one random-input generator of the project.
//
// Offsets: a 1-D integer tensor that starts at 0 and never decreases, paired with the 1-D integer
// tensor it indexes (the one at the same position in a sibling container, else the nearest
// before it) whose length covers its values, is treated as EmbeddingBag offsets (with or without
// the last offset). A tensor misread as offsets makes at most a batch-x2 trial fail on the
// reference model, which callers then skip.
#ifndef SENTIER_PASSES_SAMPLE_INPUTS_H_
#define SENTIER_PASSES_SAMPLE_INPUTS_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include "absl/status/statusor.h"

namespace sentier {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// ConformToSchema: `args` are forward's arguments without `self`; missing trailing arguments take
// the schema's defaults. InvalidArgumentError naming the argument (and the element path) when a
// value does not fit its declared type, or the count is wrong.
absl::StatusOr<std::vector<c10::IValue>> ConformToSchema(const c10::FunctionSchema& schema,
                                                         const std::vector<c10::IValue>& args);

// ConformToTypes: the same against a list of types (e.g. a bare graph's input types).
absl::StatusOr<std::vector<c10::IValue>> ConformToTypes(const std::vector<c10::TypePtr>& types,
                                                        const std::vector<c10::IValue>& args);

// MapTensors: the same structure (container types kept) with every tensor replaced by fn(t).
c10::IValue MapTensors(const c10::IValue& v, const std::function<at::Tensor(const at::Tensor&)>& fn);
std::vector<c10::IValue> MapTensors(const std::vector<c10::IValue>& vs,
                                    const std::function<at::Tensor(const at::Tensor&)>& fn);

// FlattenTensors: every tensor with its path, e.g. "[1][3]" or "[0][user]" (dict keys in sorted
// order, so that two runs list the same tensors in the same order).
void FlattenTensors(const c10::IValue& v, const std::string& path, NamedTensors* out);
NamedTensors FlattenTensors(const std::vector<c10::IValue>& vs, const std::string& prefix = "input");

// DoubleBatch: every tensor concatenated with itself along dim 0; offsets continue past the
// first copy of their indices. `fixed[i]` true: argument i does not follow the batch (a
// parameter passed as an input) and is kept as it is.
std::vector<c10::IValue> DoubleBatch(const std::vector<c10::IValue>& samples,
                                     const std::vector<bool>& fixed = {});

// ShrinkBatch: the samples with every batch-following tensor cut to its first `rows` rows (copies,
// so a run that mutates its inputs leaves the samples alone). Only where that is unambiguous:
// every tensor outside the `fixed` arguments has at least one dim and the same size B > rows of
// dim 0, and none reads as EmbeddingBag offsets (cutting bags needs their indices cut to match).
// Otherwise nullopt, and callers use the samples as they are.
c10::optional<std::vector<c10::IValue>> ShrinkBatch(const std::vector<c10::IValue>& samples,
                                                    int64_t rows, const std::vector<bool>& fixed = {});

// RandomInputsLike: fresh values of the samples' structure; dim 0 of every tensor is multiplied
// by `batch_scale` (1 or 2; 2 doubles as DoubleBatch does, then redraws).
std::vector<c10::IValue> RandomInputsLike(const std::vector<c10::IValue>& samples, at::Generator& gen,
                                          int64_t batch_scale = 1, const std::vector<bool>& fixed = {});

}  // namespace sentier

#endif  // SENTIER_PASSES_SAMPLE_INPUTS_H_
