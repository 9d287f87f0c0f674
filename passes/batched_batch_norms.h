// batched_batch_norms.h — training-mode batch norms of one batched layer become one batch norm.
//
// A multi-task model's experts (MMoE, PLE) are MLPs with BatchNorm1d: once the rules batch the
// experts' first linears into one, each expert's batch norm reads its own piece of that linear's
// output (a split along the features) and, in training mode, updates its own running mean and
// variance. Batch norm is per feature: the members' batch norms over [B, C_k] pieces compute what
// one batch norm over the pieces side by side, [B, sum C_k], computes with the members' weights,
// biases and running statistics concatenated. BatchTrainingBatchNorms makes that rewrite:
//
//   X = cat([x_k...], 1); N = batch_norm(X, cat(w), cat(b), RM = cat(running_mean), RV = cat(...))
//   running_mean_k.copy_(split(RM)[k]); running_var_k.copy_(split(RV)[k])   (every member k)
//   y_k = split_with_sizes(N, [C_k...], 1)[k]
//
// so the chain behind it (ReLU, dropout, the experts' second linears, their batch norms) stays
// batched for the rules. The running statistics stay the members' own buffers: the joined batch
// norm updates the concatenated copies, which are copied back into every member's buffers, so
// after a step each member's buffers hold exactly what its own batch norm would have written
// (per-feature arithmetic; the same update formula). The members' num_batches_tracked increments
// are left as they are; for the stacked layout, JoinBatchNormCounters (after the rules) makes
// them one stack of the counters, one add and a copy back into each, so that every buffer of the
// members' BatchNorm modules is in a stack or a cat, which the stacked layout stores (one buffer
// each) in place of the modules, the copies back going with them (passes/stacked_parameters.h).
//
// Members: aten::batch_norm nodes of the top block with a constant `training` of true (a traced
// model in training mode; a scripted model reads `self.training` at run time and is left alone),
// weights, biases and running statistics all given, and equal momentum, eps and cudnn flag, whose
// inputs are distinct 2-D pieces of one split along dim 1 or pieces of one unbind of a 3-D tensor
// (what the rules' batched linears produce). Each member's statistics must be its own (distinct
// module objects, or distinct graph inputs), read by nothing else before the group's last member:
// the joined batch norm updates them where the first member ran. Channel counts come from the module's buffers,
// else from shape facts or complete types; without them a group is left alone. Weights and
// statistics read from the module after the first member are moved up to it.
#ifndef SENTIER_PASSES_BATCHED_BATCH_NORMS_H_
#define SENTIER_PASSES_BATCHED_BATCH_NORMS_H_

#include <cstdint>
#include <memory>

#include <ATen/core/ivalue.h>

#include "passes/graph_fwd.h"

namespace sentier {

class ShapeFacts;

// BatchTrainingBatchNorms: returns whether the graph changed; `batched` (optional) gets the number
// of batch norms that became part of a joined one added to it. `self` is the module object of a
// method graph (None otherwise); `facts` (optional) gives ranks and channel counts the IR's types
// do not, and gets the members' facts for the pieces that replace their outputs.
bool BatchTrainingBatchNorms(const std::shared_ptr<torch::jit::Graph>& graph, ShapeFacts* facts,
                             const c10::IValue& self,
                             int64_t* batched = nullptr);

// JoinBatchNormCounters: for each joined batch norm (its running mean a cat of members' running
// means read from their modules) whose members each increment their num_batches_tracked by one
// add of one constant, nothing else reading it: one stack, one add, a copy back into each.
// Returns whether the graph changed. Run after the rules (a stack of counters would otherwise
// put module tensors in a list, which the rules' alias analysis takes as written).
bool JoinBatchNormCounters(const std::shared_ptr<torch::jit::Graph>& graph, const c10::IValue& self);

}  // namespace sentier

#endif  // SENTIER_PASSES_BATCHED_BATCH_NORMS_H_
