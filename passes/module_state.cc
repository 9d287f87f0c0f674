// module_state.cc — ModuleStateGuard: records and restores a module tree's attribute slots and
// buffer values around runs on sample inputs.
#include "passes/module_state.h"

#include <ATen/ATen.h>
#include <ATen/core/class_type.h>
#include <c10/core/GradMode.h>

#include "absl/container/flat_hash_set.h"

namespace sentier {

ModuleStateGuard::ModuleStateGuard(const c10::IValue& root) {
  if (!root.isObject()) return;
  absl::flat_hash_set<const c10::ivalue::Object*> seen;
  std::vector<c10::intrusive_ptr<c10::ivalue::Object>> todo = {root.toObject()};
  while (!todo.empty()) {
    c10::intrusive_ptr<c10::ivalue::Object> obj = std::move(todo.back());
    todo.pop_back();
    if (!seen.insert(obj.get()).second) continue;
    SavedObject s;
    s.object = obj;
    s.slots = obj->slots();
    const c10::ClassTypePtr& type = obj->type();
    for (size_t i = 0; i < s.slots.size(); ++i) {
      const c10::IValue& v = s.slots[i];
      if (v.isObject()) {
        todo.push_back(v.toObject());
      } else if (v.isTensor() && v.toTensor().defined() && !(i < type->numAttributes() && type->is_parameter(i))) {
        s.buffers.emplace_back(v.toTensor(), v.toTensor().detach().clone());
      }
    }
    saved_.push_back(std::move(s));
  }
}

ModuleStateGuard::~ModuleStateGuard() {
  c10::NoGradGuard no_grad;
  for (SavedObject& s : saved_) {
    for (size_t i = 0; i < s.slots.size() && i < s.object->slots().size(); ++i) {
      s.object->setSlot(i, s.slots[i]);
    }
    for (auto& [buffer, values] : s.buffers) {
      if (!buffer.is_same(values)) buffer.detach().copy_(values);
    }
  }
}

}  // namespace sentier
