// batched_batch_norms.cc — see batched_batch_norms.h.
#include "passes/batched_batch_norms.h"

#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include "passes/internal/group_search.h"
#include "passes/module_objects.h"
#include "passes/shape_facts.h"

namespace sentier {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

// One training-mode batch norm on a piece of a batched layer.
struct Member {
  Node* bn = nullptr;
  Node* source = nullptr;   // the split_with_sizes (dim 1, rank 2) or unbind (rank 3) of the piece
  int64_t channels = 0;     // C: the piece's features, the statistics' length
  const void* owner = nullptr;  // whose statistics: a module object, or a graph input value
  std::vector<Value*> stats;    // every value holding them (each attribute read of them)
};

// What members must share to be one batch norm: the source, momentum, eps and cudnn flag
// (doubles compared exactly: they are the same Python constants in a batched layer).
using GroupKey = std::tuple<Node*, double, double, bool>;

c10::optional<c10::IValue> Const(Value* v) { return torch::jit::toIValue(v); }

bool IsNone(Value* v) { return v->type()->kind() == c10::TypeKind::NoneType; }

c10::optional<int64_t> RankOf(Value* v, const ShapeFacts* facts) {
  if (facts != nullptr) {
    if (c10::optional<int64_t> r = facts->StaticRank(v)) return r;
  }
  auto t = v->type()->cast<c10::TensorType>();
  if (t == nullptr) return c10::nullopt;
  return t->dim();
}

// The split or unbind whose piece `x` is, when the piece is [B, C]: a split_with_sizes of a 2-D
// tensor on dim 1 (constant), or an unbind of a 3-D tensor (pieces side by side on dim 1 then
// make [B, sum C]).
Node* SourceOf(Value* x, const ShapeFacts* facts) {
  Node* unpack = x->node();
  if (unpack->kind() != c10::prim::ListUnpack) return nullptr;
  Node* src = unpack->input()->node();
  c10::optional<int64_t> rank = RankOf(src->input(0), facts);
  if (!rank) return nullptr;
  if (src->kind() == c10::aten::split_with_sizes && src->inputs().size() == 3 && *rank == 2) {
    c10::optional<c10::IValue> dim = Const(src->input(2));
    if (dim && dim->isInt() && (dim->toInt() == 1 || dim->toInt() == -1)) return src;
  }
  if (src->kind() == c10::aten::unbind && src->inputs().size() == 2 && *rank == 3 &&
      Const(src->input(1)).has_value()) {
    return src;
  }
  return nullptr;
}

// Reads of each (module object, attribute name) anywhere in the graph.
using AttrReads = std::map<std::pair<const void*, std::string>, std::vector<Node*>>;

void CollectAttrReads(torch::jit::Block* b, const ModuleObjectMap& objects, AttrReads* reads) {
  for (Node* n : b->nodes()) {
    if (n->kind() == c10::prim::GetAttr) {
      auto owner = objects.find(n->input());
      if (owner != objects.end()) {
        (*reads)[{owner->second.get(), n->s(c10::attr::name)}].push_back(n);
      }
    }
    for (torch::jit::Block* sub : n->blocks()) CollectAttrReads(sub, objects, reads);
  }
}

// Whose statistics the member updates, their length and every value holding them: both read
// from one module object, or both graph inputs. Where else they are read is checked once the
// group is known (ReadOnlyAfter).
struct Statistics {
  const void* owner = nullptr;
  int64_t channels = 0;
  std::vector<Value*> values;
};

c10::optional<Statistics> StatisticsOf(Node* bn, const ModuleObjectMap& objects, const AttrReads& reads,
                                       const ShapeFacts* facts) {
  Value* rm = bn->input(3);
  Value* rv = bn->input(4);
  Node* rm_read = rm->node();
  Node* rv_read = rv->node();
  Statistics stats;
  if (rm_read->kind() == c10::prim::GetAttr && rv_read->kind() == c10::prim::GetAttr) {
    auto a = objects.find(rm_read->input());
    auto b = objects.find(rv_read->input());
    if (a == objects.end() || b == objects.end() || a->second != b->second) return c10::nullopt;
    stats.owner = a->second.get();
    for (Node* read : {rm_read, rv_read}) {
      auto all = reads.find({stats.owner, read->s(c10::attr::name)});
      if (all == reads.end()) return c10::nullopt;
      for (Node* r : all->second) stats.values.push_back(r->output());
    }
    c10::IValue mean = a->second->getAttr(rm_read->s(c10::attr::name));
    c10::IValue var = a->second->getAttr(rv_read->s(c10::attr::name));
    if (!mean.isTensor() || !var.isTensor() || mean.toTensor().dim() != 1 ||
        mean.toTensor().sizes() != var.toTensor().sizes()) {
      return c10::nullopt;
    }
    stats.channels = mean.toTensor().size(0);
    return stats;
  }
  if (rm->node()->kind() != c10::prim::Param || rv->node()->kind() != c10::prim::Param || rm == rv) {
    return c10::nullopt;
  }
  const TensorFact* f = facts != nullptr ? facts->Find(rm) : nullptr;
  std::vector<int64_t> sizes;
  if (f != nullptr) {
    sizes = f->sizes;
  } else if (auto t = rm->type()->cast<c10::TensorType>()) {
    auto concrete = t->sizes().concrete_sizes();
    if (concrete) sizes = *concrete;
  }
  if (sizes.size() != 1) return c10::nullopt;
  stats.owner = rm;
  stats.channels = sizes[0];
  stats.values = {rm, rv};
  return stats;
}

// The node of `b`'s top block that is or holds `n`.
Node* TopLevel(Node* n, torch::jit::Block* top) {
  while (n->owningBlock() != top) n = n->owningBlock()->owningNode();
  return n;
}

// Whether the members' statistics are read by nothing but their own batch norm before `last`:
// the joined batch norm updates them all where the first member ran, so a read between the
// first and the last member would see the update early.
bool ReadOnlyAfter(const std::vector<Member>& members, Node* last) {
  for (const Member& m : members) {
    for (Value* v : m.stats) {
      for (const torch::jit::Use& u : v->uses()) {
        if (u.user == m.bn) continue;
        if (!TopLevel(u.user, last->owningBlock())->isAfter(last)) return false;
      }
    }
  }
  return true;
}

// A member and its group key, when `bn` is one.
c10::optional<std::pair<Member, GroupKey>> MatchMember(Node* bn, const ModuleObjectMap& objects,
                                                       const AttrReads& reads,
                                                       const ShapeFacts* facts) {
  if (bn->kind() != c10::aten::batch_norm || bn->inputs().size() != 9) return c10::nullopt;
  c10::optional<c10::IValue> training = Const(bn->input(5));
  c10::optional<c10::IValue> momentum = Const(bn->input(6));
  c10::optional<c10::IValue> eps = Const(bn->input(7));
  c10::optional<c10::IValue> cudnn = Const(bn->input(8));
  if (!training || !training->isBool() || !training->toBool() || !momentum || !momentum->isDouble() ||
      !eps || !eps->isDouble() || !cudnn || !cudnn->isBool()) {
    return c10::nullopt;
  }
  for (size_t k = 1; k <= 4; ++k) {
    if (IsNone(bn->input(k))) return c10::nullopt;
  }
  Node* source = SourceOf(bn->input(0), facts);
  if (source == nullptr) return c10::nullopt;
  auto stats = StatisticsOf(bn, objects, reads, facts);
  if (!stats) return c10::nullopt;
  Member m{bn, source, stats->channels, stats->owner, std::move(stats->values)};
  return std::make_pair(m, GroupKey{source, momentum->toDouble(), eps->toDouble(), cudnn->toBool()});
}

// Members with distinct pieces and distinct owners, in graph order.
std::vector<Member> Distinct(const std::vector<Member>& members) {
  std::unordered_set<const Value*> pieces;
  std::unordered_set<const void*> owners;
  std::vector<Member> kept;
  for (const Member& m : members) {
    if (!pieces.insert(m.bn->input(0)).second || !owners.insert(m.owner).second) continue;
    kept.push_back(m);
  }
  return kept;
}

Value* ListOf(Graph& g, const std::vector<Value*>& values) {
  return g.insertNode(g.createList(c10::TensorType::get(), values))->output();
}

std::vector<Value*> InputsAt(const std::vector<Member>& members, size_t k) {
  std::vector<Value*> v;
  for (const Member& m : members) v.push_back(m.bn->input(k));
  return v;
}

// `pieces` (a list: the joined statistics the joined batch norm updated, split by the members'
// channels) copied into each member's own buffers, through `prim::data` (`buffer.data.copy_`):
// like batch norm's own update of its statistics, the write is not one autograd sees, so a
// buffer an autodiff graph of the executor saved (to size a gradient) is not taken for modified.
// One copy per member: a multi-tensor copy (`_foreach_copy_`) of a list literal is deleted by
// TorchScript's own dead-code pass when the archive is loaded (its alias analysis sees only the
// list written).
void WriteBack(Graph& g, Value* pieces, const std::vector<Value*>& buffers) {
  Node* unpack = g.insertNode(g.createListUnpack(pieces, buffers.size()));
  for (size_t k = 0; k < buffers.size(); ++k) {
    Value* untracked = g.insert(c10::Symbol::fromQualString("prim::data"), {buffers[k]});
    g.insert(c10::aten::copy_, {untracked, unpack->output(k)});
  }
}

// Whether `a` and `b` are constants of one value (tensor constants: same dtype, sizes, values).
bool SameConstant(Value* a, Value* b) {
  c10::optional<c10::IValue> x = Const(a);
  c10::optional<c10::IValue> y = Const(b);
  if (!x || !y) return false;
  if (x->isTensor() && y->isTensor()) {
    const at::Tensor& s = x->toTensor();
    const at::Tensor& t = y->toTensor();
    return s.scalar_type() == t.scalar_type() && s.sizes() == t.sizes() && s.device() == t.device() &&
           s.equal(t);
  }
  return !x->isTensor() && !y->isTensor() && *x == *y;
}

// Each member's `num_batches_tracked.add_(c)` (the counter read once, for that add alone, the
// result unused, one constant increment for all): the adds, in member order; empty when a
// member has none such.
std::vector<Node*> CounterAdds(const std::vector<const void*>& owners, torch::jit::Block* block,
                               const AttrReads& reads) {
  std::vector<Node*> adds;
  for (const void* owner : owners) {
    auto all = reads.find({owner, "num_batches_tracked"});
    if (all == reads.end() || all->second.size() != 1) return {};
    Value* counter = all->second[0]->output();
    if (counter->uses().size() != 1) return {};
    Node* add = counter->uses()[0].user;
    if (add->kind() != c10::aten::add_ || add->inputs().size() != 3 || add->input(0) != counter ||
        add->output()->hasUses() || add->owningBlock() != block) {
      return {};
    }
    if (!adds.empty() && (!SameConstant(add->input(1), adds[0]->input(1)) ||
                          !SameConstant(add->input(2), adds[0]->input(2)))) {
      return {};
    }
    if (!Const(add->input(1)) || !Const(add->input(2))) return {};
    adds.push_back(add);
  }
  return adds;
}

// The stacked layout: the members' counters as one [M] stack incremented by one add, written
// back to each member's counter (which the stacked layout then stores as one buffer, so the
// members' modules can go). Call at the joined batch norm's insertion point.
bool JoinCounters(Graph& g, const std::vector<Node*>& adds, Node** cursor) {
  std::vector<Value*> counters;
  for (Node* add : adds) {
    if (!internal::HoistAfter(add->input(0), cursor)) return false;
    counters.push_back(add->input(0));
  }
  Value* joined = g.insert(c10::aten::stack, {ListOf(g, counters), 0});
  // The members' own overload (add_.Tensor, alpha keyword-only), as a node: Graph::insert would
  // take add_.Scalar through an implicit conversion of the tensor constant.
  Node* add = g.insertNode(g.create(c10::aten::add_, {joined, adds[0]->input(1), adds[0]->input(2)}, 1));
  add->output()->setType(joined->type());
  WriteBack(g, g.insert(c10::aten::unbind, {joined, 0}), counters);
  for (Node* add : adds) add->destroy();
  return true;
}

// Rewrites one group (>= 2 members, graph order); false when an input cannot be made available
// at the first member.
bool Join(Graph& g, const std::vector<Member>& members, ShapeFacts* facts) {
  Node* first = members.front().bn;
  if (!ReadOnlyAfter(members, members.back().bn)) return false;
  Node* cursor = first->prev();
  for (const Member& m : members) {
    for (size_t k = 1; k <= 4; ++k) {
      if (!internal::HoistAfter(m.bn->input(k), &cursor)) return false;
    }
  }
  torch::jit::WithInsertPoint at(first);
  std::vector<int64_t> channels;
  for (const Member& m : members) channels.push_back(m.channels);
  Value* sizes = g.insertConstant(channels);
  Value* x = g.insert(c10::aten::cat, {ListOf(g, InputsAt(members, 0)), 1});
  std::vector<Value*> joined;
  for (size_t k = 1; k <= 4; ++k) {
    joined.push_back(g.insert(c10::aten::cat, {ListOf(g, InputsAt(members, k)), 0}));
  }
  Value* y = g.insert(c10::aten::batch_norm,
                      {x, joined[0], joined[1], joined[2], joined[3], first->input(5),
                       first->input(6), first->input(7), first->input(8)});
  WriteBack(g, g.insert(c10::aten::split_with_sizes, {joined[2], sizes, 0}), InputsAt(members, 3));
  WriteBack(g, g.insert(c10::aten::split_with_sizes, {joined[3], sizes, 0}), InputsAt(members, 4));
  Value* split = g.insert(c10::aten::split_with_sizes, {y, sizes, 1});
  Node* unpack = g.insertNode(g.createListUnpack(split, members.size()));
  for (size_t k = 0; k < members.size(); ++k) {
    Value* out = members[k].bn->output();
    unpack->output(k)->setType(out->type());
    if (facts != nullptr) facts->Propagate(out, unpack->output(k));
    out->replaceAllUsesWith(unpack->output(k));
  }
  for (const Member& m : members) m.bn->destroy();
  return true;
}

}  // namespace

bool BatchTrainingBatchNorms(const std::shared_ptr<Graph>& graph, ShapeFacts* facts,
                             const c10::IValue& self, int64_t* batched) {
  ModuleObjectMap objects = ModuleObjects(*graph, self);
  AttrReads reads;
  CollectAttrReads(graph->block(), objects, &reads);
  std::map<GroupKey, std::vector<Member>> groups;
  std::vector<GroupKey> order;
  for (Node* n : graph->nodes()) {
    auto member = MatchMember(n, objects, reads, facts);
    if (!member) continue;
    auto& group = groups[member->second];
    if (group.empty()) order.push_back(member->second);
    group.push_back(member->first);
  }
  bool changed = false;
  for (const GroupKey& key : order) {
    std::vector<Member> members = Distinct(groups[key]);
    if (members.size() < 2) continue;
    if (!Join(*graph, members, facts)) continue;
    changed = true;
    if (batched != nullptr) *batched += static_cast<int64_t>(members.size());
  }
  return changed;
}

namespace {

// The owners of a joined batch norm's members: its running mean is a cat of the members'
// running means, each read from its own module object.
std::vector<const void*> JoinedOwners(Node* bn, const ModuleObjectMap& objects) {
  if (bn->kind() != c10::aten::batch_norm || bn->inputs().size() != 9) return {};
  Node* cat = bn->input(3)->node();
  if (cat->kind() != c10::aten::cat || cat->input(0)->node()->kind() != c10::prim::ListConstruct) return {};
  std::vector<const void*> owners;
  for (Value* v : cat->input(0)->node()->inputs()) {
    Node* read = v->node();
    if (read->kind() != c10::prim::GetAttr || read->s(c10::attr::name) != "running_mean") return {};
    auto owner = objects.find(read->input());
    if (owner == objects.end()) return {};
    owners.push_back(owner->second.get());
  }
  return owners;
}

}  // namespace

bool JoinBatchNormCounters(const std::shared_ptr<Graph>& graph, const c10::IValue& self) {
  ModuleObjectMap objects = ModuleObjects(*graph, self);
  AttrReads reads;
  CollectAttrReads(graph->block(), objects, &reads);
  std::vector<Node*> joined;
  for (Node* n : graph->nodes()) {
    if (JoinedOwners(n, objects).size() >= 2) joined.push_back(n);
  }
  bool changed = false;
  for (Node* bn : joined) {
    std::vector<Node*> adds = CounterAdds(JoinedOwners(bn, objects), graph->block(), reads);
    if (adds.empty()) continue;
    Node* cursor = bn->prev();
    torch::jit::WithInsertPoint at(bn);
    changed |= JoinCounters(*graph, adds, &cursor);
  }
  return changed;
}

}  // namespace sentier
