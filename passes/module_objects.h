// module_objects.h — which module object each value of a method graph refers to.
//
// In a method graph (input 0 is `self`), `prim::GetAttr[name="l1"](%self)` and
// `prim::GetAttr[name="0"](%l1)` walk the module hierarchy. ModuleObjects follows those chains from
// the module object and maps every value that is a module (or other object) to that object, so a
// pass can read an attribute's current value or tell two reads of one attribute apart from reads
// of two attributes.
#ifndef SENTIER_PASSES_MODULE_OBJECTS_H_
#define SENTIER_PASSES_MODULE_OBJECTS_H_

#include <unordered_map>

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/ir/ir.h>

namespace sentier {

using ModuleObjectMap =
    std::unordered_map<const torch::jit::Value*, c10::intrusive_ptr<c10::ivalue::Object>>;

namespace internal {
inline void WalkModuleObjects(torch::jit::Block* b, ModuleObjectMap* objects) {
  for (torch::jit::Node* n : b->nodes()) {
    if (n->kind() == c10::prim::GetAttr) {
      auto it = objects->find(n->input());
      if (it != objects->end()) {
        c10::optional<size_t> slot = it->second->type()->findAttributeSlot(n->s(c10::attr::name));
        if (slot) {
          const c10::IValue& v = it->second->getSlot(*slot);
          if (v.isObject()) (*objects)[n->output()] = v.toObject();
        }
      }
    }
    for (torch::jit::Block* sub : n->blocks()) WalkModuleObjects(sub, objects);
  }
}
}  // namespace internal

// ModuleObjects: empty unless `self` is an object of graph input 0's class type.
inline ModuleObjectMap ModuleObjects(torch::jit::Graph& graph, const c10::IValue& self) {
  ModuleObjectMap objects;
  if (!self.isObject() || graph.inputs().empty()) return objects;
  auto cls = graph.inputs()[0]->type()->cast<c10::ClassType>();
  if (!cls || cls != self.toObject()->type()) return objects;
  objects[graph.inputs()[0]] = self.toObject();
  internal::WalkModuleObjects(graph.block(), &objects);
  return objects;
}

}  // namespace sentier

#endif  // SENTIER_PASSES_MODULE_OBJECTS_H_
