// stacked_parameters.h — batched parameters stored batched (sentier_opt --param_layout=stacked).
//
// The batching rules stack (or concatenate) the members' parameters inside the graph: every step
// pays a stack in the forward and a split of the gradients in the backward, and the optimizer
// updates hundreds of small tensors. StoreStackedParameters moves that work out of the step: an
// aten::stack / aten::cat of module parameters, each read only there, whose member modules have
// all their parameters and buffers in such stacks, becomes one parameter holding the stacked
// values (registered on the members' nearest common ancestor module, e.g. `l1.stacked_weight`),
// which the graph reads directly; the member modules are removed from the module, each with the
// smallest enclosing module that can go (itself, or a parent whose class's methods read it, such
// as an nn.Sequential, when everything inside has moved); a container of a class shared with
// other instances loses entries only when every instance loses the same ones. The artifact
// keeps checkpoints interchangeable: the root module gets TorchScript methods
// `original_state_dict() -> Dict[str, Tensor]` (every original name, stacked members as views of
// the stacked storage, so they follow training) and `load_original_state_dict(sd)` (strict: every
// original key, with its shape, and no other), and a string attribute `sentier_param_layout`
// holding the layout as JSON (ParamLayout::ToJson), which sentier_check and sentier_state read.
// The root's other methods that read a module that moved (the helpers forward called before it
// was inlined, such as DLRM's apply_emb) are removed; ParamLayout::removed_methods names them.
//
// What changes for a training user: parameters are fewer and larger. Element-wise optimizers
// (SGD with momentum and weight decay, Adam, AdamW) compute the same updates (tested); optimizers
// whose update depends on each tensor's norm (LARS, LAMB) or per-parameter groups of the original
// names see other tensors and differ. `original` stays the default layout for that reason.
//
//   auto layout = StoreStackedParameters(module, graph);  // graph: module's optimized forward
#ifndef SENTIER_PASSES_STACKED_PARAMETERS_H_
#define SENTIER_PASSES_STACKED_PARAMETERS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/jit/api/module.h>

#include "absl/status/statusor.h"
#include "passes/graph_fwd.h"

namespace sentier {

// One stored parameter and the original parameters it holds, in order along `dim`: member k is
// `select(dim, k)` for a stack and `narrow(dim, offset_k, sizes[k])` for a cat.
struct StackedParameter {
  std::string name;                  // qualified, e.g. "l1.stacked_weight"
  std::string op;                    // "stack" or "cat"
  int64_t dim = 0;
  std::vector<std::string> members;  // original qualified names
  std::vector<int64_t> sizes;        // cat: each member's size along dim
};

struct ParamLayout {
  std::vector<StackedParameter> stacked;
  // Every original state_dict entry (parameters, then buffers, in module order) and its shape.
  std::vector<std::string> original_names;
  std::vector<std::vector<int64_t>> original_shapes;
  // Methods of the root other than forward that read what moved (the helpers forward called
  // before it was inlined, such as DLRM's apply_emb): removed from the artifact.
  std::vector<std::string> removed_methods;

  bool empty() const { return stacked.empty(); }
  std::string ToJson() const;
  static absl::StatusOr<ParamLayout> FromJson(const std::string& json);
};

constexpr char kParamLayoutAttribute[] = "sentier_param_layout";

// StoreStackedParameters: `graph` is `module`'s forward graph (inlined, optimized). Returns the
// layout (empty when no stack qualified; the module is then unchanged).
absl::StatusOr<ParamLayout> StoreStackedParameters(torch::jit::Module& module,
                                                   const std::shared_ptr<torch::jit::Graph>& graph);

// StorableParameterReads: a predicate over the values of `graph`, a method graph of `self`: true
// for a prim::GetAttr read of a parameter that is the only tensor of its module (no other
// parameter or buffer, none in its submodules), a module other than the root. Once such a
// parameter is in a stack or cat of parameters, StoreStackedParameters can move its module out
// whole and store the stack, so no step copies it. Rules ask it through `storable_parameters()`
// (the table-batched lookups of sparse tables depend on it: a sparse gradient cannot be split
// back through a concatenation in the graph). The predicate reads the module objects as of this
// call.
std::function<bool(const torch::jit::Value* v)> StorableParameterReads(
    torch::jit::Graph& graph, const c10::IValue& self);

// ReadParamLayout: the layout an artifact carries (empty for one in the original layout).
absl::StatusOr<ParamLayout> ReadParamLayout(const torch::jit::Module& module);

// RestoreParamLayout: `layout` recorded in `module` as StoreStackedParameters leaves it (the
// `sentier_param_layout` attribute and the state_dict methods), for a module read from a format
// that keeps tensors and the layout's JSON but no methods (an exported program).
absl::Status RestoreParamLayout(torch::jit::Module& module, const ParamLayout& layout);

}  // namespace sentier

#endif  // SENTIER_PASSES_STACKED_PARAMETERS_H_
