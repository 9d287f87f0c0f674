// internal/group_search.cc — the group search (see group_search.h): members of a group rule are
// matched and keyed, bucketed by block and key, and each bucket is cut greedily into groups of
// independent members; before a group is rewritten, the members whose batch-following inputs
// cannot be proved equal-shaped to the first member's are left out, and movable inputs (constants,
// attribute reads) are hoisted to the batched op's insertion point.
#include "passes/internal/group_search.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "passes/debug_log.h"
#include "passes/internal/expr_eval.h"
#include "passes/internal/matcher.h"
#include "passes/internal/rule_eval.h"
#include "passes/remove_dead_nodes.h"

namespace sentier {
namespace internal {
namespace {

// The smallest group the rule rewrites in this layout (Rule::stacked_min_group).
int64_t MinGroup(const CompiledRule& rule, const RuleEnvironment& env) {
  return env.stacked_parameters && rule.ast.stacked_min_group > 0 ? rule.ast.stacked_min_group : rule.ast.min_group;
}

// Nodes that can be moved to an earlier point of their block without changing anything: constants,
// attribute reads of the module, and int-list literals.
bool Hoistable(Node* n) {
  if (n->kind() == c10::prim::Constant) return true;
  if (n->kind() == c10::prim::GetAttr) {
    Value* obj = n->input(0);
    return obj->node()->kind() == c10::prim::Param || Hoistable(obj->node());
  }
  if (n->kind() == c10::prim::ListConstruct) {
    for (Value* v : n->inputs()) {
      if (v->node()->kind() != c10::prim::Constant) return false;
    }
    return true;
  }
  return false;
}

// A read of one element of a list or dict the graph takes as input (`ids["user"]`,
// `indices[3]`) at a constant key, where nothing but such reads uses the container: it reads the
// same tensor wherever it stands, so it can move earlier. Unlike Hoistable's values it follows
// the batch, so it is movable but not static.
bool InputElementRead(Node* n) {
  if (n->kind() != c10::aten::__getitem__ || n->inputs().size() != 2) return false;
  Value* container = n->input(0);
  if (container->node()->kind() != c10::prim::Param) return false;
  c10::TypeKind kind = container->type()->kind();
  if (kind != c10::TypeKind::ListType && kind != c10::TypeKind::DictType) return false;
  if (n->input(1)->node()->kind() != c10::prim::Constant) return false;
  for (const torch::jit::Use& u : container->uses()) {
    if (u.user->kind() != c10::aten::__getitem__ || u.offset != 0) return false;
  }
  return true;
}

bool Movable(Node* n) { return Hoistable(n) || InputElementRead(n); }

// IsBefore: program order of two nodes of one block (nullptr = block start).
bool IsBefore(Node* a, Node* b) {
  if (a == nullptr) return b != nullptr;
  if (b == nullptr) return false;
  return a->isBefore(b);
}

// WidenSpan: widens a member's span in `block` by its node `n`: `*last_def` becomes the latest
// definition (in `block`) of what `n` reads, `*first_use` the earliest user (in `block`) of what it
// writes. Movable reads, the return, and nodes of the member itself (`inside`, when given) do not
// count. nullptr stands for the block's start (a definition) and for no use (a use).
void WidenSpan(Node* n, torch::jit::Block* block,
               const absl::flat_hash_map<const Node*, int>* inside, Node** last_def,
               Node** first_use) {
  for (Value* in : n->inputs()) {
    if ((inside != nullptr && inside->contains(in->node())) || Movable(in->node())) continue;
    Node* def = DefinitionIn(in, block);
    if (def != nullptr && IsBefore(*last_def, def)) *last_def = def;
  }
  for (Value* o : n->outputs()) {
    for (const torch::jit::Use& u : o->uses()) {
      if (inside != nullptr && inside->contains(u.user)) continue;
      Node* user = OwnerIn(u.user, block);
      if (user == nullptr || user->kind() == c10::prim::Return) continue;
      if (*first_use == nullptr || user->isBefore(*first_use)) *first_use = user;
    }
  }
}

}  // namespace

// FollowsBatch: a tensor value whose size may change with the batch (a dynamic dim in the facts,
// or no facts at all); module parameters and constants never do.
bool FollowsBatch(Value* v, const ShapeFacts* facts) {
  if (v->type()->kind() != c10::TypeKind::TensorType) return false;
  if (Hoistable(v->node())) return false;
  const TensorFact* f = facts != nullptr ? facts->Find(v) : nullptr;
  if (f == nullptr) return true;
  for (bool d : f->dynamic) {
    if (d) return true;
  }
  return false;
}

// Moves the definition of `v` (and what it needs) right after `*cursor` in `*cursor`'s block,
// advancing the cursor, when it is movable and defined later; returns false when `v` is defined
// later and cannot move. Inputs move first, so every moved node follows what it reads.
bool HoistAfter(Value* v, Node** cursor) {
  Node* n = v->node();
  if (n->owningBlock() != (*cursor)->owningBlock() || n->kind() == c10::prim::Param) return true;
  if (n == *cursor || n->isBefore(*cursor)) return true;
  if (!Movable(n)) return false;
  for (Value* in : n->inputs()) {
    if (!HoistAfter(in, cursor)) return false;
  }
  n->moveAfter(*cursor);
  *cursor = n;
  return true;
}

namespace {

bool OneOf(c10::Symbol k, std::initializer_list<const char*> kinds) {
  for (const char* kind : kinds) {
    if (k == c10::Symbol::fromQualString(kind)) return true;
  }
  return false;
}

// Ops whose result has the shape of their first input, whatever their other arguments.
bool KeepsInputShape(c10::Symbol k) {
  return OneOf(k, {"aten::relu", "aten::tanh", "aten::sigmoid", "aten::silu", "aten::gelu",
                   "aten::detach", "aten::nan_to_num", "aten::dropout", "aten::layer_norm",
                   "aten::neg", "aten::abs", "aten::exp", "aten::contiguous", "aten::softmax",
                   "aten::to"});
}

// Pointwise ops of a tensor and other operands (a tensor operand may broadcast the first one).
bool PointwiseWithOperands(c10::Symbol k) {
  return OneOf(k, {"aten::add", "aten::sub", "aten::mul", "aten::div", "aten::clamp"});
}

// OneElementTensorConstant: a tensor constant of one element and at most one dim, as tracing
// records a Python number in `x * 2.0`: against a tensor of rank 1 or more it broadcasts without
// changing the shape.
bool OneElementTensorConstant(Value* v) {
  if (v->node()->kind() != c10::prim::Constant || v->type()->kind() != c10::TypeKind::TensorType) return false;
  c10::optional<c10::IValue> iv = torch::jit::toIValue(v);
  return iv && iv->isTensor() && iv->toTensor().numel() == 1 && iv->toTensor().dim() <= 1;
}

// Pointwise ops whose result has the shape of their first input when no other argument is a
// tensor, or only a one-element tensor constant (`x * 0.5`, `x.clamp(0, 6)`, traced `x * 2.0`).
bool KeepsInputShapeWithScalars(Node* n) {
  if (!PointwiseWithOperands(n->kind())) return false;
  for (size_t i = 1; i < n->inputs().size(); ++i) {
    if (OneElementTensorConstant(n->input(i))) continue;  // traced `x * 2.0`
    if (n->input(i)->type()->kind() == c10::TypeKind::TensorType ||
        n->input(i)->type()->kind() == c10::TypeKind::OptionalType) {
      return false;
    }
  }
  return true;
}

// CollectDimZeroJoins: the nodes that make the tensors they join agree on dim 0 and that `v`
// reaches through ops whose result keeps `v`'s dim 0 as its own (KeepsInputShape, pointwise ops
// with scalars, and a linear on a tensor of rank 2 or more): an `aten::cat` along another dim
// and an `aten::stack` (any dim), each of a ListConstruct used by nothing else (so no element
// can be taken out before the join). `rank`: the rank of `v` and so of every tensor on the path;
// `budget` bounds the uses looked at.
void CollectDimZeroJoins(Value* v, int64_t rank, int* budget, std::vector<Node*>* joins) {
  for (const torch::jit::Use& u : v->uses()) {
    if (--*budget < 0) return;
    Node* user = u.user;
    if (user->kind() == c10::prim::ListConstruct) {
      const auto& list_uses = user->output()->uses();
      bool only_joins = !list_uses.empty();
      std::vector<Node*> found;
      for (const torch::jit::Use& lu : list_uses) {
        Node* j = lu.user;
        c10::optional<Datum> dim;
        if (lu.offset == 0 && j->inputs().size() == 2) dim = DatumFromConstant(j->input(1));
        if (!dim || dim->kind != Datum::Kind::kInt) {
          only_joins = false;
          break;
        }
        const int64_t d = dim->i < 0 ? dim->i + rank : dim->i;
        if (j->kind() == c10::aten::stack || (j->kind() == c10::aten::cat && d > 0 && d < rank)) {
          found.push_back(j);
        } else if (j->kind() != c10::aten::cat) {
          only_joins = false;
          break;
        }
      }
      if (only_joins) joins->insert(joins->end(), found.begin(), found.end());
      continue;
    }
    if (u.offset != 0 || user->outputs().size() != 1) continue;
    const bool keeps_dim0 = user->kind() == c10::aten::linear ? rank >= 2
                                                              : KeepsInputShape(user->kind()) ||
                                                                    KeepsInputShapeWithScalars(user);
    if (keeps_dim0) CollectDimZeroJoins(user->output(), rank, budget, joins);
  }
}

// JoinedOnDimZero: `a` and `b` agree on every dim but dim 0 (static and equal in the facts, rank
// 2 or more), and the graph joins them on dim 0 wherever it returns: tensors that keep their dim
// 0 reach one cat along another dim (or one stack) that runs whenever the graph returns — in
// its top block, or in the block that defines both. Equal sizes then follow for every input the
// graph accepts: any other input makes the join raise. This is how per-feature list and dict
// inputs (`xs[i]`, `feats["user"]`, separate tensor arguments) are proven equal-shaped.
bool JoinedOnDimZero(Value* a, Value* b, const ShapeFacts* facts) {
  if (facts == nullptr) return false;
  const TensorFact* fa = facts->Find(a);
  const TensorFact* fb = facts->Find(b);
  if (fa == nullptr || fb == nullptr || fa->sizes.size() != fb->sizes.size()) return false;
  const int64_t rank = static_cast<int64_t>(fa->sizes.size());
  if (rank < 2 || fa->dynamic.size() != fa->sizes.size() || fb->dynamic.size() != fb->sizes.size()) {
    return false;
  }
  for (int64_t d = 1; d < rank; ++d) {
    if (fa->dynamic[d] || fb->dynamic[d] || fa->sizes[d] != fb->sizes[d]) return false;
  }
  if (!fa->dynamic[0] && !fb->dynamic[0] && fa->sizes[0] != fb->sizes[0]) return false;
  std::vector<Node*> ja, jb;
  int budget = 256;
  CollectDimZeroJoins(a, rank, &budget, &ja);
  budget = 256;
  CollectDimZeroJoins(b, rank, &budget, &jb);
  torch::jit::Block* top = a->owningGraph()->block();
  torch::jit::Block* defining = a->node()->owningBlock();
  for (Node* j : ja) {
    if (std::find(jb.begin(), jb.end(), j) == jb.end()) continue;
    if (j->owningBlock() == top ||
        (j->owningBlock() == defining && b->node()->owningBlock() == defining)) {
      return true;
    }
  }
  return false;
}

// EqualExtentSlices: two slices on one dim of static size (the same in every run the facts
// saw, not the batch), step 1, whose constant bounds lie within that size and span equally
// many elements (`X[:, 3:4]` and `X[:, 7:8]`, one column each).
bool EqualExtentSlices(Node* a, Node* b, const ShapeFacts* facts) {
  if (a->kind() != c10::aten::slice || a->inputs().size() != 5 || b->inputs().size() != 5) {
    return false;
  }
  int64_t v[2][4];  // dim, start, end, step
  Node* nodes[2] = {a, b};
  for (int s = 0; s < 2; ++s) {
    for (int k = 0; k < 4; ++k) {
      c10::optional<Datum> d = DatumFromConstant(nodes[s]->input(k + 1));
      if (!d || d->kind != Datum::Kind::kInt) return false;
      v[s][k] = d->i;
    }
  }
  if (v[0][0] != v[1][0] || v[0][0] < 0 || v[0][3] != 1 || v[1][3] != 1) return false;
  const TensorFact* f = facts != nullptr ? facts->Find(a->input(0)) : nullptr;
  if (f == nullptr || v[0][0] >= static_cast<int64_t>(f->sizes.size()) || f->dynamic[v[0][0]]) {
    return false;
  }
  const int64_t size = f->sizes[v[0][0]];
  for (int s = 0; s < 2; ++s) {
    if (v[s][1] < 0 || v[s][1] > v[s][2] || v[s][2] > size) return false;
  }
  return v[0][2] - v[0][1] == v[1][2] - v[1][1];
}

// SameShapeByConstruction: the cases ProvablySameShape proves from how a and b are made.
bool SameShapeByConstruction(Value* a, Value* b, const ShapeFacts* facts, int depth);

}  // namespace

// ProvablySameShape: a and b have equal sizes for every input the graph accepts, whatever the
// batch: the same value; pieces of one unbind, or equal sections of one split_with_sizes; pieces
// of two unbinds (or equal sections of two splits) on one dim of provably equal tensors;
// selections on one dim of provably equal tensors (any indices), and slices of them with equal
// constant bounds, or with bounds of equal extent on a static dim; the same shape-preserving op (pointwise, layer_norm, dropout, detach, linear
// with weights of equal static sizes) applied to provably equal-shaped tensors and equal
// constants; and tensors equal but for dim 0 that the graph joins on dim 0 (JoinedOnDimZero).
bool ProvablySameShape(Value* a, Value* b, const ShapeFacts* facts, int depth) {
  if (depth > 48) return false;
  return SameShapeByConstruction(a, b, facts, depth) || JoinedOnDimZero(a, b, facts);
}

namespace {

bool SameShapeByConstruction(Value* a, Value* b, const ShapeFacts* facts, int depth) {
  if (a == b) return true;
  if (depth > 48) return false;
  Node* na = a->node();
  Node* nb = b->node();
  if (na == nb && na->kind() == c10::prim::ListUnpack) {
    Node* src = na->input(0)->node();
    if (src->kind() == c10::aten::unbind) return true;
    c10::optional<std::vector<int64_t>> sizes = SplitSections(src);
    return sizes && (*sizes)[a->offset()] == (*sizes)[b->offset()];
  }
  if (na->kind() == c10::prim::ListUnpack && nb->kind() == c10::prim::ListUnpack) {
    // Pieces of two unbinds, or two splits, on the same dim of provably equal-shaped tensors;
    // for splits, the two pieces' sections must also be equal.
    Node* sa = na->input(0)->node();
    Node* sb = nb->input(0)->node();
    if (sa->kind() != sb->kind()) return false;
    size_t dim_index;
    if (sa->kind() == c10::aten::unbind) {
      dim_index = 1;
    } else {
      c10::optional<std::vector<int64_t>> za = SplitSections(sa);
      c10::optional<std::vector<int64_t>> zb = SplitSections(sb);
      if (!za || !zb || (*za)[a->offset()] != (*zb)[b->offset()]) return false;
      dim_index = 2;
    }
    if (sa->inputs().size() <= dim_index || sb->inputs().size() <= dim_index) return false;
    c10::optional<Datum> da = DatumFromConstant(sa->input(dim_index));
    c10::optional<Datum> db = DatumFromConstant(sb->input(dim_index));
    if (!da || !db || !da->Equal(*db)) return false;
    return ProvablySameShape(sa->input(0), sb->input(0), facts, depth + 1);
  }
  if (na->kind() != nb->kind() || na->inputs().size() != nb->inputs().size() ||
      na->outputs().size() != 1 || nb->outputs().size() != 1) {
    return false;
  }
  if (na->kind() == c10::aten::select || na->kind() == c10::aten::slice) {
    // Views shaped by their input and constant arguments: x.select(d, i) drops dim d whatever i
    // is (`sparse[:, 0]`, `sparse[:, 1]`), so only the dims must agree; a slice needs equal
    // dims, bounds and steps.
    const size_t compared = na->kind() == c10::aten::select ? 2 : na->inputs().size();
    bool equal_args = true;
    for (size_t k = 1; k < compared && equal_args; ++k) {
      c10::optional<Datum> da = DatumFromConstant(na->input(k));
      c10::optional<Datum> db = DatumFromConstant(nb->input(k));
      equal_args = da && db && da->Equal(*db);
    }
    if (!equal_args && !EqualExtentSlices(na, nb, facts)) return false;
    return ProvablySameShape(na->input(0), nb->input(0), facts, depth + 1);
  }
  if (!KeepsInputShape(na->kind()) && !PointwiseWithOperands(na->kind()) &&
      na->kind() != c10::aten::linear) {
    return false;
  }
  for (size_t k = 0; k < na->inputs().size(); ++k) {
    Value* x = na->input(k);
    Value* y = nb->input(k);
    if (x == y) continue;
    c10::optional<Datum> cx = DatumFromConstant(x);
    c10::optional<Datum> cy = DatumFromConstant(y);
    if (cx || cy) {
      if (!cx || !cy || !cx->Equal(*cy)) return false;
      continue;
    }
    if (!FollowsBatch(x, facts) && !FollowsBatch(y, facts)) {
      // Parameters and other static tensors (a linear's weight, a layer_norm's affine): their
      // sizes are fixed; they must be equal.
      const TensorFact* fx = facts != nullptr ? facts->Find(x) : nullptr;
      const TensorFact* fy = facts != nullptr ? facts->Find(y) : nullptr;
      if (fx == nullptr || fy == nullptr || fx->sizes != fy->sizes) return false;
      continue;
    }
    if (!ProvablySameShape(x, y, facts, depth + 1)) return false;
  }
  return true;
}

}  // namespace

bool MatchGroupMember(const CompiledRule& rule, Node* anchor, ShapeFacts* facts,
                      GroupMember* out, const RuleEnvironment& env) {
  GroupMember m;
  m.anchor = anchor;
  if (!MatchRule(rule, anchor, &m.bindings)) return false;
  EvalContext ctx = MakeContext(rule, anchor, facts, &m.bindings, nullptr, env);
  if (!ConstraintsHold(rule.ast.where, ctx)) return false;
  std::vector<std::string> key;
  for (const ExprPtr& k : rule.ast.key) {
    auto d = Eval(*k, ctx);
    if (!d.ok()) return false;
    key.push_back(d->DebugString());
  }
  m.key = absl::StrJoin(key, "|");
  torch::jit::Block* block = anchor->owningBlock();
  for (Node* n : m.bindings.matched_order) {
    if (n->owningBlock() != block) return false;
    WidenSpan(n, block, &m.bindings.matched, &m.last_input_def, &m.first_output_use);
  }
  *out = std::move(m);
  return true;
}

namespace {

// ApplyGroup: rewrites `members` (same block, same key, independent) as one group.
ApplyResult ApplyGroup(const CompiledRule& rule, const std::vector<GroupMember*>& all_members,
                       ShapeFacts* facts, const LegalityCheck& legal, std::string* error,
                       const RuleEnvironment& env) {
  if (all_members.empty()) return ApplyResult::kNoMatch;
  // Keys compare sizes seen on the samples; stacking needs equal sizes for every batch. Keep the
  // members whose batch-following values are provably shaped like the first member's.
  // A rule written for any batch sizes (`any_batch_size`: it concatenates and splits by runtime
  // sizes) needs no such proof.
  std::vector<GroupMember*> members = {all_members[0]};
  for (size_t i = 1; i < all_members.size(); ++i) {
    if (rule.ast.any_batch_size) {
      members.push_back(all_members[i]);
      continue;
    }
    bool same = true;
    for (const auto& [name, v0] : all_members[0]->bindings.values) {
      auto it = all_members[i]->bindings.values.find(name);
      if (it == all_members[i]->bindings.values.end()) {
        same = false;
        break;
      }
      // Only what goes into the batched op must agree; the members' own results may differ.
      if (all_members[0]->bindings.matched.contains(v0->node())) continue;
      if (FollowsBatch(v0, facts) && !ProvablySameShape(v0, it->second, facts, 0)) {
        same = false;
        break;
      }
    }
    if (same) members.push_back(all_members[i]);
  }
  if (static_cast<int64_t>(members.size()) < MinGroup(rule, env)) return ApplyResult::kNoMatch;
  Node* anchor = members[0]->anchor;
  torch::jit::Block* block = anchor->owningBlock();
  Bindings combined;
  Node* last_def = nullptr;
  for (size_t i = 0; i < members.size(); ++i) {
    const GroupMember& m = *members[i];
    if (m.anchor->owningBlock() != block) return ApplyResult::kNoMatch;
    for (const auto& [name, v] : m.bindings.values) combined.seqs[name].push_back(v);
    if (i == 0) combined.consts = m.bindings.consts;
    for (Node* n : m.bindings.matched_order) {
      if (!combined.matched.emplace(n, static_cast<int>(i)).second) return ApplyResult::kNoMatch;
      combined.matched_order.push_back(n);
    }
    if (IsBefore(last_def, m.last_input_def)) last_def = m.last_input_def;
  }
  for (const GroupMember* m : members) {
    if (m->first_output_use != nullptr && !IsBefore(last_def, m->first_output_use)) {
      return ApplyResult::kNoMatch;
    }
  }
  if (legal && !legal(combined.matched_order, anchor)) return ApplyResult::kIllegal;
  // Movable inputs defined after the insertion point (attribute reads next to each member's op)
  // move up to it, so the batched op can read them.
  Node* cursor = last_def != nullptr ? last_def : block->param_node();
  for (Node* n : combined.matched_order) {
    for (Value* in : n->inputs()) {
      if (combined.matched.contains(in->node())) continue;
      if (!HoistAfter(in, &cursor)) return ApplyResult::kNoMatch;
    }
  }
  EvalContext ctx = MakeContext(rule, anchor, facts, &combined, &legal, env);
  return Rewrite(rule, ctx, error);
}

// Whether no group of min_group live candidates of a one-node pattern can fit, so that the search
// would try no group and change nothing: then nobody needs to be matched or keyed. A member spans
// the gap between its latest input definition and its first output use, and the cut in
// ApplyGroupRule keeps a group only while the latest definition of all its members comes before
// their earliest use: the members' spans share a point. Whatever the keys, a tried group therefore
// needs min_group spans with a common point in one block. With one pattern node a member's span is
// the anchor's own, computed by the same WidenSpan as a matched member's. On a chain of
// candidates (each one reading what the previous one feeds) at most two spans overlap, and
// matching every candidate in every round was most of what the search cost.
bool NoGroupCanForm(const std::vector<Node*>& candidates, const CompiledRule& rule, const RuleEnvironment& env) {
  const int64_t min_group = MinGroup(rule, env);
  if (min_group < 2 || rule.nodes.size() != 1 || !rule.foreach.empty()) return false;
  if ((DebugCategories() & kGroups) != 0u) return false;  // the log lists every candidate
  // nullptr: the block's start (a definition) or no use (a use).
  struct Span {
    Node* last_def;
    Node* first_use;
  };
  absl::flat_hash_map<torch::jit::Block*, std::vector<Span>> spans;
  for (Node* n : candidates) {
    if (!HasLiveUses(n)) continue;  // never a member
    torch::jit::Block* block = n->owningBlock();
    Span span{nullptr, nullptr};
    WidenSpan(n, block, nullptr, &span.last_def, &span.first_use);  // the member's one node
    spans[block].push_back(span);
  }
  // Per block, spans by their start; a span shares a point with the earlier-starting spans that
  // are still open where it starts (their use comes after its definition).
  auto ends_before = [](Node* a, Node* b) {  // a's use comes before b's (nullptr: never)
    return a != nullptr && (b == nullptr || a->isBefore(b));
  };
  auto later_end = [&](const Span& a, const Span& b) { return ends_before(b.first_use, a.first_use); };
  for (auto& [block, list] : spans) {
    std::stable_sort(list.begin(), list.end(),
                     [](const Span& a, const Span& b) { return IsBefore(a.last_def, b.last_def); });
    std::vector<Span> open;  // a min-heap by first use
    for (const Span& s : list) {
      while (!open.empty() && open.front().first_use != nullptr &&
             !IsBefore(s.last_def, open.front().first_use)) {
        std::pop_heap(open.begin(), open.end(), later_end);
        open.pop_back();
      }
      open.push_back(s);
      std::push_heap(open.begin(), open.end(), later_end);
      if (static_cast<int64_t>(open.size()) >= min_group) return false;
    }
  }
  return true;
}

}  // namespace

bool ApplyGroupRule(const std::vector<Node*>& candidates, const CompiledRule& rule,
                    ShapeFacts* facts, const LegalityCheck& legal, const GroupReport& report,
                    const RuleEnvironment& env) {
  if (NoGroupCanForm(candidates, rule, env)) return false;
  const std::string& name = rule.ast.name;
  std::vector<std::string> bucket_order;
  // The members in candidate order; a bucket lists its members' indices.
  std::vector<GroupMember> members;
  members.reserve(candidates.size());
  absl::flat_hash_map<std::string, std::vector<size_t>> buckets;
  for (Node* n : candidates) {
    if (!HasLiveUses(n)) continue;  // replaced earlier in this round, or feeding only such nodes
    GroupMember m;
    bool ok = MatchGroupMember(rule, n, facts, &m, env);
    SENTIER_DEBUG(kGroups, "group " << name << " candidate %" << n->output(0)->debugName()
                                    << " -> " << (ok ? m.key : std::string("no match")));
    if (!ok) continue;
    std::string key = absl::StrCat(reinterpret_cast<uintptr_t>(n->owningBlock()), "#", m.key);
    auto [it, inserted] = buckets.emplace(key, std::vector<size_t>());
    if (inserted) bucket_order.push_back(key);
    it->second.push_back(members.size());
    members.push_back(std::move(m));
  }
  bool changed = false;
  // Whether a group was tried since the candidates were matched: trying one may have hoisted
  // nodes or rewired members' inputs, and then members are matched again.
  bool touched = false;
  for (const std::string& key : bucket_order) {
    const std::vector<size_t>& matched = buckets[key];
    if (static_cast<int64_t>(matched.size()) < MinGroup(rule, env)) continue;
    std::vector<GroupMember> group;
    Node* last_def = nullptr;
    Node* first_use = nullptr;
    auto flush = [&] {
      if (static_cast<int64_t>(group.size()) >= MinGroup(rule, env)) {
        std::vector<GroupMember*> ptrs;
        for (auto& m : group) ptrs.push_back(&m);
        std::string error;
        touched = true;
        ApplyResult res = ApplyGroup(rule, ptrs, facts, legal, &error, env);
        if (res == ApplyResult::kApplied) changed = true;
        report(res, group.size(), error);
      }
      group.clear();
      last_def = nullptr;
      first_use = nullptr;
    };
    for (size_t index : matched) {
      GroupMember& first = members[index];
      GroupMember m;
      if (!touched) {
        m = std::move(first);  // the graph is as it was when the candidates were matched
      } else {
        // Matched again: an earlier group of this round may have rewired this member's inputs.
        Node* anchor = first.anchor;
        if (!MatchGroupMember(rule, anchor, facts, &m, env)) continue;
        if (absl::StrCat(reinterpret_cast<uintptr_t>(anchor->owningBlock()), "#", m.key) != key) continue;
      }
      Node* new_def = IsBefore(last_def, m.last_input_def) ? m.last_input_def : last_def;
      Node* new_use = first_use;
      if (m.first_output_use != nullptr &&
          (new_use == nullptr || m.first_output_use->isBefore(new_use))) {
        new_use = m.first_output_use;
      }
      bool fits = new_use == nullptr || IsBefore(new_def, new_use);
      if (!group.empty() &&
          (!fits || static_cast<int64_t>(group.size()) >= rule.ast.max_group)) {
        flush();
        new_def = m.last_input_def;
        new_use = m.first_output_use;
      }
      group.push_back(std::move(m));
      last_def = new_def;
      first_use = new_use;
    }
    flush();
  }
  return changed;
}

}  // namespace internal
}  // namespace sentier
