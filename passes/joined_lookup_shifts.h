// joined_lookup_shifts.h — the stored-table lookups of a model shift their indices together.
//
// batch_embedding_bag_stored_tables (and its weighted twin) turn each set of nn.EmbeddingBag
// lookups of one width and one mode into one lookup of a stored table, whose members' indices
// and offsets are joined into one vector and shifted by one repeat_interleave of a small
// host-built tensor (patterns/horizontal.rules). A model with several widths and modes gets one
// such preparation per set: on the seed-scale model, 12 sets of 4 kernels each (the join, the
// two of repeat_interleave, the add) plus a host-to-device copy on CUDA. None of that depends on
// the tables, so one preparation serves them all: JoinLookupShifts joins the members of every
// such lookup in the block (same index dtype and device) into one vector — every set's indices,
// then every set's offsets — builds one tensor of first rows, first indices and counts, shifts the
// vector with one repeat_interleave and one add, and hands each lookup its two slices (views). The
// shift each member gets is the one its own set gave it (its table's first row in the set's
// stored table; the number of indices before it in the set), so each lookup reads exactly the
// indices and offsets it read before. The preparation stands before the first of the lookups;
// members defined later are moved up when they can move (reads of a graph input's list or dict
// at a constant key; in a graph that writes nothing, any deterministic computation of them, such
// as offsets from lengths), and a lookup whose members cannot is left as it was. The replaced nodes are
// left for dead-node removal. Per-sample weights stay each lookup's own: a slice of a joined
// weight vector would give the weights' gradient a zero fill and a copy per lookup.
//
// Before joining, a width's sum-pooled lookup and its weighted one (tables of one dtype and
// width, one sparse flag, outputs split by bag counts as the rules write them) become one
// weighted lookup: the two sets' tables as one cat (one stored table in the stacked layout), the
// sum set's indices weighing 1 (one `ones_like` of them), and one split whose pieces replace both
// sets'. A weight of 1 multiplies exactly, so values and gradients are the two lookups'; it saves
// a lookup, its backward and its pieces' gradient join (seed_scale: 12 lookups -> 8, 97 -> 89
// launches per training step by the CPU count). Mean-pooled sets stay apart (as weighted sums
// with weights 1/length they would round differently and need the bag lengths computed).
#ifndef SENTIER_PASSES_JOINED_LOOKUP_SHIFTS_H_
#define SENTIER_PASSES_JOINED_LOOKUP_SHIFTS_H_

#include <cstdint>
#include <memory>

#include <ATen/core/ivalue.h>

#include "passes/graph_fwd.h"

namespace sentier {

class ShapeFacts;

// JoinLookupShifts: returns whether the graph changed; `lookups` (optional) gets the number of
// lookups that now share a preparation added to it. `facts` (optional) gives the index dtypes
// and devices where the IR's types do not; `self` (the module, for a method graph; else None)
// gives the tables' row counts.
bool JoinLookupShifts(const std::shared_ptr<torch::jit::Graph>& graph, const ShapeFacts* facts,
                      const c10::IValue& self, int64_t* lookups = nullptr);

}  // namespace sentier

#endif  // SENTIER_PASSES_JOINED_LOOKUP_SHIFTS_H_
