// joined_lookup_shifts.cc — see joined_lookup_shifts.h.
#include "passes/joined_lookup_shifts.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include "passes/canonicalize/passes.h"
#include "passes/internal/group_search.h"
#include "passes/shape_facts.h"

namespace sentier {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

// One lookup as batch_embedding_bag_stored_tables[_weighted] writes it:
//   %J0 = aten::hstack([indices..., offsets...])
//   %H  = aten::tensor([first rows..., first indices..., index counts..., bag counts...])
//   %D  = aten::to(%H, prim::device(%J0), ...);  %P = aten::view(%D, [2, 2n])
//   %J  = aten::add(%J0, aten::repeat_interleave(select(%P, 0, 0), select(%P, 0, 1), 0, size(%J0, 0)))
//   %b  = aten::embedding_bag(%W, slice(%J, 0, 0, %a), slice(%J, 0, %a, size(%J0, 0)), ...)
struct ShiftedLookup {
  Node* bag = nullptr;
  Node* hstack = nullptr;  // %J0's node: cloned for the joined vector
  Node* shift = nullptr;   // the repeat_interleave: cloned, as are the nodes between
  std::vector<Value*> indices;
  std::vector<Value*> offsets;
  std::vector<int64_t> first_rows;
};

c10::optional<int64_t> ConstInt(Value* v) {
  c10::optional<c10::IValue> iv = torch::jit::toIValue(v);
  if (!iv || !iv->isInt()) return c10::nullopt;
  return iv->toInt();
}

bool IsConst(Value* v, int64_t want) {
  c10::optional<int64_t> c = ConstInt(v);
  return c && *c == want;
}

// `v`'s node when it has the kind and input count asked for; nullptr otherwise.
Node* Producer(Value* v, c10::Symbol kind, size_t inputs) {
  Node* n = v->node();
  return n->kind() == kind && n->inputs().size() == inputs ? n : nullptr;
}

// slice(%J, 0, start, end, 1) of a joined vector: its node, or nullptr.
Node* SliceOfDim0(Value* v) {
  Node* s = Producer(v, c10::aten::slice, 5);
  if (s == nullptr || !IsConst(s->input(1), 0) || !IsConst(s->input(4), 1)) return nullptr;
  return s;
}

// The shift feeding %J: repeat_interleave(select(P, 0, 0), select(P, 0, 1), 0, size(J0, 0)) with
// P = view(to(tensor(int list))); returns the repeat_interleave's node and the int list's node.
std::pair<Node*, Node*> MatchShift(Value* shifts, Value* j0) {
  Node* ri = Producer(shifts, c10::aten::repeat_interleave, 4);
  if (ri == nullptr || !IsConst(ri->input(2), 0)) return {nullptr, nullptr};
  Node* total = Producer(ri->input(3), c10::aten::size, 2);
  if (total == nullptr || total->input(0) != j0 || !IsConst(total->input(1), 0)) return {nullptr, nullptr};
  Node* v = Producer(ri->input(0), c10::aten::select, 3);
  Node* r = Producer(ri->input(1), c10::aten::select, 3);
  if (v == nullptr || r == nullptr || v->input(0) != r->input(0)) return {nullptr, nullptr};
  if (!IsConst(v->input(1), 0) || !IsConst(v->input(2), 0) || !IsConst(r->input(1), 0) ||
      !IsConst(r->input(2), 1)) {
    return {nullptr, nullptr};
  }
  Node* view = v->input(0)->node();
  if (view->kind() != c10::aten::view) return {nullptr, nullptr};
  Node* to = view->input(0)->node();
  if (to->kind() != c10::aten::to) return {nullptr, nullptr};
  Node* tensor = to->input(0)->node();
  if (tensor->kind() != c10::aten::tensor) return {nullptr, nullptr};
  Node* list = tensor->input(0)->node();
  if (list->kind() != c10::prim::ListConstruct) return {nullptr, nullptr};
  return {ri, list};
}

c10::optional<ShiftedLookup> MatchLookup(Node* bag) {
  if (bag->kind() != c10::aten::embedding_bag || bag->inputs().size() < 3) return c10::nullopt;
  Node* idx = SliceOfDim0(bag->input(1));
  Node* off = SliceOfDim0(bag->input(2));
  if (idx == nullptr || off == nullptr || idx->input(0) != off->input(0)) return c10::nullopt;
  if (!IsConst(idx->input(2), 0) || off->input(2) != idx->input(3)) return c10::nullopt;
  Node* add = Producer(idx->input(0), c10::aten::add, 3);
  if (add == nullptr || !IsConst(add->input(2), 1)) return c10::nullopt;
  Node* hstack = Producer(add->input(0), c10::aten::hstack, 1);
  if (hstack == nullptr || hstack->input(0)->node()->kind() != c10::prim::ListConstruct) {
    return c10::nullopt;
  }
  Node* total = Producer(off->input(3), c10::aten::size, 2);
  if (total == nullptr || total->input(0) != hstack->output()) return c10::nullopt;
  auto [shift, ints] = MatchShift(add->input(1), hstack->output());
  if (shift == nullptr) return c10::nullopt;
  auto members = hstack->input(0)->node()->inputs();
  const size_t n = members.size() / 2;
  if (n == 0 || members.size() != 2 * n || ints->inputs().size() != 4 * n) return c10::nullopt;
  ShiftedLookup l;
  l.bag = bag;
  l.hstack = hstack;
  l.shift = shift;
  for (size_t k = 0; k < n; ++k) {
    c10::optional<int64_t> row = ConstInt(ints->input(k));
    if (!row) return c10::nullopt;
    l.first_rows.push_back(*row);
    l.indices.push_back(members[k]);
    l.offsets.push_back(members[n + k]);
  }
  return l;
}

// What lookups must agree on to share one vector: the index and offset dtypes and the device.
using LookupKey = std::tuple<int, int, std::string>;

c10::optional<std::pair<c10::ScalarType, std::string>> DtypeAndDevice(Value* v, const ShapeFacts* facts) {
  if (const TensorFact* f = facts != nullptr ? facts->Find(v) : nullptr) {
    return std::make_pair(f->dtype, f->device.str());
  }
  auto t = v->type()->cast<c10::TensorType>();
  if (t == nullptr || !t->scalarType() || !t->device()) return c10::nullopt;
  return std::make_pair(*t->scalarType(), t->device()->str());
}

c10::optional<LookupKey> KeyOf(const ShiftedLookup& l, const ShapeFacts* facts) {
  auto i = DtypeAndDevice(l.indices[0], facts);
  auto o = DtypeAndDevice(l.offsets[0], facts);
  if (!i || !o || i->second != o->second) return c10::nullopt;
  return LookupKey{static_cast<int>(i->first), static_cast<int>(o->first), i->second};
}

// Moves the definition of `v` (and what it needs) right after `*cursor` when it comes later:
// reads that can move anywhere (internal::HoistAfter), and, in a graph that writes nothing
// (`computations`), pure computations (a cumsum of lengths, a `.long()` of a dict value).
// `first` (the first lookup, before which everything moves) never moves.
bool MoveUp(Value* v, Node** cursor, Node* first, bool computations) {
  Node* n = v->node();
  if (n->owningBlock() != (*cursor)->owningBlock() || n->kind() == c10::prim::Param) return true;
  if (n == *cursor || n->isBefore(*cursor)) return true;
  if (n == first) return false;
  if (!computations || !IsPureComputation(n)) return internal::HoistAfter(v, cursor);
  for (Value* in : n->inputs()) {
    if (!MoveUp(in, cursor, first, computations)) return false;
  }
  n->moveAfter(*cursor);
  *cursor = n;
  return true;
}

// Moves every member up to just before `first` where needed; false when one cannot move.
bool MembersBefore(const ShiftedLookup& l, Node* first, bool computations) {
  Node* cursor = first->prev();
  for (const auto* members : {&l.indices, &l.offsets}) {
    for (Value* v : *members) {
      if (!MoveUp(v, &cursor, first, computations)) return false;
    }
  }
  return true;
}

Value* IntAdd(Graph* g, Value* a, Value* b) {
  if (IsConst(a, 0)) return b;
  return g->insert(c10::aten::add, {a, b});
}

// The joined vector's members and the host ints of its shift: every lookup's indices, then every
// lookup's offsets; first rows, first indices (running counts within each lookup), index counts,
// bag counts; and each lookup's index and bag totals.
struct JoinedMembers {
  std::vector<Value*> members, ints, index_totals, bag_totals;
};

JoinedMembers CollectMembers(Graph* g, const std::vector<ShiftedLookup>& lookups, Value* zero) {
  JoinedMembers j;
  std::vector<Value*> rows, firsts, counts, bag_counts;
  for (const auto& l : lookups) {
    j.members.insert(j.members.end(), l.indices.begin(), l.indices.end());
    Value* running = zero;
    for (size_t k = 0; k < l.indices.size(); ++k) {
      rows.push_back(g->insertConstant(l.first_rows[k]));
      firsts.push_back(running);
      counts.push_back(g->insert(c10::aten::size, {l.indices[k], 0}));
      running = IntAdd(g, running, counts.back());
    }
    j.index_totals.push_back(running);
  }
  for (const auto& l : lookups) {
    j.members.insert(j.members.end(), l.offsets.begin(), l.offsets.end());
    Value* running = zero;
    for (Value* o : l.offsets) {
      bag_counts.push_back(g->insert(c10::aten::size, {o, 0}));
      running = IntAdd(g, running, bag_counts.back());
    }
    j.bag_totals.push_back(running);
  }
  for (const auto* part : {&rows, &firsts, &counts, &bag_counts}) {
    j.ints.insert(j.ints.end(), part->begin(), part->end());
  }
  return j;
}

// The shifted joined vector: the first lookup's preparation (hstack, tensor, to, view, the two
// selects, repeat_interleave, add), cloned with the joined lists in place of its own.
Value* ShiftedVector(Graph* g, const ShiftedLookup& model, const JoinedMembers& j) {
  Value* member_list = g->insertNode(g->createList(c10::TensorType::get(), j.members))->output();
  Node* j0 = g->insertNode(g->createClone(model.hstack, [&](Value*) { return member_list; }));
  Node* ri = model.shift;
  Node* sel_v = ri->input(0)->node();
  Node* sel_r = ri->input(1)->node();
  Node* view = sel_v->input(0)->node();
  Node* to = view->input(0)->node();
  Node* tensor = to->input(0)->node();
  Node* add = model.bag->input(1)->node()->input(0)->node();
  std::unordered_map<Value*, Value*> remap;
  remap[model.hstack->output()] = j0->output();
  remap[tensor->input(0)] = g->insertNode(g->createList(c10::IntType::get(), j.ints))->output();
  remap[view->input(1)] =
      g->insertConstant(std::vector<int64_t>{2, static_cast<int64_t>(j.members.size())});
  remap[ri->input(3)] = g->insert(c10::aten::size, {j0->output(), 0});
  auto map = [&](Value* v) {
    auto it = remap.find(v);
    return it != remap.end() ? it->second : v;
  };
  for (Node* n : {tensor, to, view, sel_v, sel_r, ri, add}) {
    // prim::device(%J0) (the copy's target) is recomputed for the joined vector.
    for (Value* in : n->inputs()) {
      Node* def = in->node();
      if (def->kind() == c10::prim::device && def->input(0) == model.hstack->output() &&
          !remap.count(in)) {
        remap[in] = g->insertNode(g->createClone(def, map))->output();
      }
    }
    Node* c = g->insertNode(g->createClone(n, map));
    for (size_t k = 0; k < n->outputs().size(); ++k) remap[n->output(k)] = c->output(k);
  }
  return remap.at(add->output());
}

// Builds the joined vector and its one shift before the first lookup, and hands each lookup its
// indices and offsets as two slices of it.
void Join(Graph* g, const std::vector<ShiftedLookup>& lookups) {
  torch::jit::WithInsertPoint guard(lookups[0].bag);
  Value* zero = g->insertConstant(0);
  JoinedMembers j = CollectMembers(g, lookups, zero);
  Value* shifted = ShiftedVector(g, lookups[0], j);
  std::vector<Value*> index_starts, bag_starts;
  Value* pos = zero;
  for (Value* t : j.index_totals) {
    index_starts.push_back(pos);
    pos = IntAdd(g, pos, t);
  }
  for (Value* t : j.bag_totals) {
    bag_starts.push_back(pos);
    pos = IntAdd(g, pos, t);
  }
  Value* one = g->insertConstant(1);
  for (size_t k = 0; k < lookups.size(); ++k) {
    torch::jit::WithInsertPoint at(lookups[k].bag);
    Value* index_end = IntAdd(g, index_starts[k], j.index_totals[k]);
    Value* bag_end = IntAdd(g, bag_starts[k], j.bag_totals[k]);
    Value* idx = g->insert(c10::aten::slice, {shifted, zero, index_starts[k], index_end, one});
    Value* off = g->insert(c10::aten::slice, {shifted, zero, bag_starts[k], bag_end, one});
    lookups[k].bag->replaceInput(1, idx);
    lookups[k].bag->replaceInput(2, off);
  }
}

}  // namespace

bool JoinLookupShifts(const std::shared_ptr<Graph>& graph, const ShapeFacts* facts,
                      int64_t* lookups) {
  std::map<LookupKey, std::vector<ShiftedLookup>> sets;
  for (Node* n : graph->block()->nodes()) {
    c10::optional<ShiftedLookup> l = MatchLookup(n);
    if (!l) continue;
    c10::optional<LookupKey> key = KeyOf(*l, facts);
    if (key) sets[*key].push_back(std::move(*l));
  }
  int64_t joined = 0;
  const bool computations = !AnyWriter(graph->block());
  for (auto& [key, found] : sets) {
    if (found.size() < 2) continue;  // graph order: found[0].bag is the first lookup
    std::vector<ShiftedLookup> movable;
    for (auto& l : found) {
      if (MembersBefore(l, found[0].bag, computations)) movable.push_back(std::move(l));
    }
    if (movable.size() < 2) continue;
    Join(graph.get(), movable);
    joined += static_cast<int64_t>(movable.size());
  }
  if (lookups != nullptr) *lookups += joined;
  return joined > 0;
}

}  // namespace sentier
