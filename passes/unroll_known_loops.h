// unroll_known_loops.h — fully unrolls `for` loops whose trip count is a known constant.
//
// Scripting turns `for p in parts:` and list comprehensions into prim::Loop; once the trip count
// is a constant (e.g. aten::len of a split result whose piece count is known, folded by
// NormalizeSplitFamily), the loop is replaced by straight-line copies of its body so that rules
// see one node per piece. Only loops in `for` form (initial and continue conditions constant
// true) are unrolled, and only while the unrolled size stays under `max_unrolled_nodes`.
// Returns whether the graph changed.
#ifndef SENTIER_PASSES_UNROLL_KNOWN_LOOPS_H_
#define SENTIER_PASSES_UNROLL_KNOWN_LOOPS_H_

#include <cstdint>
#include <memory>

#include "passes/graph_fwd.h"

namespace sentier {

bool UnrollKnownLoops(const std::shared_ptr<torch::jit::Graph>& graph,
                      int64_t max_unrolled_nodes = 20000);

}  // namespace sentier

#endif  // SENTIER_PASSES_UNROLL_KNOWN_LOOPS_H_
