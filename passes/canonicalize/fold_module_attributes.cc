// fold_module_attributes.cc — module attributes that are configuration, not state, become
// constants.
//
// A scripted module reads its configuration through prim::GetAttr: `self.d` in
// `torch.split(x, self.d, 1)`, `self.keys` in `for k in self.keys:`, an `eps` or `inplace` flag in
// a library module. Until such a read is a constant, the split's sections, the loop's trip count
// or the dead branch of an `F.*` wrapper are unknown, and the rules see nothing to rewrite. This
// pass replaces the read by the value the module holds, for attributes that are not parameters,
// buffers or submodules and whose value is an int, float, bool, str, None, or a list or tuple of
// those (a list may also hold tuples of them: column ranges) (tensors stay attributes: they would become graph constants that Module::to does not
// move), and for parameters and buffers declared NoneType (a bias-free `nn.Linear`'s `bias`: its
// type admits no tensor, so it reads None in every call, as in a traced graph). It is safe when
// the value cannot change between calls: the attribute is assigned by no method of any module of
// the hierarchy (no prim::SetAttr of that name), it is not `training`
// (train() and eval() flip it on a loaded artifact), and a folded list is only read (no use may
// write to it, or the constant would carry the write into the next call). An attribute that a
// user changes from Python on the loaded artifact (`m.d = 3`) would not be seen: the same
// assumption torch.jit.freeze makes, and documented with the pipeline.
//
// A parameter or buffer stays state, but one fact about it cannot change: a floating (or complex)
// tensor stays floating or complex, since Module.to(dtype), half(), double() and the like convert
// only floating and complex tensors, and to floating or complex dtypes. So a comparison of its
// dtype with an integral or bool dtype (`weight.dtype == torch.long`, which F.embedding_bag tests
// to swap misordered arguments) is folded to false (`!=`: true), for attributes no method assigns.
// The branch it guarded then folds away and the parameter reaches its op directly. Likewise its
// number of dims (`aten::dim`, F.embedding_bag's `weight.dim() == 2` check in torch 2.x): no
// conversion changes a shape, and load_state_dict requires equal shapes. Only reassigning the
// attribute itself from Python would change either, as with the configuration above.
#include <unordered_map>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include "absl/container/flat_hash_set.h"
#include "passes/canonicalize/passes.h"
#include "passes/module_objects.h"

namespace sentier {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;
using ObjectPtr = c10::intrusive_ptr<c10::ivalue::Object>;

void CollectSetAttrNames(Block* b, absl::flat_hash_set<std::string>* names) {
  for (Node* n : b->nodes()) {
    if (n->kind() == c10::prim::SetAttr) names->insert(n->s(c10::attr::name));
    for (Block* sub : n->blocks()) CollectSetAttrNames(sub, names);
  }
}

// Names assigned by any method of `obj` or of any object it holds (submodules).
void AssignedNames(const ObjectPtr& obj, absl::flat_hash_set<const void*>* seen,
                   absl::flat_hash_set<std::string>* names) {
  if (!seen->insert(obj.get()).second) return;
  c10::ClassTypePtr type = obj->type();
  for (torch::jit::Function* fn : type->methods()) {
    if (!fn->isGraphFunction()) continue;
    CollectSetAttrNames(torch::jit::toGraphFunction(*fn).graph()->block(), names);
  }
  for (size_t i = 0; i < type->numAttributes(); ++i) {
    const c10::IValue& v = obj->getSlot(i);
    if (v.isObject()) AssignedNames(v.toObject(), seen, names);
  }
}

// Immutable scalars, strings, None, and lists/tuples of them (lists also of such tuples).
bool Foldable(const c10::IValue& v) {
  if (v.isInt() || v.isDouble() || v.isBool() || v.isString() || v.isNone()) return true;
  if (v.isTuple()) {
    for (const c10::IValue& e : v.toTupleRef().elements()) {
      if (!Foldable(e) || e.isList()) return false;
    }
    return true;
  }
  if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      // Tuples are immutable: a list of (start, end) column ranges folds like a list of ints.
      if (!(e.isInt() || e.isDouble() || e.isBool() || e.isString() || (e.isTuple() && Foldable(e)))) {
        return false;
      }
    }
    return true;
  }
  return false;
}

// FoldStateFacts: `prim::dtype(state) == c` / `!= c` for a floating or complex tensor `state`
// and a constant integral or bool dtype `c`, in either operand order, become false / true, and
// `aten::dim(state)` its number of dims.
void FoldStateFacts(Value* state, const c10::IValue& value, PassCounters* counters, bool* changed) {
  if (!value.isTensor()) return;
  const c10::ScalarType st = value.toTensor().scalar_type();
  if (!c10::isFloatingType(st) && !c10::isComplexType(st)) return;
  std::vector<Node*> checks, dims;
  for (const torch::jit::Use& u : state->uses()) {
    if (u.user->kind() == c10::aten::dim && u.user->inputs().size() == 1 && u.user->output()->hasUses()) {
      dims.push_back(u.user);
    }
    if (u.user->kind() != c10::prim::dtype) continue;
    for (const torch::jit::Use& c : u.user->output()->uses()) {
      Node* cmp = c.user;
      if ((cmp->kind() != c10::aten::eq && cmp->kind() != c10::aten::ne) || cmp->inputs().size() != 2 ||
          !cmp->output()->hasUses()) {
        continue;
      }
      Value* other = cmp->input(1 - c.offset);
      c10::optional<c10::IValue> k = torch::jit::toIValue(other);
      if (!k || !k->isInt()) continue;
      const int64_t code = k->toInt();
      if (code < 0 || code >= static_cast<int64_t>(c10::ScalarType::NumOptions)) continue;
      if (!c10::isIntegralType(static_cast<c10::ScalarType>(code), /*includeBool=*/true)) continue;
      checks.push_back(cmp);
    }
  }
  // The node's output becomes the constant `known`, inserted where the node stands.
  auto fold = [&](Node* n, const c10::IValue& known, const char* counter) {
    Value* c;
    {
      torch::jit::WithInsertPoint guard(n);
      c = n->owningGraph()->insertConstant(known);
    }
    n->output()->replaceAllUsesWith(c);
    *changed = true;
    AddCount(counters, counter);
  };
  for (Node* dim : dims) fold(dim, static_cast<int64_t>(value.toTensor().dim()), "fold_module_attributes.ranks");
  for (Node* cmp : checks) fold(cmp, cmp->kind() == c10::aten::ne, "fold_module_attributes.dtype_checks");
}

void Fold(Block* b, const ModuleObjectMap& objects, const absl::flat_hash_set<std::string>& assigned,
          PassCounters* counters, bool* changed) {
  for (Node* n : b->nodes()) {
    for (Block* sub : n->blocks()) Fold(sub, objects, assigned, counters, changed);
    if (n->kind() != c10::prim::GetAttr) continue;
    auto it = objects.find(n->input());
    if (it == objects.end()) continue;
    const ObjectPtr& obj = it->second;
    const std::string& name = n->s(c10::attr::name);
    c10::optional<size_t> slot = obj->type()->findAttributeSlot(name);
    if (!slot) continue;
    const c10::IValue& value = obj->getSlot(*slot);
    if (value.isObject()) continue;  // a submodule: ModuleObjects follows the path
    if (!n->output()->hasUses()) continue;  // folded before: dead code removal takes it
    // A parameter or buffer is state, except one declared NoneType (`nn.Linear(..., bias=False)`
    // registers its bias as None): its type admits no other value, so the read is None.
    const bool declared_none = obj->type()->getAttribute(*slot)->kind() == c10::TypeKind::NoneType;
    if ((obj->type()->is_parameter(*slot) || obj->type()->is_buffer(*slot)) && !declared_none) {
      if (!assigned.contains(name)) FoldStateFacts(n->output(), value, counters, changed);
      continue;
    }
    if (name == "training" || assigned.contains(name) || !Foldable(value)) continue;
    if (value.isList() && !ListIsOnlyRead(n->output())) continue;
    c10::optional<Value*> c;
    {
      torch::jit::WithInsertPoint guard(n);
      c = torch::jit::tryInsertConstant(*n->owningGraph(), value);
    }
    if (!c) continue;
    n->output()->replaceAllUsesWith(*c);
    *changed = true;
    AddCount(counters, "fold_module_attributes.attributes");
  }
}

}  // namespace

bool FoldModuleAttributes(const std::shared_ptr<Graph>& graph, const c10::IValue& self,
                          PassCounters* counters) {
  ModuleObjectMap objects = ModuleObjects(*graph, self);
  if (objects.empty()) return false;
  absl::flat_hash_set<const void*> seen;
  absl::flat_hash_set<std::string> assigned;
  AssignedNames(self.toObject(), &seen, &assigned);
  bool changed = false;
  Fold(graph->block(), objects, assigned, counters, &changed);
  return changed;
}

}  // namespace sentier
