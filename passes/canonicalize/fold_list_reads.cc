// fold_list_reads.cc — reads of lists whose elements are known become those elements.
//
// After attribute folding and unrolling, scripted code indexes lists it could have named
// directly: `self.keys[i]` with a counter `i` that is now a constant, `len(self.sizes)` as a loop
// bound, `outs[j]` of a list built by append (a prim::ListConstruct once list mutation is
// removed). aten::len and aten::__getitem__ with a constant index of such a list are replaced by
// the length or the element. For a prim::ListConstruct this is LibTorch's
// PeepholeOptimizeListIdioms (which also folds slices and concatenations of known lists and
// checks, with an alias analysis, that the list is never modified); for a constant list (a
// prim::Constant, as folded attributes are) it is done here, where every use of the constant must
// be a read (a write would change what later reads see). Out-of-range indices are left alone:
// they raise at run time, as the original does. prim::min and prim::max of a constant int or
// float list become its smallest or largest element: `for p, q in zip(a, b)` loops
// min([len(a), len(b)]) times, which is a constant trip count once both lengths are.
//
// A folded read that is written in place (`outs[0].add_(1.0)` after `outs = [a + b, ...]`)
// becomes a write to the element (`add_(%e)`) that follows the list's construction. The graph is
// right, but LibTorch's dead code elimination is not: it sweeps a block once, backwards, and
// keeps a write only when what it writes is already live, while an element becomes live only at
// the list's construction, earlier in the block. It deletes the write — in LowerSimpleTuples
// (lower_tuples), in dead_code's fallback, and when torch::jit::load compiles a saved archive's
// code (an artifact whose `outs = [add, ...]` lost its `add_`). So a construction followed by
// writes to its elements is moved after the last of them when nothing reads the list before,
// else (a list only read) built again after them for the reads that follow: the same values in
// the same order, and each write now precedes the construction that makes it live.
#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/peephole_list_idioms.h>

#include "passes/canonicalize/passes.h"
#include "passes/remove_dead_nodes.h"

namespace sentier {

bool IsImmutableType(const c10::TypePtr& t) {
  switch (t->kind()) {
    case c10::TypeKind::IntType:
    case c10::TypeKind::FloatType:
    case c10::TypeKind::BoolType:
    case c10::TypeKind::StringType:
    case c10::TypeKind::NoneType:
    case c10::TypeKind::NumberType:
    case c10::TypeKind::DeviceObjType:
      return true;
    case c10::TypeKind::TupleType:
      for (const c10::TypePtr& e : t->containedTypes()) {
        if (!IsImmutableType(e)) return false;
      }
      return true;
    default:
      return false;
  }
}

// Every use only reads the list: the op's schema does not write that argument, and no output
// that may alias it (an annotated return) has a mutable type — `xs[i]` of an int list is a read,
// `split(x, sizes)` does not annotate `sizes` at all. Uses without a schema (a container, a
// block, the graph's outputs) may lead to a write and stop the folding.
bool ListIsOnlyRead(torch::jit::Value* list) {
  for (const torch::jit::Use& u : list->uses()) {
    const c10::FunctionSchema* schema = u.user->maybeSchema();
    if (schema == nullptr || u.offset >= schema->arguments().size()) return false;
    const auto& alias = schema->arguments()[u.offset].alias_info();
    if (!alias) continue;
    if (alias->isWrite()) return false;
    for (size_t k = 0; k < schema->returns().size() && k < u.user->outputs().size(); ++k) {
      if (schema->returns()[k].alias_info() != nullptr && !IsImmutableType(u.user->output(k)->type())) {
        return false;
      }
    }
  }
  return true;
}

namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::Value;

const c10::Symbol kGetItem = c10::Symbol::fromQualString("aten::__getitem__");
const c10::Symbol kLen = c10::Symbol::fromQualString("aten::len");
const c10::Symbol kMin = c10::Symbol::fromQualString("prim::min");
const c10::Symbol kMax = c10::Symbol::fromQualString("prim::max");

// A ListConstruct of int, float, bool or str constants that is only read becomes that constant
// list (the form folded attributes and traced graphs have, and what rules' `$c` captures see).
bool FoldConstantListLiteral(Node* n) {
  if (n->kind() != c10::prim::ListConstruct || !n->output()->hasUses()) return false;
  auto lt = n->output()->type()->cast<c10::ListType>();
  if (!lt) return false;
  c10::TypeKind elem = lt->getElementType()->kind();
  if (elem != c10::TypeKind::IntType && elem != c10::TypeKind::FloatType &&
      elem != c10::TypeKind::BoolType && elem != c10::TypeKind::StringType) {
    return false;
  }
  c10::impl::GenericList values(lt->getElementType());
  for (Value* in : n->inputs()) {
    if (in->node()->kind() != c10::prim::Constant) return false;
    c10::optional<c10::IValue> v = torch::jit::toIValue(in);
    if (!v) return false;
    values.push_back(*v);
  }
  if (!ListIsOnlyRead(n->output())) return false;
  c10::optional<Value*> c;
  {
    torch::jit::WithInsertPoint guard(n);
    c = torch::jit::tryInsertConstant(*n->owningGraph(), c10::IValue(values));
  }
  if (!c) return false;
  (*c)->setType(n->output()->type());
  n->output()->replaceAllUsesWith(*c);
  return true;
}

// The smallest (or largest) element of a non-empty int or float list; nullopt otherwise (an
// empty list raises at run time, as the original does).
c10::optional<c10::IValue> Extreme(const c10::IValue& list, bool smallest) {
  c10::ArrayRef<c10::IValue> items = list.toListRef();
  if (items.empty()) return c10::nullopt;
  c10::IValue best = items[0];
  for (const c10::IValue& v : items) {
    if (v.isInt() && best.isInt()) {
      if (smallest ? v.toInt() < best.toInt() : v.toInt() > best.toInt()) best = v;
    } else if (v.isDouble() && best.isDouble()) {
      if (smallest ? v.toDouble() < best.toDouble() : v.toDouble() > best.toDouble()) best = v;
    } else {
      return c10::nullopt;
    }
  }
  return best;
}

// len / constant __getitem__ / min / max of a constant list (that nothing writes) -> the length /
// element.
bool FoldConstantListRead(Node* n) {
  bool get = n->kind() == kGetItem && n->inputs().size() == 2;
  bool len = n->kind() == kLen && n->inputs().size() == 1;
  bool extreme = (n->kind() == kMin || n->kind() == kMax) && n->inputs().size() == 1;
  if (!(get || len || extreme) || n->outputs().size() != 1 || !n->output()->hasUses()) return false;
  Value* list_value = n->input(0);
  if (list_value->node()->kind() != c10::prim::Constant) return false;
  c10::optional<c10::IValue> list = torch::jit::toIValue(list_value);
  if (!list || !list->isList() || !ListNeverWritten(list_value)) return false;
  c10::IValue folded;
  if (len) {
    folded = static_cast<int64_t>(list->toListRef().size());
  } else if (extreme) {
    c10::optional<c10::IValue> e = Extreme(*list, n->kind() == kMin);
    if (!e) return false;
    folded = *e;
  } else {
    c10::optional<int64_t> index = torch::jit::constant_as<int64_t>(n->input(1));
    int64_t count = static_cast<int64_t>(list->toListRef().size());
    if (!index) return false;
    int64_t i = *index < 0 ? *index + count : *index;
    if (i < 0 || i >= count) return false;
    folded = list->toListRef()[i];
  }
  c10::optional<Value*> c;
  {
    torch::jit::WithInsertPoint guard(n);
    c = torch::jit::tryInsertConstant(*n->owningGraph(), folded);
  }
  if (!c) return false;
  n->output()->replaceAllUsesWith(*c);
  return true;
}

// A read of a prim::ListConstruct that LibTorch's list idioms fold.
bool ReadsListConstruct(Node* n) {
  return (n->kind() == kGetItem || n->kind() == kLen || n->kind() == c10::aten::slice ||
          n->kind() == c10::aten::add || n->kind() == c10::prim::ListUnpack) &&
         n->inputs().size() >= 1 && n->input(0)->node()->kind() == c10::prim::ListConstruct;
}

// A node whose schema writes one of its arguments (aten::add_, aten::append, out= variants).
bool WritesAnArgument(const Node* n) {
  const c10::FunctionSchema* schema = n->maybeSchema();
  if (schema == nullptr) return false;
  for (const c10::Argument& a : schema->arguments()) {
    if (a.alias_info() != nullptr && a.alias_info()->isWrite()) return true;
  }
  return false;
}

// One walk: literals folded before their readers (definitions come first), reads folded; notes
// whether any node writes an argument.
void Walk(Block* b, int64_t* literals, int64_t* reads, bool* list_reads, bool* writes) {
  for (Node* n : b->nodes()) {
    for (Block* sub : n->blocks()) Walk(sub, literals, reads, list_reads, writes);
    if (FoldConstantListLiteral(n)) {
      ++*literals;
    } else if (FoldConstantListRead(n)) {
      ++*reads;
    } else if (ReadsListConstruct(n)) {
      *list_reads = true;
    }
    *writes = *writes || WritesAnArgument(n);
  }
}

// The node of `b` that is `n` or holds it in its blocks (the return node for the block's outputs).
Node* InBlock(Node* n, Block* b) {
  while (n->owningBlock() != b) n = n->owningBlock()->owningNode();
  return n;
}

// Moves (or builds again) the ListConstructs of `b` and its blocks that writes to their
// elements follow (see the top of the file). Returns how many.
int64_t ConstructAfterElementWrites(Block* b, torch::jit::AliasDb& db) {
  int64_t changed = 0;
  std::vector<Node*> constructs;
  std::vector<Node*> writers;  // nodes of b that write, themselves or in their blocks
  for (Node* n : b->nodes()) {
    bool writes = WritesAnArgument(n);
    for (Block* sub : n->blocks()) {
      changed += ConstructAfterElementWrites(sub, db);
      writes = true;  // checked against the alias analysis below
    }
    if (writes) writers.push_back(n);
    if (n->kind() == c10::prim::ListConstruct && n->output()->hasUses()) {
      bool mutable_elements = false;
      for (Value* in : n->inputs()) mutable_elements |= !IsImmutableType(in->type());
      if (mutable_elements) constructs.push_back(n);
    }
  }
  for (Node* list : constructs) {
    torch::jit::ValueSet elements(list->inputs().begin(), list->inputs().end());
    Node* last = nullptr;  // the last node after the construction that writes to an element
    for (Node* w : writers) {
      if (list->isBefore(w) && db.writesToAlias(w, elements)) last = w;
    }
    if (last == nullptr) continue;
    bool read_before = false, read_by_last = false;
    for (const torch::jit::Use& u : list->output()->uses()) {
      Node* at = InBlock(u.user, b);
      read_by_last |= at == last;
      read_before |= at != last && at->isBefore(last);
    }
    if (read_by_last) continue;
    if (!read_before) {
      list->moveAfter(last);
      ++changed;
      continue;
    }
    // Read before and after the writes: the reads after get a list of their own, built after the
    // writes. Only for a list that is only read: nothing can tell the two apart.
    if (!ListIsOnlyRead(list->output())) continue;
    Node* again = b->owningGraph()->createClone(list, [](Value* v) { return v; });
    again->insertAfter(last);
    again->output()->copyMetadata(list->output());
    const std::vector<torch::jit::Use> uses = list->output()->uses();
    for (const torch::jit::Use& u : uses) {
      if (last->isBefore(InBlock(u.user, b))) u.user->replaceInput(u.offset, again->output());
    }
    ++changed;
  }
  return changed;
}

}  // namespace

bool ListNeverWritten(const torch::jit::Value* list) {
  for (const torch::jit::Use& u : list->uses()) {
    const c10::FunctionSchema* schema = u.user->maybeSchema();
    if (schema == nullptr || u.offset >= schema->arguments().size()) return false;
    const auto& alias = schema->arguments()[u.offset].alias_info();
    if (alias && alias->isWrite()) return false;
  }
  return true;
}

bool FoldListReads(const std::shared_ptr<torch::jit::Graph>& graph, PassCounters* counters) {
  int64_t literals = 0, reads = 0, reordered = 0;
  bool list_reads = false, writes = false;
  Walk(graph->block(), &literals, &reads, &list_reads, &writes);
  bool changed = literals > 0 || reads > 0;
  // LibTorch's pass builds an alias analysis: only when a ListConstruct is read.
  bool idioms = list_reads && torch::jit::PeepholeOptimizeListIdioms(graph);
  bool swept = false;
  if (list_reads && writes) {  // (the pass does not always say when it folded a read)
    // The folded reads are left unused; they would count as reads of the list before the writes.
    swept = RemoveDeadNodes(graph);
    torch::jit::AliasDb db(graph);
    reordered = ConstructAfterElementWrites(graph->block(), db);
  }
  AddCount(counters, "fold_list_reads.constant_list_literals", literals);
  AddCount(counters, "fold_list_reads.constant_lists", reads);
  AddCount(counters, "fold_list_reads.list_idioms", idioms ? 1 : 0);
  AddCount(counters, "fold_list_reads.lists_after_element_writes", reordered);
  return changed || idioms || swept || reordered > 0;
}

}  // namespace sentier
