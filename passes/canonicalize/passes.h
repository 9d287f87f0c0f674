// passes.h — the canonicalization passes, one per file in this folder.
//
// Canonicalization brings a scripted graph (ModuleList loops, `append`, attribute reads, list
// indexing with counters, `F.*` wrappers) and its traced twin to one straight-line form, the form
// the rules are written against. Each pass is a free function over a graph that returns whether
// it changed anything and adds what it did to `counters` ("<pass>.<what>" -> count; may be null).
// None does I/O. The pipeline that runs them in order, to a fixpoint, is in pipeline.h.
//
// Passes of LibTorch are used where they exist and behave the same in 1.13 and 2.x (the wrappers
// in libtorch_passes.cc say which and why each is safe here); Sentier's own fill the gaps.
#ifndef SENTIER_PASSES_CANONICALIZE_PASSES_H_
#define SENTIER_PASSES_CANONICALIZE_PASSES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>

#include "passes/graph_fwd.h"
#include "passes/shape_facts.h"

namespace torch {
namespace jit {
struct Block;
struct Node;
struct Value;
}  // namespace jit
}  // namespace torch

namespace sentier {

using PassCounters = std::map<std::string, int64_t>;

// AddCount: adds n to counters[key] (nothing when counters is null or n is 0).
inline void AddCount(PassCounters* counters, const std::string& key, int64_t n = 1) {
  if (counters != nullptr && n != 0) (*counters)[key] += n;
}

// --- Sentier's own passes ---------------------------------------------------------------------

// FoldModuleAttributes: prim::GetAttr of a module attribute that is not a parameter, buffer or
// submodule, holding an int, float, bool, str, None, or a list/tuple of those, becomes a constant
// (what torch.jit.freeze folds) — unless some method of the module assigns an attribute of that
// name, or the attribute is `training` (train()/eval() flip it on a loaded artifact). Parameters
// and buffers stay module state, so the artifact trains and keeps its state_dict. `self` is the
// module object whose method the graph is (graph input 0); a graph without one is left alone.
bool FoldModuleAttributes(const std::shared_ptr<torch::jit::Graph>& graph, const c10::IValue& self,
                          PassCounters* counters);

// FoldListReads: a ListConstruct of scalar constants that is only read becomes a constant list;
// aten::len and aten::__getitem__ (constant index) of a list whose elements are known — a
// prim::ListConstruct or a constant list that nothing writes to — become the element or the
// length, and prim::min / prim::max of a constant int or float list (the trip count of a `zip`
// loop) its smallest / largest element; LibTorch's list idioms (slices of known lists, len of
// ListConstruct) follow. A ListConstruct whose elements are then written in place (a folded
// `outs[0].add_(1.0)`) is built after those writes, where LibTorch's dead code elimination
// (LowerSimpleTuples, torch::jit::load compiling a saved archive) keeps them.
bool FoldListReads(const std::shared_ptr<torch::jit::Graph>& graph, PassCounters* counters);

// ListNeverWritten: no use of `list` can change what it holds: each has a schema that does not
// write that argument (its elements may be written; they stay the same objects). Uses without a
// schema (a container, a block, the graph's outputs) may lead to a write. Shared by
// FoldListReads and EliminateCommonReads.
bool ListNeverWritten(const torch::jit::Value* list);

// FoldScalarTensors: aten::Int of integer arithmetic that tracing recorded on 0-dim tensors
// (prim::NumToTensor(size) * 4) becomes the same arithmetic on ints.
bool FoldScalarTensors(const std::shared_ptr<torch::jit::Graph>& graph, PassCounters* counters);

// UnwrapRaisingBranches: an `if` one of whose branches always raises (an F.* wrapper's argument
// check) keeps only the check; the other branch's nodes move after it into the outer block, and
// the `if`'s outputs become that branch's values. Feeding it: `x is None` / `is not None` of a
// tensor become constants, and a prim::unchecked_cast to the type its input has becomes the input.
bool UnwrapRaisingBranches(const std::shared_ptr<torch::jit::Graph>& graph, PassCounters* counters);

// IsImmutableType: values of the type cannot be mutated (int, float, bool, str, None, Number,
// Device, and tuples of those): two reads of one are interchangeable.
bool IsImmutableType(const c10::TypePtr& type);

// ListIsOnlyRead: every use of the list value only reads it: no schema writes it or returns it
// aliased with a mutable type, and no use lacks a schema (containers, blocks, outputs).
bool ListIsOnlyRead(torch::jit::Value* list);

// UnrollKnownLoops: fully unrolls `for` loops (initial and continue conditions constant true)
// whose trip count is a constant, while the unrolled size stays under `max_unrolled_nodes`.
bool UnrollKnownLoops(const std::shared_ptr<torch::jit::Graph>& graph, PassCounters* counters,
                      int64_t max_unrolled_nodes = 20000);

// NormalizeSplitFamily: one canonical form for split/chunk/unbind/cat/stack, where provably equal:
//   * spellings: aten::concat/concatenate -> aten::cat; split(x, int[] sizes) and the unsafe_
//     variants -> split_with_sizes; unsafe_chunk -> chunk;
//   * split(x, int size, d) and chunk(x, n, d) -> split_with_sizes(x, sections, d) when the size
//     of dim d is static (typed IR or shape facts; never a dynamic/batch dim);
//   * negative dims of split/chunk/unbind/cat/stack/select/unsqueeze/squeeze/slice/narrow ->
//     non-negative, when the rank is known;
//   * constant list indexing of a split result (aten::__getitem__(parts, k), scripted code) ->
//     one prim::ListUnpack (traced spelling), aten::len(parts) -> a constant, a slice
//     parts[a:b] with constant bounds -> a prim::ListConstruct of those pieces, and
//     items.extend(parts) -> one append per piece, when the number of pieces is known and the
//     list is never mutated.
// `nodes`, when given, holds the graph's nodes of the kinds NormalizeSplitFamilyLooksAt accepts,
// in program order (a caller that walks the graph anyway saves it a walk).
bool NormalizeSplitFamily(const std::shared_ptr<torch::jit::Graph>& graph, ShapeFacts* facts,
                          PassCounters* counters,
                          const std::vector<torch::jit::Node*>* nodes = nullptr);
bool NormalizeSplitFamilyLooksAt(c10::Symbol kind);

// OutOfPlaceUpdates: `a.add_(b)` (sub_, mul_, div_) becomes `a.add(b)` where `a` is a fresh
// tensor (new memory, same block) that nothing else uses and the facts give `b` its dtype: the
// accumulator of `out = lin(x0); out += lin(x1)`. Needs facts; without them nothing changes.
bool OutOfPlaceUpdates(const std::shared_ptr<torch::jit::Graph>& graph, ShapeFacts* facts,
                       PassCounters* counters);

// EliminateCommonReads: a pure node whose outputs cannot be written (immutable values, reads of
// module attributes), or a read at a constant index of a list nothing writes, is merged into an
// earlier equal one that dominates it.
bool EliminateCommonReads(const std::shared_ptr<torch::jit::Graph>& graph, PassCounters* counters);

// InputKey: the identity of a node's input for merging equal nodes: the value of a constant of an
// immutable type or list of them (constants are spread while the graph is rewritten, so equal
// constants are distinct nodes), else the value itself. Shared by EliminateCommonReads and
// EliminateCommonTensorOps.
std::string InputKey(torch::jit::Value* v);

// EliminateCommonTensorOps: in a graph where no node writes anything, a deterministic node without
// side effects repeated on the same inputs (the same kind, constants compared by value) is merged
// into the first; a graph with a writer is left alone (eliminate_common_tensor_ops.cc says why).
// The optimizer runs it once, after the rules.
bool EliminateCommonTensorOps(const std::shared_ptr<torch::jit::Graph>& graph, PassCounters* counters);

// AnyWriter: some node of the block (or of a block inside it) writes an argument (its schema
// says so: `add_`, `append`, BatchNorm's running statistics) or has no schema. Where none does,
// every value keeps what it was computed with.
bool AnyWriter(const torch::jit::Block* block);

// IsPureComputation: an aten node (or a list construction, unpacking or device read) without
// blocks, side effects or randomness: in a graph without writers it computes the same wherever
// it stands after its inputs, and equal ones compute equal values.
bool IsPureComputation(const torch::jit::Node* n);

// PoolConstants: one node per distinct immutable constant, moved to the start of the graph.
// SpreadConstants: the reverse, before rewriting — each top-level constant with many uses is
// copied so that no copy has more than a few (deleting a node then costs O(1) per constant
// input, not the constant's fan-out); returns the number of copies. OptimizeGraph spreads
// first and pools last.
bool PoolConstants(const std::shared_ptr<torch::jit::Graph>& graph, PassCounters* counters);

// FoldKnownRanks: aten::dim of a top-level tensor whose rank the facts know becomes that rank
// (the F.* wrappers' rank checks then fold; fold_known_ranks.cc says why that is sound here).
// Without facts nothing changes.
bool FoldKnownRanks(const std::shared_ptr<torch::jit::Graph>& graph, const ShapeFacts* facts,
                    PassCounters* counters);

// DropExportGuards: removes the aten::_assert_tensor_metadata guards torch.export puts before
// casts (drop_export_guards.cc says why).
bool DropExportGuards(const std::shared_ptr<torch::jit::Graph>& graph, PassCounters* counters);
int64_t SpreadConstants(const std::shared_ptr<torch::jit::Graph>& graph);

// --- LibTorch's passes (libtorch_passes.cc) -----------------------------------------------------

// InlineCalls: torch::jit::Inline — submodule and function calls become their bodies.
bool InlineCalls(const std::shared_ptr<torch::jit::Graph>& graph, PassCounters* counters);
// PropagateConstants: ConstantPropagationImmutableTypes — ops on constant ints, floats, bools,
// strings and tuples are evaluated; prim::If with a constant condition becomes its branch.
bool PropagateConstants(const std::shared_ptr<torch::jit::Graph>& graph, PassCounters* counters);
// RemoveListMutations: RemoveListMutation — `xs = []; xs.append(a); ...` becomes
// prim::ListConstruct(a, ...) when nothing else aliases the list.
bool RemoveListMutations(const std::shared_ptr<torch::jit::Graph>& graph, PassCounters* counters);
// LowerTuples: LowerSimpleTuples — tuples built and unpacked in the graph become their elements.
bool LowerTuples(const std::shared_ptr<torch::jit::Graph>& graph, PassCounters* counters);
// EliminateDeadNodes: Sentier's linear RemoveDeadNodes, then LibTorch's EliminateDeadCode where
// nodes with blocks or mutation remain (it builds an alias analysis).
bool EliminateDeadNodes(const std::shared_ptr<torch::jit::Graph>& graph, PassCounters* counters);

}  // namespace sentier

#endif  // SENTIER_PASSES_CANONICALIZE_PASSES_H_
