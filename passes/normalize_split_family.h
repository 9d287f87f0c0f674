// normalize_split_family.h — one canonical form for split/chunk/unbind/cat/stack, so rules see
// one spelling of each thing.
//
// NormalizeSplitFamily rewrites, where it can prove the result equal:
//   * spellings: aten::concat/concatenate -> aten::cat; split(x, int[] sizes) and the unsafe_
//     variants -> split_with_sizes; unsafe_chunk -> chunk;
//   * split(x, int size, d) and chunk(x, n, d) -> split_with_sizes(x, sections, d) when the size
//     of dim d is static (typed IR or shape facts; never a dynamic/batch dim);
//   * negative dims of split/chunk/unbind/cat/stack/select/unsqueeze/squeeze/slice/narrow ->
//     non-negative, when the rank is known;
//   * constant list indexing of a split result (aten::__getitem__(parts, k), scripted code) ->
//     one prim::ListUnpack (traced spelling), and aten::len(parts) -> a constant, when the number of
//     pieces is known and the list is never mutated.
// Returns whether the graph changed.
#ifndef SENTIER_PASSES_NORMALIZE_SPLIT_FAMILY_H_
#define SENTIER_PASSES_NORMALIZE_SPLIT_FAMILY_H_

#include <memory>

#include "passes/shape_facts.h"

#include "passes/graph_fwd.h"

namespace sentier {

bool NormalizeSplitFamily(const std::shared_ptr<torch::jit::Graph>& graph, const ShapeFacts* facts);

}  // namespace sentier

#endif  // SENTIER_PASSES_NORMALIZE_SPLIT_FAMILY_H_
