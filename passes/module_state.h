// module_state.h — runs on sample inputs leave the module as it was.
//
// Shape facts and aten-op counts run a method graph whose input 0 is the module object itself. A
// forward in training mode writes to the module: BatchNorm updates its running statistics and
// `num_batches_tracked` in place, and `prim::SetAttr` can rebind attributes. Those runs are
// measurements, not training, so their effects must not reach the artifact that is saved
// afterwards. ModuleStateGuard records every attribute slot of the object tree under a value and a
// copy of every tensor that is not a parameter (buffers), and puts both back when it goes out of
// scope. Parameters are not copied (a forward does not write to them in place; copying them would
// double the memory of large embedding tables), only their slots are restored.
//
//   {
//     ModuleStateGuard keep(inputs[0]);   // no-op unless inputs[0] is an object
//     state.run(stack);
//   }                                     // running_mean, num_batches_tracked, ... restored
#ifndef SENTIER_PASSES_MODULE_STATE_H_
#define SENTIER_PASSES_MODULE_STATE_H_

#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

namespace sentier {

class ModuleStateGuard {
 public:
  explicit ModuleStateGuard(const c10::IValue& root);
  ~ModuleStateGuard();
  ModuleStateGuard(const ModuleStateGuard&) = delete;
  ModuleStateGuard& operator=(const ModuleStateGuard&) = delete;

 private:
  struct SavedObject {
    c10::intrusive_ptr<c10::ivalue::Object> object;
    std::vector<c10::IValue> slots;
    std::vector<std::pair<at::Tensor, at::Tensor>> buffers;  // (the buffer, a copy of its values)
  };
  std::vector<SavedObject> saved_;
};

}  // namespace sentier

#endif  // SENTIER_PASSES_MODULE_STATE_H_
