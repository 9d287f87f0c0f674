// rule_functions_builtins.cc — the builtin transforms of the rule language (for `call`): runs
// of consecutive split or unbind pieces in an aten::cat or aten::stack list become fewer pieces,
// slices or views of the source's input.
//
// Builtins edit the graph; each one checks everything it relies on before its first edit and
// returns false, unchanged, otherwise. rule_functions.cc registers them (MakeBuiltins).
#include <numeric>

#include "passes/internal/rule_functions_parts.h"
#include "passes/status_macros.h"

namespace sentier {
namespace internal {
namespace rule_functions {

using torch::jit::Graph;
using torch::jit::WithInsertPoint;

// ---------------------------------------------------------------------------------------------
// Builtins over cat(list, d) whose inputs contain runs of consecutive split pieces.

namespace {

struct PieceRun {
  size_t first = 0;  // index in the cat list
  size_t count = 0;
  Node* unpack = nullptr;
  Node* split = nullptr;
  size_t piece_begin = 0;  // index of the first piece in the unpack's outputs
};

// Pieces of `split` (split_with_sizes with constant sizes, or split with a constant int size)
// have known offsets along the split dim.
c10::optional<std::vector<int64_t>> PieceOffsets(Node* split, size_t num_pieces) {
  c10::optional<Datum> s = DatumFromConstant(split->input(1));
  if (!s) return c10::nullopt;
  std::vector<int64_t> offsets = {0};
  if (s->kind == Datum::Kind::kList) {
    if (s->list.size() != num_pieces) return c10::nullopt;
    for (const Datum& x : s->list) {
      if (x.kind != Datum::Kind::kInt) return c10::nullopt;
      offsets.push_back(offsets.back() + x.i);
    }
    return offsets;
  }
  if (s->kind == Datum::Kind::kInt && split->kind() == c10::aten::split) {
    for (size_t k = 0; k < num_pieces; ++k) offsets.push_back(offsets.back() + s->i);
    return offsets;
  }
  return c10::nullopt;
}

// Finds maximal runs (length >= min_len) of consecutive pieces of one split on dim `d`.
std::vector<PieceRun> FindRuns(Node* list, int64_t d, size_t min_len, bool need_single_use) {
  std::vector<PieceRun> runs;
  auto piece_of = [&](Value* v, Node** unpack, Node** split) {
    Node* u = v->node();
    if (u->kind() != c10::prim::ListUnpack) return false;
    Node* s = u->input(0)->node();
    if (s->kind() != c10::aten::split && !IsSplitWithSizes(s)) return false;
    if (s->inputs().size() != 3) return false;
    c10::optional<Datum> dim = DatumFromConstant(s->input(2));
    if (!dim || dim->kind != Datum::Kind::kInt || dim->i != d) return false;
    if (need_single_use && v->uses().size() != 1) return false;
    *unpack = u;
    *split = s;
    return true;
  };
  auto ins = list->inputs();
  size_t k = 0;
  while (k < ins.size()) {
    Node *u = nullptr, *s = nullptr;
    if (!piece_of(ins[k], &u, &s)) {
      ++k;
      continue;
    }
    size_t j = k + 1;
    while (j < ins.size()) {
      Node *u2 = nullptr, *s2 = nullptr;
      if (!piece_of(ins[j], &u2, &s2) || u2 != u ||
          ins[j]->offset() != ins[j - 1]->offset() + 1) {
        break;
      }
      ++j;
    }
    if (j - k >= min_len) {
      PieceRun r;
      r.first = k;
      r.count = j - k;
      r.unpack = u;
      r.split = s;
      r.piece_begin = ins[k]->offset();
      runs.push_back(r);
    }
    k = j;
  }
  return runs;
}

// Common checks; returns the cat's ListConstruct and dim.
bool CatParts(Value* y, Node** list, int64_t* d) {
  Node* cat = y->node();
  if (cat->kind() != c10::aten::cat || cat->inputs().size() != 2) return false;
  Node* l = cat->input(0)->node();
  if (l->kind() != c10::prim::ListConstruct || cat->input(0)->uses().size() != 1) return false;
  c10::optional<Datum> dim = DatumFromConstant(cat->input(1));
  if (!dim || dim->kind != Datum::Kind::kInt) return false;
  *list = l;
  *d = dim->i;
  return true;
}

}  // namespace

// merge_piece_runs(%y): in cat(list, d), a run of >= 2 consecutive single-use pieces of one
// split_with_sizes on dim d becomes one piece: the split's sections of the run are merged (or,
// when the run is every piece, the split's input is used).
absl::StatusOr<bool> MergePieceRuns(const std::vector<Datum>& a, EvalContext& ctx) {
  if (a[0].kind != Datum::Kind::kValue) return Err("merge_piece_runs takes the cat's output");
  Node* list = nullptr;
  int64_t d = 0;
  if (!CatParts(a[0].value, &list, &d)) return false;
  for (const PieceRun& run : FindRuns(list, d, 2, /*need_single_use=*/true)) {
    if (!IsSplitWithSizes(run.split)) continue;
    size_t n = run.unpack->outputs().size();
    c10::optional<std::vector<int64_t>> offsets = PieceOffsets(run.split, n);
    if (!offsets) continue;
    if (run.split->owningBlock() != list->owningBlock()) continue;
    if (ctx.legal && !ctx.legal({run.split, run.unpack})) continue;
    Graph* g = list->owningGraph();
    Value* merged = nullptr;
    if (run.count == n) {
      merged = run.split->input(0);
    } else {
      std::vector<int64_t> sizes;
      for (size_t k = 0; k < n; ++k) {
        int64_t sz = (*offsets)[k + 1] - (*offsets)[k];
        if (k == run.piece_begin) {
          sz = (*offsets)[run.piece_begin + run.count] - (*offsets)[run.piece_begin];
        } else if (k > run.piece_begin && k < run.piece_begin + run.count) {
          continue;
        }
        sizes.push_back(sz);
      }
      WithInsertPoint guard(run.unpack->next());
      Value* new_sizes = g->insertConstant(c10::IValue(sizes));
      Value* new_split = g->insert(c10::Symbol::fromQualString("aten::split_with_sizes"),
                                   {run.split->input(0), new_sizes, run.split->input(2)});
      Node* new_unpack = g->insertNode(g->createListUnpack(new_split, sizes.size()));
      size_t out = 0;
      for (size_t k = 0; k < n; ++k) {
        if (k > run.piece_begin && k < run.piece_begin + run.count) continue;
        new_unpack->output(out)->setType(run.unpack->output(k)->type());
        if (k != run.piece_begin) run.unpack->output(k)->replaceAllUsesWith(new_unpack->output(out));
        if (k == run.piece_begin) merged = new_unpack->output(out);
        ++out;
      }
    }
    // Edit the (single-use) list: the run's first slot gets the merged piece, the rest go.
    list->replaceInput(run.first, merged);
    for (size_t k = run.first + run.count - 1; k > run.first; --k) list->removeInput(k);
    return true;
  }
  return false;
}

// runs_to_slices(%y, min_len): in cat(list, d), each run of >= min_len consecutive pieces of one
// split on dim d (pieces may have other uses) becomes one slice of the split's input.
absl::StatusOr<bool> RunsToSlices(const std::vector<Datum>& a, EvalContext& ctx) {
  if (a[0].kind != Datum::Kind::kValue) return Err("runs_to_slices takes the cat's output");
  SENTIER_ASSIGN_OR_RETURN(min_len, IntOf(a[1]));
  Node* list = nullptr;
  int64_t d = 0;
  if (!CatParts(a[0].value, &list, &d)) return false;
  std::vector<PieceRun> runs =
      FindRuns(list, d, static_cast<size_t>(std::max<int64_t>(2, min_len)), false);
  bool changed = false;
  // Back to front so that list indices of earlier runs stay valid.
  for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
    const PieceRun& run = *it;
    c10::optional<std::vector<int64_t>> offsets =
        PieceOffsets(run.split, run.unpack->outputs().size());
    if (!offsets) continue;
    if (ctx.legal && !ctx.legal({run.split, run.unpack})) continue;
    Graph* g = list->owningGraph();
    WithInsertPoint guard(list);
    int64_t start = (*offsets)[run.piece_begin];
    int64_t end = (*offsets)[run.piece_begin + run.count];
    Value* slice = g->insert(c10::aten::slice, {run.split->input(0), d, start, end, 1});
    list->replaceInput(run.first, slice);
    for (size_t k = run.first + run.count - 1; k > run.first; --k) list->removeInput(k);
    changed = true;
  }
  return changed;
}

// split_pieces_across_dim(%y): in cat(list, e), every piece of one split_with_sizes on dim d != e,
// or of one unbind on any dim d, in order, each used only there: the run becomes one tensor,
// flatten(movedim(unflatten(x, d, [n, -1]), d, e), e, e + 1) for the split and
// flatten(movedim(x, d, e), e, e + 1) for the unbind. The split's sections may be values known
// only when the graph runs (a batched lookup's bags per member): cat on e needs its inputs'
// sizes equal on every other dim, d among them, so wherever the original runs the sections are
// equal. Where they are not, the original raises; the reshape raises too unless the rows divide
// evenly.
absl::StatusOr<bool> SplitPiecesAcrossDim(const std::vector<Datum>& a, EvalContext& ctx) {
  if (a[0].kind != Datum::Kind::kValue) return Err("split_pieces_across_dim takes the cat's output");
  Node* list = nullptr;
  int64_t e = 0;
  if (!CatParts(a[0].value, &list, &e) || e < 0) return false;
  auto ins = list->inputs();
  for (size_t k = 0; k + 1 < ins.size(); ++k) {
    Node* unpack = ins[k]->node();
    if (unpack->kind() != c10::prim::ListUnpack || ins[k]->offset() != 0) continue;
    Node* source = unpack->input(0)->node();
    bool unbind = source->kind() == c10::aten::unbind && source->inputs().size() == 2;
    if (!unbind && (!IsSplitWithSizes(source) || source->inputs().size() != 3)) continue;
    c10::optional<Datum> dim = DatumFromConstant(source->inputs().back());
    if (!dim || dim->kind != Datum::Kind::kInt || dim->i < 0 || (!unbind && dim->i == e)) continue;
    size_t n = unpack->outputs().size();
    if (n < 2 || k + n > ins.size()) continue;
    bool run = true;
    for (size_t j = 0; j < n && run; ++j) {
      run = ins[k + j] == unpack->output(j) && ins[k + j]->uses().size() == 1;
    }
    if (!run || source->owningBlock() != list->owningBlock()) continue;
    // The pieces' rank: the unbind's input has one dim more.
    c10::optional<int64_t> rank = StaticRank(ins[k], ctx.facts);
    if (!rank || dim->i > *rank || (!unbind && dim->i == *rank) || e >= *rank) continue;
    if (ctx.legal && !ctx.legal({source, unpack})) continue;
    Graph* g = list->owningGraph();
    WithInsertPoint guard(list);
    Value* u = source->input(0);
    if (!unbind) {
      std::vector<int64_t> shape = {static_cast<int64_t>(n), -1};
      u = g->insert(c10::Symbol::fromQualString("aten::unflatten"), {u, dim->i, c10::IValue(shape)});
    }
    Value* m = g->insert(c10::Symbol::fromQualString("aten::movedim"), {u, dim->i, e});
    Value* f = g->insert(c10::aten::flatten, {m, e, e + 1});
    list->replaceInput(k, f);
    for (size_t j = k + n - 1; j > k; --j) list->removeInput(j);
    return true;
  }
  return false;
}

// unsqueeze_runs_to_stack(%y): in cat(list, d), d >= 0, each run of >= 2 consecutive pieces
// unsqueeze(x_k, d), each used only in the list, becomes one piece stack([x_k, ...], d): the
// same values in the same places, one copy instead of one per piece in the cat, and one
// gradient split instead of a slice per piece. A list that is one such run is left to
// cat_of_unsqueezes_to_stack, which replaces the cat itself.
absl::StatusOr<bool> UnsqueezeRunsToStack(const std::vector<Datum>& a, EvalContext& ctx) {
  if (a[0].kind != Datum::Kind::kValue) return Err("unsqueeze_runs_to_stack takes the cat's output");
  Node* list = nullptr;
  int64_t d = 0;
  if (!CatParts(a[0].value, &list, &d) || d < 0) return false;
  auto unsqueezed = [&](Value* v) {
    Node* n = v->node();
    if (n->kind() != c10::aten::unsqueeze || v->uses().size() != 1) return false;
    c10::optional<Datum> dim = DatumFromConstant(n->input(1));
    return dim && dim->kind == Datum::Kind::kInt && dim->i == d && n->owningBlock() == list->owningBlock();
  };
  const size_t size = list->inputs().size();
  std::vector<std::pair<size_t, size_t>> runs;  // [first, end)
  for (size_t k = 0; k < size;) {
    size_t j = k;
    while (j < size && unsqueezed(list->input(j))) ++j;
    if (j - k >= 2) runs.emplace_back(k, j);
    k = j == k ? k + 1 : j;
  }
  if (runs.empty() || (runs.size() == 1 && runs[0].second - runs[0].first == size)) return false;
  bool changed = false;
  Graph* g = list->owningGraph();
  // Back to front so that list indices of earlier runs stay valid.
  for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
    std::vector<Node*> nodes;
    std::vector<Value*> xs;
    for (size_t k = it->first; k < it->second; ++k) {
      nodes.push_back(list->input(k)->node());
      xs.push_back(nodes.back()->input(0));
    }
    if (ctx.legal && !ctx.legal(nodes)) continue;
    WithInsertPoint guard(list);
    Value* joined = g->insertNode(g->createList(c10::TensorType::get(), xs))->output();
    Value* stacked = g->insert(c10::aten::stack, {joined, d});
    list->replaceInput(it->first, stacked);
    for (size_t k = it->second - 1; k > it->first; --k) list->removeInput(k);
    changed = true;
  }
  return changed;
}

// ---------------------------------------------------------------------------------------------
// stack_runs_to_views(%y): stack(list, e) whose list holds runs of consecutive pieces of one
// unbind or of one split with equal sections, each piece possibly reshaped to one constant shape.

namespace {

// A stack member read as piece `index` of `source` (aten::unbind, or split_with_sizes with
// constant sections) on dim `dim`, through an optional reshape/view to the constant `shape`.
struct StackMember {
  Node* source = nullptr;
  size_t index = 0;
  int64_t dim = 0;
  c10::optional<std::vector<int64_t>> shape;
};

c10::optional<StackMember> AsStackMember(Value* v) {
  StackMember m;
  Node* n = v->node();
  if ((n->kind() == c10::aten::reshape || n->kind() == c10::aten::view) && n->inputs().size() == 2) {
    c10::optional<Datum> shape = DatumFromConstant(n->input(1));
    if (!shape) return c10::nullopt;
    absl::StatusOr<std::vector<int64_t>> dims = IntsOf(*shape);
    if (!dims.ok()) return c10::nullopt;
    m.shape = *std::move(dims);
    v = n->input(0);
    n = v->node();
  }
  if (n->kind() != c10::prim::ListUnpack) return c10::nullopt;
  Node* s = n->input(0)->node();
  bool unbind = s->kind() == c10::aten::unbind && s->inputs().size() == 2;
  if (!unbind && (!IsSplitWithSizes(s) || s->inputs().size() != 3)) return c10::nullopt;
  c10::optional<Datum> dim = DatumFromConstant(s->inputs().back());
  if (!dim || dim->kind != Datum::Kind::kInt || dim->i < 0) return c10::nullopt;
  m.source = s;
  m.index = v->offset();
  m.dim = dim->i;
  return m;
}

// A run of stack members [first, first + count) that are consecutive pieces of one source.
struct StackRun {
  size_t first = 0;
  size_t count = 0;
  StackMember head;
};

// Section sizes of a source's pieces (1 for an unbind's), or nullopt when not constant.
c10::optional<std::vector<int64_t>> SourceSections(Node* source) {
  if (source->kind() == c10::aten::unbind) {
    Node* unpack = source->output()->uses()[0].user;
    return std::vector<int64_t>(unpack->outputs().size(), 1);
  }
  return SplitSections(source);
}

// How many zero gradients the rewrite adds to the backward of the split or unbind behind
// `unpack`: a piece that only `list` takes (directly, or through a reshape or view only `list`
// uses) loses its last use, and when another piece keeps a use the source stays and its backward
// fills a zero gradient for each such piece. None when the source goes with the stack. At most
// one is allowed. Measured with the conformance set (testdata/optimus_conformance): one such
// piece still paid on the H200 (move_reshape_out_of_split_stack 13 -> 12 CUDA kernels per
// training step, split_stack_to_cats 17 -> 13); two did not (split_stack_to_cats_different_dim
// 15 -> 16, though 14 -> 13 launches on the CPU); seven cost more than the stack saved even on
// the CPU (unbind_stack_to_slices 10 -> 15 launches).
int64_t ZeroGradientsAdded(Node* unpack, Node* list) {
  int64_t orphaned = 0;
  bool source_stays = false;
  for (Value* piece : unpack->outputs()) {
    bool only_list = true;
    for (const torch::jit::Use& u : piece->uses()) {
      Node* user = u.user;
      bool reshaped = (user->kind() == c10::aten::reshape || user->kind() == c10::aten::view) &&
                      user->output()->uses().size() == 1 &&
                      user->output()->uses()[0].user == list;
      only_list = only_list && (user == list || reshaped);
    }
    if (piece->uses().empty()) continue;
    if (only_list) ++orphaned;
    else source_stays = true;
  }
  return source_stays ? orphaned : 0;
}
constexpr int64_t kMaxZeroGradientsAdded = 1;

std::vector<StackRun> FindStackRuns(at::ArrayRef<Value*> members) {
  std::vector<c10::optional<StackMember>> read;
  for (Value* v : members) read.push_back(AsStackMember(v));
  auto continues = [&](size_t k) {
    const StackMember& a = *read[k - 1];
    const StackMember& b = *read[k];
    if (b.source != a.source || b.index != a.index + 1 || b.shape != a.shape) return false;
    c10::optional<std::vector<int64_t>> sections = SourceSections(a.source);
    return sections && (*sections)[a.index] == (*sections)[b.index] && (*sections)[a.index] > 0;
  };
  std::vector<StackRun> runs;
  size_t k = 0;
  while (k < members.size()) {
    if (!read[k] || read[k]->source->output()->uses().size() != 1) {
      ++k;
      continue;
    }
    size_t j = k + 1;
    while (j < members.size() && read[j] && continues(j)) ++j;
    if (j - k >= 2) runs.push_back({k, j - k, *read[k]});
    k = j;
  }
  return runs;
}

// The run as one view of its source's input, shaped like stack(run, e): the run's sections as one
// slice, unflattened to [n, s] for a split, the reshape applied per piece as one over the run.
Value* StackRunAsView(Graph* g, const StackRun& run, int64_t e) {
  Node* source = run.head.source;
  bool unbind = source->kind() == c10::aten::unbind;
  std::vector<int64_t> sections = *SourceSections(source);
  int64_t d = run.head.dim;
  int64_t n = static_cast<int64_t>(run.count);
  int64_t section = sections[run.head.index];
  int64_t begin = std::accumulate(sections.begin(), sections.begin() + run.head.index, int64_t{0});
  Value* v = source->input(0);
  if (run.count != sections.size()) v = g->insert(c10::aten::slice, {v, d, begin, begin + n * section, 1});
  if (!unbind) {
    v = g->insert(c10::Symbol::fromQualString("aten::unflatten"),
                  {v, d, c10::IValue(std::vector<int64_t>{n, section})});
  }
  auto movedim = [&](Value* x, int64_t from, int64_t to) {
    return from == to ? x : g->insert(c10::Symbol::fromQualString("aten::movedim"), {x, from, to});
  };
  if (!run.head.shape) return movedim(v, d, e);
  std::vector<int64_t> shape = {n};
  shape.insert(shape.end(), run.head.shape->begin(), run.head.shape->end());
  v = g->insert(c10::aten::reshape, {movedim(v, d, 0), c10::IValue(shape)});
  return movedim(v, 0, e);
}

}  // namespace

// stack(list, e) with every run of >= 2 consecutive pieces (of one unbind on any dim, or of one
// split_with_sizes with equal constant sections on any dim; each piece bare or reshaped to one
// constant shape) == cat([.., unsqueeze(m, e), .., view of the run, ..], e); the stack itself
// when the list is one run. A piece's elements in row-major order are those of the source's
// input at that index along the split dim, so the per-piece reshape is one reshape of the run
// moved to the front. The sources may have other uses: they stay.
absl::StatusOr<bool> StackRunsToViews(const std::vector<Datum>& a, EvalContext& ctx) {
  if (a[0].kind != Datum::Kind::kValue) return Err("stack_runs_to_views takes the stack's output");
  Node* stack = a[0].value->node();
  if (stack->kind() != c10::aten::stack || stack->inputs().size() != 2) return false;
  Node* list = stack->input(0)->node();
  c10::optional<Datum> dim = DatumFromConstant(stack->input(1));
  if (list->kind() != c10::prim::ListConstruct || stack->input(0)->uses().size() != 1 || !dim ||
      dim->kind != Datum::Kind::kInt || dim->i < 0) {
    return false;
  }
  int64_t e = dim->i;
  std::vector<StackRun> runs;
  for (const StackRun& run : FindStackRuns(list->inputs())) {
    Node* unpack = run.head.source->output()->uses()[0].user;
    if (run.head.source->owningBlock() != stack->owningBlock()) continue;
    if (ZeroGradientsAdded(unpack, list) > kMaxZeroGradientsAdded) continue;
    if (ctx.legal && !ctx.legal({run.head.source, unpack})) continue;
    runs.push_back(run);
  }
  if (runs.empty()) return false;
  Graph* g = stack->owningGraph();
  WithInsertPoint guard(stack);
  std::vector<Value*> parts;
  auto members = list->inputs();
  size_t next_run = 0;
  for (size_t k = 0; k < members.size();) {
    if (next_run < runs.size() && runs[next_run].first == k) {
      parts.push_back(StackRunAsView(g, runs[next_run], e));
      k += runs[next_run++].count;
    } else {
      parts.push_back(g->insert(c10::aten::unsqueeze, {members[k++], e}));
    }
  }
  Value* out = parts[0];
  if (parts.size() > 1) {
    Value* joined = g->insertNode(g->createList(c10::TensorType::get(), parts))->output();
    out = g->insert(c10::aten::cat, {joined, e});
  }
  out->setType(a[0].value->type());
  a[0].value->replaceAllUsesWith(out);
  return true;
}

}  // namespace rule_functions
}  // namespace internal
}  // namespace sentier
