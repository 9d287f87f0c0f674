// graph_fwd.h — forward declarations of LibTorch's IR types, for headers that only pass graphs
// around (their users include torch/csrc/jit/ir/ir.h where the types are used).
#ifndef SENTIER_PASSES_GRAPH_FWD_H_
#define SENTIER_PASSES_GRAPH_FWD_H_

namespace torch {
namespace jit {
struct Graph;
struct Node;
struct Value;
}  // namespace jit
}  // namespace torch

#endif  // SENTIER_PASSES_GRAPH_FWD_H_
