// normalize_split_family.cc — one canonical form for the split/cat family (see passes.h).
//
// Each rewrite here is an identity that holds for every input the original accepts:
//   concat(xs, d) == cat(xs, d);  split(x, [s...], d) == split_with_sizes(x, [s...], d);
//   split(x, s, d) == split_with_sizes(x, [s, ..., rest], d) when x.size(d) is static;
//   op(..., -k) == op(..., rank - k);  parts[k] == ListUnpack(parts)[k];
//   parts[a:b:c] == [ListUnpack(parts)[i] for i in range(a, b, c)] (a new list either way);
//   items.extend(parts) == items.append(p) for each piece p, in order;
//   list(parts) == [ListUnpack(parts)[i] for every i], and list([a, b]) == [a, b] when nothing
//   writes the first list (a new list either way).
// Sizes and ranks come from the facts or IR types, and through the pieces of a split with
// constant sections (KnownSize), so that the splits of pieces a loop unrolling made are
// normalized too.
#include "passes/canonicalize/passes.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include "absl/container/flat_hash_set.h"
#include "passes/internal/rule_eval.h"

namespace sentier {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;
using torch::jit::WithInsertPoint;

const c10::Symbol kConcat = c10::Symbol::fromQualString("aten::concat");
const c10::Symbol kConcatenate = c10::Symbol::fromQualString("aten::concatenate");
const c10::Symbol kSplitWithSizes = c10::Symbol::fromQualString("aten::split_with_sizes");
const c10::Symbol kUnsafeSplit = c10::Symbol::fromQualString("aten::unsafe_split");
const c10::Symbol kUnsafeSplitWithSizes =
    c10::Symbol::fromQualString("aten::unsafe_split_with_sizes");
const c10::Symbol kUnsafeChunk = c10::Symbol::fromQualString("aten::unsafe_chunk");
const c10::Symbol kGetItem = c10::Symbol::fromQualString("aten::__getitem__");
const c10::Symbol kLen = c10::Symbol::fromQualString("aten::len");

void CollectNodes(torch::jit::Block* b, std::vector<Node*>* out) {
  for (Node* n : b->nodes()) {
    if (NormalizeSplitFamilyLooksAt(n->kind())) out->push_back(n);
    for (torch::jit::Block* sub : n->blocks()) CollectNodes(sub, out);
  }
}

c10::optional<int64_t> ConstInt(Value* v) { return torch::jit::constant_as<int64_t>(v); }

// The split_with_sizes (constant sections and dim) that `v` is a piece of, or nullptr.
Node* SplitOfPiece(Value* v) {
  Node* unpack = v->node();
  if (unpack->kind() != c10::prim::ListUnpack) return nullptr;
  Node* split = unpack->input(0)->node();
  c10::optional<std::vector<int64_t>> sections = internal::SplitSections(split);
  if (!sections || sections->size() != unpack->outputs().size() || !ConstInt(split->input(2))) {
    return nullptr;
  }
  return split;
}

// KnownRank / KnownSize: the rank, and the static size of a dim, of a tensor value: from the
// facts or the IR type; else, for a piece of a split_with_sizes with constant sections, those of
// the split's input, with the piece's section on the split dim (a constant whatever the batch).
// Pieces made after the facts were recorded (a loop over a split's pieces, unrolled) have no
// facts of their own; the splits of those pieces (`for p in parts: torch.split(p, 5, 1)`) are
// normalized, and the loops over their pieces unrolled, through this.
c10::optional<int64_t> KnownRank(Value* v, const ShapeFacts* facts, int depth = 0) {
  if (c10::optional<int64_t> r = internal::StaticRank(v, facts)) return r;
  Node* split = depth < 32 ? SplitOfPiece(v) : nullptr;
  if (split == nullptr) return c10::nullopt;
  return KnownRank(split->input(0), facts, depth + 1);
}

c10::optional<int64_t> KnownSize(Value* v, int64_t dim, const ShapeFacts* facts, int depth = 0) {
  if (c10::optional<int64_t> s = internal::StaticSize(v, dim, facts)) return s;
  Node* split = depth < 32 ? SplitOfPiece(v) : nullptr;
  if (split == nullptr) return c10::nullopt;
  int64_t split_dim = *ConstInt(split->input(2));
  if (dim < 0 || split_dim < 0) {
    c10::optional<int64_t> rank = KnownRank(v, facts, depth);
    if (!rank) return c10::nullopt;
    if (dim < 0) dim += *rank;
    if (split_dim < 0) split_dim += *rank;
    if (dim < 0 || split_dim < 0) return c10::nullopt;
  }
  if (dim == split_dim) return (*internal::SplitSections(split))[v->offset()];
  return KnownSize(split->input(0), dim, facts, depth + 1);
}

bool IsIntList(Value* v) {
  auto lt = v->type()->cast<c10::ListType>();
  return lt && lt->getElementType()->kind() == c10::TypeKind::IntType;
}

// Replaces `n` by a node of kind `kind` with the given inputs (positional, in the schema's
// order: every replacement here is an overload whose arguments are exactly these); outputs keep
// their types. The node is created directly: Graph::insert would match the schema anew for each
// of the 20k splits of a large graph.
Node* ReplaceNode(Node* n, c10::Symbol kind, std::vector<torch::jit::NamedValue> inputs,
                  ShapeFacts* facts) {
  Graph* g = n->owningGraph();
  std::vector<Value*> values;
  for (const torch::jit::NamedValue& v : inputs) values.push_back(v.value(*g));
  Node* created = g->create(kind, values, 1);
  created->insertBefore(n);
  created->copyMetadata(n);
  Value* out = created->output();
  out->setType(n->output()->type());
  n->output()->replaceAllUsesWith(out);
  if (facts != nullptr) facts->Propagate(n->output(), out);
  n->destroy();
  return created;
}

std::vector<torch::jit::NamedValue> InputsOf(Node* n) {
  std::vector<torch::jit::NamedValue> v;
  for (Value* in : n->inputs()) v.emplace_back(in);
  return v;
}

// Sections of split(x, size, d) / chunk(x, chunks, d) for a static dim size `total`.
std::vector<int64_t> SplitSizes(int64_t total, int64_t size) {
  std::vector<int64_t> out;
  if (size <= 0) return out;
  for (int64_t off = 0; off < total; off += size) out.push_back(std::min(size, total - off));
  if (out.empty()) out.push_back(0);
  return out;
}

// Replaces nodes in place in `nodes` (a replaced node's slot gets its replacement), so the list
// stays valid for the steps after it without walking the graph again.
bool NormalizeSpellings(Graph* g, std::vector<Node*>& nodes, ShapeFacts* facts) {
  bool changed = false;
  for (Node*& n : nodes) {
    c10::Symbol k = n->kind();
    if ((k == kConcat || k == kConcatenate) && n->inputs().size() == 2) {
      n = ReplaceNode(n, c10::aten::cat, InputsOf(n), facts);
      changed = true;
    } else if (k == kUnsafeChunk && n->inputs().size() == 3) {
      n = ReplaceNode(n, c10::aten::chunk, InputsOf(n), facts);
      changed = true;
    } else if (k == kUnsafeSplitWithSizes && n->inputs().size() == 3) {
      n = ReplaceNode(n, kSplitWithSizes, InputsOf(n), facts);
      changed = true;
    } else if ((k == c10::aten::split || k == kUnsafeSplit) && n->inputs().size() == 3) {
      if (IsIntList(n->input(1))) {
        n = ReplaceNode(n, kSplitWithSizes, InputsOf(n), facts);
        changed = true;
        continue;
      }
      c10::optional<int64_t> size = ConstInt(n->input(1));
      c10::optional<int64_t> dim = ConstInt(n->input(2));
      if (!size || !dim) continue;
      c10::optional<int64_t> total = KnownSize(n->input(0), *dim, facts);
      if (!total || *size <= 0) continue;
      std::vector<int64_t> sizes = SplitSizes(*total, *size);
      Value* c = nullptr;
      {
        WithInsertPoint guard(n);
        c = g->insertConstant(c10::IValue(sizes));
      }
      n = ReplaceNode(n, kSplitWithSizes, {n->input(0), c, n->input(2)}, facts);
      changed = true;
    } else if (k == c10::aten::chunk && n->inputs().size() == 3) {
      c10::optional<int64_t> chunks = ConstInt(n->input(1));
      c10::optional<int64_t> dim = ConstInt(n->input(2));
      if (!chunks || !dim || *chunks <= 0) continue;
      c10::optional<int64_t> total = KnownSize(n->input(0), *dim, facts);
      if (!total) continue;
      int64_t size = (*total + *chunks - 1) / *chunks;
      if (size == 0) continue;
      std::vector<int64_t> sizes = SplitSizes(*total, size);
      Value* c = nullptr;
      {
        WithInsertPoint guard(n);
        c = g->insertConstant(c10::IValue(sizes));
      }
      n = ReplaceNode(n, kSplitWithSizes, {n->input(0), c, n->input(2)}, facts);
      changed = true;
    }
  }
  return changed;
}

// Rank of the tensor that `n`'s dim argument refers to.
c10::optional<int64_t> DimRank(Node* n, const ShapeFacts* facts) {
  c10::Symbol k = n->kind();
  if (k == c10::aten::cat || k == c10::aten::stack) {
    Node* list = n->input(0)->node();
    if (list->kind() != c10::prim::ListConstruct) return c10::nullopt;
    for (Value* v : list->inputs()) {
      c10::optional<int64_t> r = KnownRank(v, facts);
      if (r) return k == c10::aten::stack ? *r + 1 : *r;
    }
    return c10::nullopt;
  }
  c10::optional<int64_t> r = KnownRank(n->input(0), facts);
  if (r && k == c10::aten::unsqueeze) return *r + 1;
  return r;
}

bool NormalizeDims(Graph* g, const std::vector<Node*>& nodes, ShapeFacts* facts) {
  bool changed = false;
  for (Node* n : nodes) {
    c10::Symbol k = n->kind();
    int dim_index = -1;
    if ((k == c10::aten::split || k == kSplitWithSizes || k == c10::aten::chunk) &&
        n->inputs().size() == 3) {
      dim_index = 2;
    } else if ((k == c10::aten::unbind || k == c10::aten::cat || k == c10::aten::stack ||
                k == c10::aten::unsqueeze) &&
               n->inputs().size() == 2) {
      dim_index = 1;
    } else if (k == c10::aten::squeeze && n->inputs().size() == 2) {
      dim_index = 1;
    } else if ((k == c10::aten::select && n->inputs().size() == 3) ||
               (k == c10::aten::slice && n->inputs().size() == 5) ||
               (k == c10::aten::narrow && n->inputs().size() == 4)) {
      dim_index = 1;
    }
    if (dim_index < 0) continue;
    c10::optional<int64_t> dim = ConstInt(n->input(dim_index));
    if (!dim || *dim >= 0) continue;
    c10::optional<int64_t> rank = DimRank(n, facts);
    if (!rank || *dim + *rank < 0) continue;
    WithInsertPoint guard(n);
    n->replaceInput(dim_index, g->insertConstant(*dim + *rank));
    changed = true;
  }
  return changed;
}

// Does any use of `list` possibly mutate it or let it escape where we cannot see?
bool ListIsReadOnly(Value* list) {
  for (const torch::jit::Use& u : list->uses()) {
    c10::Symbol k = u.user->kind();
    if (k == c10::prim::ListUnpack || k == c10::prim::Return) continue;
    const c10::FunctionSchema* schema = u.user->maybeSchema();
    if (schema == nullptr || u.offset >= schema->arguments().size()) return false;
    const auto& alias = schema->arguments()[u.offset].alias_info();
    if (alias && alias->isWrite()) return false;
  }
  return true;
}

// Number of pieces of a split-family list value, when known.
c10::optional<int64_t> PieceCount(Value* list, const ShapeFacts* facts) {
  Node* n = list->node();
  if (n->kind() == kSplitWithSizes) {
    auto sizes = torch::jit::toIValue(n->input(1));
    if (sizes && sizes->isIntList()) return static_cast<int64_t>(sizes->toIntVector().size());
  }
  if (n->kind() == c10::aten::unbind && n->inputs().size() == 2) {
    c10::optional<int64_t> dim = ConstInt(n->input(1));
    if (dim) {
      c10::optional<int64_t> s = KnownSize(n->input(0), *dim, facts);
      if (s) return s;
    }
  }
  for (const torch::jit::Use& u : list->uses()) {
    if (u.user->kind() == c10::prim::ListUnpack) {
      return static_cast<int64_t>(u.user->outputs().size());
    }
  }
  return c10::nullopt;
}

// items.extend(parts) of another list: one append per piece, which remove_list_mutation then
// folds with the list's other appends.
bool IsExtendBy(Node* n, Value* list) {
  static const c10::Symbol kExtend = c10::Symbol::fromQualString("aten::extend");
  return n->kind() == kExtend && n->inputs().size() == 2 && n->input(1) == list &&
         n->input(0) != list;
}

// parts[a:b:c] of a list of tensors: aten::slice.t(list, start, end, step).
bool IsListSlice(Node* n) {
  return n->kind() == c10::aten::slice && n->inputs().size() == 4 && n->outputs().size() == 1 &&
         n->input(0)->type()->kind() == c10::TypeKind::ListType;
}

// The indices parts[start:end:step] selects from `count` pieces, as Python slices a list (None
// bounds, negative bounds counted from the end, clamped); nullopt unless the bounds are constants
// and the step a positive constant.
c10::optional<std::vector<int64_t>> SliceIndices(Node* slice, int64_t count) {
  auto bound = [&](Value* v, int64_t none) -> c10::optional<int64_t> {
    if (v->type()->kind() == c10::TypeKind::NoneType) return none;
    c10::optional<int64_t> b = ConstInt(v);
    if (!b) return c10::nullopt;
    int64_t x = *b < 0 ? *b + count : *b;
    return std::max<int64_t>(0, std::min(x, count));
  };
  c10::optional<int64_t> start = bound(slice->input(1), 0);
  c10::optional<int64_t> end = bound(slice->input(2), count);
  c10::optional<int64_t> step = ConstInt(slice->input(3));
  if (!start || !end || !step || *step <= 0) return c10::nullopt;
  std::vector<int64_t> out;
  for (int64_t i = *start; i < *end; i += *step) out.push_back(i);
  return out;
}

// list(parts): aten::list(t[] l), a shallow copy of a list.
bool IsListCopy(Node* n) {
  return n->kind() == c10::aten::list && n->inputs().size() == 1 && n->outputs().size() == 1 &&
         n->input(0)->type()->kind() == c10::TypeKind::ListType;
}

bool IsSplitFamily(Node* n) {
  c10::Symbol k = n->kind();
  return k == kSplitWithSizes || k == c10::aten::split || k == c10::aten::chunk ||
         k == c10::aten::unbind || k == kUnsafeSplit || k == kUnsafeSplitWithSizes ||
         k == kUnsafeChunk;
}

// parts = [a, b, c]; parts[k] is the k-th element when the list is never mutated.
bool IndexConstructedLists(const std::vector<Node*>& nodes) {
  bool changed = false;
  for (Node* n : nodes) {
    if (n->kind() != kGetItem || n->inputs().size() != 2) continue;
    Node* list = n->input(0)->node();
    if (list->kind() != c10::prim::ListConstruct || !ListIsReadOnly(n->input(0))) continue;
    c10::optional<int64_t> idx = ConstInt(n->input(1));
    int64_t count = static_cast<int64_t>(list->inputs().size());
    if (!idx) continue;
    int64_t i = *idx < 0 ? *idx + count : *idx;
    if (i < 0 || i >= count) continue;
    n->output()->replaceAllUsesWith(list->input(i));
    changed = true;
  }
  return changed;
}

// list([a, b, c]) is a new list of the same elements: a new prim::ListConstruct.
bool CopyConstructedLists(Graph* g, const std::vector<Node*>& nodes) {
  bool changed = false;
  for (Node* n : nodes) {
    if (!IsListCopy(n)) continue;
    Node* list = n->input(0)->node();
    if (list->kind() != c10::prim::ListConstruct || !ListIsReadOnly(n->input(0))) continue;
    WithInsertPoint guard(n);
    Node* lc = g->insertNode(g->createList(n->output()->type()->expectRef<c10::ListType>().getElementType(),
                                           list->inputs()));
    n->output()->replaceAllUsesWith(lc->output());  // the copy is left for dead_code
    changed = true;
  }
  return changed;
}

// Whether a use of the split's `list` reads pieces that a ListUnpack of it would give.
bool HasPieceReadingUse(Value* list) {
  bool interesting = false;
  for (const torch::jit::Use& u : list->uses()) {
    c10::Symbol k = u.user->kind();
    interesting |= k == kGetItem || k == kLen ||
                   ((k == c10::aten::cat || k == c10::aten::stack) && u.offset == 0) ||
                   IsListSlice(u.user) || IsExtendBy(u.user, list) || IsListCopy(u.user);
  }
  return interesting;
}

// The ListUnpack of the split `n`'s `list` into its `count` pieces: the one it has, or a new one
// after `n`; nullptr when the one it has unpacks another count.
Node* PieceUnpack(Graph* g, Node* n, Value* list, int64_t count) {
  Node* unpack = nullptr;
  for (const torch::jit::Use& u : list->uses()) {
    if (u.user->kind() == c10::prim::ListUnpack) unpack = u.user;
  }
  if (unpack != nullptr && static_cast<int64_t>(unpack->outputs().size()) != count) return nullptr;
  if (unpack == nullptr) {
    WithInsertPoint guard(n->next());
    unpack = g->insertNode(g->createListUnpack(list, static_cast<size_t>(count)));
  }
  return unpack;
}

// The use `u` of a split's `list` of `count` pieces reads them from `unpack` instead: an index,
// len, a cat or stack, extend, a copy or a slice of the list. True when it changed the graph.
bool ReadUseThroughUnpack(Graph* g, const torch::jit::Use& u, Value* list, Node* unpack, int64_t count,
                          ShapeFacts* facts) {
  Node* user = u.user;
  c10::Symbol k = user->kind();
  if (k == kGetItem && user->inputs().size() == 2) {
    c10::optional<int64_t> idx = ConstInt(user->input(1));
    if (!idx) return false;
    int64_t i = *idx < 0 ? *idx + count : *idx;
    if (i < 0 || i >= count) return false;
    user->output()->replaceAllUsesWith(unpack->output(i));
    if (facts != nullptr) facts->Propagate(user->output(), unpack->output(i));
    user->destroy();
    return true;
  }
  if (k == kLen && user->inputs().size() == 1) {
    Value* c = nullptr;
    {
      WithInsertPoint guard(user);
      c = g->insertConstant(count);
    }
    user->output()->replaceAllUsesWith(c);
    user->destroy();
    return true;
  }
  if ((k == c10::aten::cat || k == c10::aten::stack) && u.offset == 0) {
    WithInsertPoint guard(user);
    std::vector<Value*> pieces(unpack->outputs().begin(), unpack->outputs().end());
    Node* lc = g->insertNode(g->createList(c10::TensorType::get(), pieces));
    user->replaceInput(0, lc->output());
    return true;
  }
  if (IsExtendBy(user, list)) {
    WithInsertPoint guard(user);
    for (Value* piece : unpack->outputs()) g->insert(c10::aten::append, {user->input(0), piece});
    user->destroy();  // not in `nodes`: extend is no kind this pass looks at
    return true;
  }
  if (IsListCopy(user)) {
    std::vector<Value*> pieces(unpack->outputs().begin(), unpack->outputs().end());
    WithInsertPoint guard(user);
    Node* lc = g->insertNode(g->createList(c10::TensorType::get(), pieces));
    user->output()->replaceAllUsesWith(lc->output());  // the copy is left for dead_code
    return true;
  }
  if (IsListSlice(user)) {
    c10::optional<std::vector<int64_t>> which = SliceIndices(user, count);
    if (!which) return false;
    std::vector<Value*> pieces;
    for (int64_t i : *which) pieces.push_back(unpack->output(i));
    WithInsertPoint guard(user);
    Node* lc = g->insertNode(g->createList(c10::TensorType::get(), pieces));
    user->output()->replaceAllUsesWith(lc->output());  // the slice is left for dead_code
    return true;
  }
  return false;
}

// The split family's lists that are read by index, len, cat/stack, extend, copy or slice, and
// never written, are read through a ListUnpack of their pieces.
bool SplitListsToUnpack(Graph* g, const std::vector<Node*>& nodes, ShapeFacts* facts) {
  bool changed = false;
  for (Node* n : nodes) {
    if (!IsSplitFamily(n) || n->outputs().size() != 1) continue;
    Value* list = n->output();
    if (!HasPieceReadingUse(list) || !ListIsReadOnly(list)) continue;
    c10::optional<int64_t> count = PieceCount(list, facts);
    if (!count) continue;
    Node* unpack = PieceUnpack(g, n, list, *count);
    if (unpack == nullptr) continue;
    std::vector<torch::jit::Use> uses = list->uses();
    for (const torch::jit::Use& u : uses) {
      if (ReadUseThroughUnpack(g, u, list, unpack, *count, facts)) changed = true;
    }
  }
  return changed;
}

// Lists are read by index through their elements or pieces: constructed lists directly, the
// split family's through a ListUnpack.
bool ListIndexingToUnpack(Graph* g, const std::vector<Node*>& nodes, ShapeFacts* facts) {
  bool changed = IndexConstructedLists(nodes);
  changed |= CopyConstructedLists(g, nodes);
  changed |= SplitListsToUnpack(g, nodes, facts);
  return changed;
}

}  // namespace

// The kinds the steps look at; the others are left out of their lists, which are walked several
// times (on a 100k-node graph every node visited costs a cache miss).
bool NormalizeSplitFamilyLooksAt(c10::Symbol k) {
  static const auto* kinds = new absl::flat_hash_set<c10::Symbol>{
      kConcat,          kConcatenate,        kSplitWithSizes,      kUnsafeSplit,
      kUnsafeSplitWithSizes, kUnsafeChunk,   kGetItem,             c10::aten::split,
      c10::aten::chunk, c10::aten::unbind,   c10::aten::cat,       c10::aten::stack,
      c10::aten::unsqueeze, c10::aten::squeeze, c10::aten::select, c10::aten::slice,
      c10::aten::narrow, c10::aten::list};
  return kinds->contains(k);
}

bool NormalizeSplitFamily(const std::shared_ptr<Graph>& graph, ShapeFacts* facts,
                          PassCounters* counters, const std::vector<Node*>* given) {
  std::vector<Node*> nodes;
  if (given != nullptr) {
    nodes = *given;
  } else {
    CollectNodes(graph->block(), &nodes);
  }
  bool spellings = NormalizeSpellings(graph.get(), nodes, facts);
  bool dims = NormalizeDims(graph.get(), nodes, facts);
  bool lists = ListIndexingToUnpack(graph.get(), nodes, facts);
  if (counters != nullptr) {
    (*counters)["normalize_split_family.spellings"] += spellings;
    (*counters)["normalize_split_family.dims"] += dims;
    (*counters)["normalize_split_family.list_indexing"] += lists;
  }
  return spellings || dims || lists;
}

}  // namespace sentier
