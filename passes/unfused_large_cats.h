// unfused_large_cats.h — a concatenation of many tensors stays out of the CUDA fuser.
//
// The TorchScript executor's TensorExpr fuser (LibTorch 2.x on CUDA) compiles an `aten::cat` it
// fuses into nested conditionals, one per input, and its compile time grows so fast with the
// input count that a forward under `torch.no_grad()` with a fused cat of 16 inputs (16 ReLUs
// and their cat, the corpus `list_input` as users wrote it) or 27 (the reference DLRM's
// interaction input, once its loop over the tables is unrolled) spins in the compiler for
// minutes (bench/RESULTS.md, H200, Thu Dec 3). The fuser takes a cat only when its list is a
// `prim::ListConstruct` used once; KeepLargeCatsUnfused passes such a list through `aten::list`
// (a copy of the list of references, no tensor work), which no executor pass folds back, for
// every cat of more than kMaxFusedCatInputs tensors. The cat still runs as one kernel; what is
// lost is only the fusion of its producers' pointwise work into it. Values and gradients are
// unchanged.
#ifndef SENTIER_PASSES_UNFUSED_LARGE_CATS_H_
#define SENTIER_PASSES_UNFUSED_LARGE_CATS_H_

#include <cstdint>
#include <memory>

#include "passes/graph_fwd.h"

namespace sentier {

// kMaxFusedCatInputs: the most inputs a cat may have and still be left to the fuser.
inline constexpr int64_t kMaxFusedCatInputs = 8;

// Returns whether the graph changed; `cats` (optional) gets the number of cats kept unfused
// added to it.
bool KeepLargeCatsUnfused(const std::shared_ptr<torch::jit::Graph>& graph, int64_t* cats = nullptr,
                          int64_t max_fused_inputs = kMaxFusedCatInputs);

}  // namespace sentier

#endif  // SENTIER_PASSES_UNFUSED_LARGE_CATS_H_
