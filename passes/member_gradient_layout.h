// member_gradient_layout.h — each member's gradient arrives in its parameter's own layout.
//
// In the original parameter layout a batched linear reads its members' weights as
// `stack(W_0, ..., W_n).transpose(1, 2)`. In the backward, autograd hands each member
// `W_k` a slice of the batched product's gradient: a transposed view, whose strides are not
// the parameter's, so AccumulateGrad copies it into a fresh tensor with the parameter's
// strides — one kernel and one allocation per member and step (128 of them in the corpus'
// 64-tower model). ContiguousMemberGradients puts `view(flatten(S), size(S))` between such a
// stack S and its uses: a no-op in the forward (two views), while in the backward the view's
// gradient is reshaped to the flat shape, which copies the whole transposed gradient into one
// contiguous buffer (one kernel); every member's gradient is then a contiguous slice of it that
// AccumulateGrad keeps without a copy. Values, gradients and parameters are unchanged.
//
// It applies to an `aten::stack` along dim 0 of at least two module attributes
// (`prim::GetAttr`, i.e. parameters left in the original layout) with a use that transposes or
// permutes it. Stacks that the stacked layout stored as parameters are no longer such stacks.
#ifndef SENTIER_PASSES_MEMBER_GRADIENT_LAYOUT_H_
#define SENTIER_PASSES_MEMBER_GRADIENT_LAYOUT_H_

#include <cstdint>
#include <memory>

#include "passes/graph_fwd.h"

namespace sentier {

// Returns whether the graph changed; `stacks` (optional) gets the number of stacks rewired
// added to it.
bool ContiguousMemberGradients(const std::shared_ptr<torch::jit::Graph>& graph,
                               int64_t* stacks = nullptr);

}  // namespace sentier

#endif  // SENTIER_PASSES_MEMBER_GRADIENT_LAYOUT_H_
