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
#include "passes/module_objects.h"
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
// What MergeWidths needs of it, where the rule wrote it so (nullptr otherwise): %W =
// aten::cat([tables...], 0) read only here; the weighted lookup's aten::hstack([weights...]);
// the split of %b by the members' bag counts and its ListUnpack, the members' pooled outputs.
struct ShiftedLookup {
  Node* bag = nullptr;
  Node* hstack = nullptr;  // %J0's node: cloned for the joined vector
  Node* shift = nullptr;   // the repeat_interleave: cloned, as are the nodes between
  Node* add = nullptr;     // %J's node
  std::vector<Value*> indices;
  std::vector<Value*> offsets;
  std::vector<int64_t> first_rows;
  Node* tables = nullptr;
  Node* weights = nullptr;
  Node* split = nullptr;
  Node* unpack = nullptr;
  // A width's sum lookup and weighted lookup made one (MergeWidths): the two, in that order;
  // the members are theirs in that order, the second part's first rows shifted by the first
  // part's table rows.
  std::vector<ShiftedLookup> parts;
  c10::ScalarType table_dtype = c10::ScalarType::Float;  // a merged pair's tables'
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

// `v`'s node when it has the kind, a ListConstruct for its first input and `v` its only use.
Node* OfList(Value* v, c10::Symbol kind) {
  Node* n = v->node();
  if (n->kind() != kind || v->uses().size() != 1) return nullptr;
  return n->input(0)->node()->kind() == c10::prim::ListConstruct ? n : nullptr;
}

// Fills what MergeWidths reads where the lookup has it: the tables' cat, the weights' join, and
// the pooled output split by bag counts (a list of them) and unpacked, every other output unused.
void MatchMergeParts(ShiftedLookup* l) {
  Node* bag = l->bag;
  if (bag->inputs().size() != 8 || bag->outputs().size() != 4) return;
  for (size_t k = 1; k < 4; ++k) {
    if (bag->output(k)->hasUses()) return;
  }
  Value* pooled = bag->output(0);
  if (pooled->uses().size() != 1) return;
  Node* split = pooled->uses()[0].user;
  if (split->kind() != c10::aten::split_with_sizes || split->inputs().size() != 3 ||
      !IsConst(split->input(2), 0) || split->input(1)->node()->kind() != c10::prim::ListConstruct ||
      split->output()->uses().size() != 1) {
    return;
  }
  Node* unpack = split->output()->uses()[0].user;
  if (unpack->kind() != c10::prim::ListUnpack || unpack->outputs().size() != l->indices.size()) return;
  Node* tables = OfList(bag->input(0), c10::aten::cat);
  if (tables == nullptr || !IsConst(tables->input(1), 0)) return;
  l->tables = tables;
  l->weights = OfList(bag->input(6), c10::aten::hstack);
  l->split = split;
  l->unpack = unpack;
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
  l.add = add;
  for (size_t k = 0; k < n; ++k) {
    c10::optional<int64_t> row = ConstInt(ints->input(k));
    if (!row) return c10::nullopt;
    l.first_rows.push_back(*row);
    l.indices.push_back(members[k]);
    l.offsets.push_back(members[n + k]);
  }
  MatchMergeParts(&l);
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

// Sizes of a tensor value from the facts, else from a complete type.
c10::optional<std::vector<int64_t>> SizesOf(Value* v, const ShapeFacts* facts) {
  if (const TensorFact* f = facts != nullptr ? facts->Find(v) : nullptr) return f->sizes;
  auto t = v->type()->cast<c10::TensorType>();
  if (t == nullptr) return c10::nullopt;
  return t->sizes().concrete_sizes();
}

// What a lookup's tables must share with another's to be one table: dtype and width, read from
// its first pooled piece ([bags, width]; the rule gave it the replaced lookup's facts and type;
// the tables themselves are attribute reads that a scripted graph leaves untyped).
struct TableShape {
  c10::ScalarType dtype;
  int64_t width = 0;
};

c10::optional<TableShape> TableShapeOf(const ShiftedLookup& l, const ShapeFacts* facts) {
  if (l.tables == nullptr || l.split == nullptr) return c10::nullopt;
  Value* piece = l.unpack->output(0);
  auto type = DtypeAndDevice(piece, facts);
  auto sizes = SizesOf(piece, facts);
  if (!type || !sizes || sizes->size() != 2) return c10::nullopt;
  return TableShape{type->first, (*sizes)[1]};
}

// The rows of the lookup's tables end to end: its last first row plus its last table's rows,
// read from the module (`self`'s attribute the table's GetAttr reads), else from facts or type.
c10::optional<int64_t> TableRows(const ShiftedLookup& l, const ShapeFacts* facts,
                                 const ModuleObjectMap& objects) {
  Value* last = l.tables->input(0)->node()->inputs().back();
  Node* read = last->node();
  if (read->kind() == c10::prim::GetAttr) {
    auto owner = objects.find(read->input(0));
    if (owner != objects.end()) {
      c10::IValue attr = owner->second->getAttr(read->s(c10::attr::name));
      if (attr.isTensor() && attr.toTensor().dim() == 2) {
        return l.first_rows.back() + attr.toTensor().size(0);
      }
    }
  }
  auto sizes = SizesOf(last, facts);
  if (!sizes || sizes->size() != 2) return c10::nullopt;
  return l.first_rows.back() + (*sizes)[0];
}

// The lookup's mode when it is a plain sum (no weights) or a weighted sum, with no gradient
// scaling and no last offset; nullopt otherwise.
c10::optional<bool> SumLookupWeighted(const ShiftedLookup& l) {
  Node* b = l.bag;
  if (!IsConst(b->input(4), 0) || b->inputs().size() != 8) return c10::nullopt;
  c10::optional<c10::IValue> scale = torch::jit::toIValue(b->input(3));
  c10::optional<c10::IValue> last = torch::jit::toIValue(b->input(7));
  if (!scale || !last || !scale->isBool() || scale->toBool() || !last->isBool() || last->toBool()) {
    return c10::nullopt;
  }
  if (l.weights != nullptr) return true;
  c10::optional<c10::IValue> none = torch::jit::toIValue(b->input(6));
  if (!none || !none->isNone()) return c10::nullopt;
  return false;
}

// MergeWidths: a width's sum lookup and its weighted lookup (tables of one dtype and width, the
// same sparse flag) become one weighted lookup, the sum lookup's indices weighing 1: one lookup
// and one backward fewer. The pair takes the earlier one's place in `lookups` (graph order).
void MergeWidths(std::vector<ShiftedLookup>* lookups, const ShapeFacts* facts,
                 const ModuleObjectMap& objects) {
  for (size_t i = 0; i < lookups->size(); ++i) {
    ShiftedLookup& sum = (*lookups)[i];
    auto sum_shape = TableShapeOf(sum, facts);
    if (!sum_shape || SumLookupWeighted(sum) != c10::optional<bool>(false)) continue;
    c10::optional<int64_t> sum_rows = TableRows(sum, facts, objects);
    if (!sum_rows) continue;
    for (size_t j = 0; j < lookups->size(); ++j) {
      ShiftedLookup& w = (*lookups)[j];
      auto w_shape = TableShapeOf(w, facts);
      if (j == i || !w_shape || SumLookupWeighted(w) != c10::optional<bool>(true)) continue;
      if (w_shape->dtype != sum_shape->dtype || w_shape->width != sum_shape->width) continue;
      if (torch::jit::toIValue(w.bag->input(5)) != torch::jit::toIValue(sum.bag->input(5))) continue;
      ShiftedLookup m;
      m.bag = i < j ? sum.bag : w.bag;
      m.hstack = sum.hstack;  // the preparation to clone: one lookup's, whole
      m.shift = sum.shift;
      m.add = sum.add;
      m.indices = sum.indices;
      m.offsets = sum.offsets;
      m.first_rows = sum.first_rows;
      m.indices.insert(m.indices.end(), w.indices.begin(), w.indices.end());
      m.offsets.insert(m.offsets.end(), w.offsets.begin(), w.offsets.end());
      for (int64_t r : w.first_rows) m.first_rows.push_back(r + *sum_rows);
      m.parts = {sum, w};
      m.table_dtype = sum_shape->dtype;
      const size_t keep = std::min(i, j), drop = std::max(i, j);
      (*lookups)[keep] = std::move(m);
      lookups->erase(lookups->begin() + drop);
      if (drop == i) --i;  // the next lookup now stands at i (unsigned wrap, then ++i)
      break;
    }
  }
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
// A merged pair's tables and weights move too: its one lookup reads them before either of its
// parts did.
bool MembersBefore(const ShiftedLookup& l, Node* first, bool computations) {
  Node* cursor = first->prev();
  std::vector<Value*> values = l.indices;
  values.insert(values.end(), l.offsets.begin(), l.offsets.end());
  for (const ShiftedLookup& part : l.parts) {
    for (Node* list : {part.tables, part.weights}) {
      if (list == nullptr) continue;
      auto in = list->input(0)->node()->inputs();
      values.insert(values.end(), in.begin(), in.end());
    }
  }
  for (Value* v : values) {
    if (!MoveUp(v, &cursor, first, computations)) return false;
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
  std::vector<Value*> first_part_totals;  // a merged pair's sum part's index count (else null)
  std::vector<std::vector<Value*>> lookup_bag_counts;  // each lookup's members' bag counts
};

JoinedMembers CollectMembers(Graph* g, const std::vector<ShiftedLookup>& lookups, Value* zero) {
  JoinedMembers j;
  std::vector<Value*> rows, firsts, counts, bag_counts;
  for (const auto& l : lookups) {
    j.members.insert(j.members.end(), l.indices.begin(), l.indices.end());
    const size_t first_part = l.parts.empty() ? 0 : l.parts[0].indices.size();
    j.first_part_totals.push_back(nullptr);
    Value* running = zero;
    for (size_t k = 0; k < l.indices.size(); ++k) {
      rows.push_back(g->insertConstant(l.first_rows[k]));
      firsts.push_back(running);
      counts.push_back(g->insert(c10::aten::size, {l.indices[k], 0}));
      running = IntAdd(g, running, counts.back());
      if (k + 1 == first_part) j.first_part_totals.back() = running;
    }
    j.index_totals.push_back(running);
  }
  for (const auto& l : lookups) {
    j.members.insert(j.members.end(), l.offsets.begin(), l.offsets.end());
    Value* running = zero;
    j.lookup_bag_counts.emplace_back();
    for (Value* o : l.offsets) {
      bag_counts.push_back(g->insert(c10::aten::size, {o, 0}));
      j.lookup_bag_counts.back().push_back(bag_counts.back());
      running = IntAdd(g, running, bag_counts.back());
    }
    j.bag_totals.push_back(running);
  }
  for (const auto* part : {&rows, &firsts, &counts, &bag_counts}) {
    j.ints.insert(j.ints.end(), part->begin(), part->end());
  }
  return j;
}

// A copy of `n` (inserted at the insertion point) with the inputs in `map` replaced and its
// constants made again there (constants are spread one per use while the graph is rewritten,
// so `n`'s may stand after the insertion point).
Node* CloneWith(Graph* g, Node* n, std::unordered_map<Value*, Value*> map) {
  for (Value* in : n->inputs()) {
    if (!map.count(in) && in->node()->kind() == c10::prim::Constant) {
      map[in] = g->insertNode(g->createClone(in->node(), [](Value* v) { return v; }))->output();
    }
  }
  return g->insertNode(g->createClone(n, [&](Value* v) {
    auto it = map.find(v);
    return it != map.end() ? it->second : v;
  }));
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
  Node* add = model.add;
  std::unordered_map<Value*, Value*> remap;
  remap[model.hstack->output()] = j0->output();
  remap[tensor->input(0)] = g->insertNode(g->createList(c10::IntType::get(), j.ints))->output();
  remap[view->input(1)] =
      g->insertConstant(std::vector<int64_t>{2, static_cast<int64_t>(j.members.size())});
  remap[ri->input(3)] = g->insert(c10::aten::size, {j0->output(), 0});
  for (Node* n : {tensor, to, view, sel_v, sel_r, ri, add}) {
    // prim::device(%J0) (the copy's target) is recomputed for the joined vector.
    for (Value* in : n->inputs()) {
      Node* def = in->node();
      if (def->kind() == c10::prim::device && def->input(0) == model.hstack->output() &&
          !remap.count(in)) {
        remap[in] = CloneWith(g, def, remap)->output();
      }
    }
    Node* c = CloneWith(g, n, remap);
    for (size_t k = 0; k < n->outputs().size(); ++k) remap[n->output(k)] = c->output(k);
  }
  return remap.at(add->output());
}

// A list of the inputs of two ListConstructs, first's then second's, of `first`'s type.
Value* JoinedList(Graph* g, Node* first, Node* second) {
  std::vector<Value*> items(first->inputs().begin(), first->inputs().end());
  items.insert(items.end(), second->inputs().begin(), second->inputs().end());
  auto type = first->output()->type()->expect<c10::ListType>()->getElementType();
  return g->insertNode(g->createList(type, items))->output();
}

// A merged pair's one lookup, at the insertion point: the pair's tables as one cat (which the
// stacked layout stores as one table), weights of 1 for the sum part's indices joined with the
// weighted part's own, the weighted part's embedding_bag over the joined indices and offsets,
// and one split of its output by both parts' bag counts, whose pieces replace the parts' pieces.
void MergedLookup(Graph* g, const ShiftedLookup& m, Value* idx, Value* off, Value* sum_indices,
                  const std::vector<Value*>& bag_counts) {
  const ShiftedLookup& sum = m.parts[0];
  const ShiftedLookup& w = m.parts[1];
  Value* tables_list = JoinedList(g, sum.tables->input(0)->node(), w.tables->input(0)->node());
  Node* tables = CloneWith(g, sum.tables, {{sum.tables->input(0), tables_list}});
  // ones_like of the sum part's indices (not ones([n])): its size and device come from a tensor,
  // which an exported program can write (it takes no list of ints computed when it runs).
  Value* sum_idx = g->insert(c10::aten::slice, {idx, 0, 0, sum_indices, 1});
  Value* table_dtype = g->insertConstant(static_cast<int64_t>(m.table_dtype));
  Value* ones = g->insert(c10::aten::ones_like, {sum_idx},
                          {torch::jit::NamedValue("dtype", table_dtype)});
  std::vector<Value*> weight_items = {ones};
  for (Value* v : w.weights->input(0)->node()->inputs()) weight_items.push_back(v);
  Value* weight_list = g->insertNode(g->createList(c10::TensorType::get(), weight_items))->output();
  Node* weights = CloneWith(g, w.weights, {{w.weights->input(0), weight_list}});
  Node* bag = CloneWith(g, w.bag, {{w.bag->input(0), tables->output()}, {w.bag->input(1), idx},
                                   {w.bag->input(2), off}, {w.bag->input(6), weights->output()}});
  Value* sizes = g->insertNode(g->createList(c10::IntType::get(), bag_counts))->output();
  Node* split = CloneWith(g, sum.split, {{sum.split->input(0), bag->output(0)}, {sum.split->input(1), sizes}});
  const size_t n = sum.unpack->outputs().size() + w.unpack->outputs().size();
  Node* unpack = g->insertNode(g->createListUnpack(split->output(), n));
  size_t k = 0;
  for (Node* old : {sum.unpack, w.unpack}) {
    for (Value* piece : old->outputs()) {
      unpack->output(k)->setType(piece->type());
      piece->replaceAllUsesWith(unpack->output(k++));
    }
  }
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
    if (!lookups[k].parts.empty()) {
      MergedLookup(g, lookups[k], idx, off, j.first_part_totals[k], j.lookup_bag_counts[k]);
      continue;
    }
    lookups[k].bag->replaceInput(1, idx);
    lookups[k].bag->replaceInput(2, off);
  }
}

}  // namespace

bool JoinLookupShifts(const std::shared_ptr<Graph>& graph, const ShapeFacts* facts,
                      const c10::IValue& self, int64_t* lookups) {
  const ModuleObjectMap objects = ModuleObjects(*graph, self);
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
    MergeWidths(&found, facts, objects);
    if (found.size() < 2 && (found.empty() || found[0].parts.empty())) continue;
    // Graph order: found[0].bag is the first lookup.
    std::vector<ShiftedLookup> movable;
    for (auto& l : found) {
      if (MembersBefore(l, found[0].bag, computations)) movable.push_back(std::move(l));
    }
    if (movable.size() < 2 && (movable.empty() || movable[0].parts.empty())) continue;
    Join(graph.get(), movable);
    joined += static_cast<int64_t>(movable.size());
  }
  if (lookups != nullptr) *lookups += joined;
  return joined > 0;
}

}  // namespace sentier
