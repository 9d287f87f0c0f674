// remove_dead_nodes.h — dead code removal without alias analysis.
//
// RemoveDeadNodes deletes nodes whose outputs are all unused and that cannot have an effect:
// no side effects, no mutable schema, no nested blocks. One backward sweep per block removes
// whole dead chains. It is what rewrites leave behind (pieces of a split that is now unused),
// found in time linear in the graph, where LibTorch's EliminateDeadCode builds an AliasDb first.
// Returns whether the graph changed.
#ifndef SENTIER_PASSES_REMOVE_DEAD_NODES_H_
#define SENTIER_PASSES_REMOVE_DEAD_NODES_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "passes/graph_fwd.h"

namespace sentier {

// `removed` (optional) gets the number of nodes deleted added to it. `kept` (optional) is called
// on every node left in the graph (nested blocks included), so that a caller that looks at what
// remains need not walk the graph again (each walk of a 100k-node graph costs tens of
// milliseconds in cache misses). Order: each block backwards, a node after the nodes of its
// blocks; when `kept` sees a node, the node's users have been seen or removed.
bool RemoveDeadNodes(const std::shared_ptr<torch::jit::Graph>& graph, int64_t* removed = nullptr,
                     const std::function<void(torch::jit::Node*)>& kept = {});

// HasLiveUses: whether an output of `n` is used by a node that is not itself dead. A user is
// dead when RemoveDeadNodes would delete it once its own users are gone, looked at up to `depth`
// users deep (past that, a user counts as live). The rewrite driver and the group search skip
// anchors without live uses: the members a rewrite replaced earlier in the same round stay in
// the graph, unused, until the sweep between rounds, and so do the nodes that feed only them.
bool HasLiveUses(torch::jit::Node* n, int depth = 3);

// IsDeadNode: `n` goes in the next sweep: it cannot have an effect, and no output of it has a
// live use (HasLiveUses, `depth` users deep). The rule function single_use counts only uses by
// nodes that are not dead.
bool IsDeadNode(torch::jit::Node* n, int depth = 3);

}  // namespace sentier

#endif  // SENTIER_PASSES_REMOVE_DEAD_NODES_H_
