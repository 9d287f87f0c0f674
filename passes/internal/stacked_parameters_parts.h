// internal/stacked_parameters_parts.h — what the parts of StoreStackedParameters share: the
// module objects' places, the candidate stacks and the module tree they are judged against.
//
// stacked_parameters.cc finds the stacks of parameters that can be stored and the module objects
// that leave with them, and runs the steps; its parts do the rest:
//   stacked_parameters_store.cc   stores the accepted stacks as parameters that the graph reads,
//                                 and removes what moved from the module
//   stacked_parameters_layout.cc  the layout record (ParamLayout's JSON) and the state_dict
//                                 methods that keep checkpoints interchangeable
// Not part of the public API.
#ifndef SENTIER_PASSES_INTERNAL_STACKED_PARAMETERS_PARTS_H_
#define SENTIER_PASSES_INTERNAL_STACKED_PARAMETERS_PARTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "passes/module_objects.h"
#include "passes/stacked_parameters.h"

namespace sentier {
namespace internal {
namespace stacked_parameters {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;
using ObjectPtr = c10::intrusive_ptr<c10::ivalue::Object>;
using Obj = c10::ivalue::Object;

// Where each module object sits in the hierarchy.
struct Place {
  const Obj* parent = nullptr;
  std::string attr;  // its attribute name in the parent
  std::string path;  // qualified, "" for the root
};

// One parameter of a candidate stack: the module that holds it, its name there, its value.
struct Member {
  const Obj* module;  // the module holding the parameter
  std::string attr;   // the parameter's name in it
  at::Tensor tensor;
};

// An aten::stack or aten::cat of module parameters (its members), in the forward graph.
struct Candidate {
  Node* node;   // aten::stack or aten::cat
  int64_t dim;
  std::vector<Member> members;
  // Buffers (batched_batch_norms' joined running statistics and step counters) instead of
  // parameters: the joined tensor is written in place and copied back into each member
  // (`member.data.copy_(piece)`); those copies (and their prim::data) go when it is stored.
  bool buffers = false;
  std::vector<Node*> write_backs;
};

// The module hierarchy below the root, and what reads it: the graph being rewritten (the
// root's forward) and the methods of every class in it.
struct ModuleTree {
  ObjectPtr root;
  absl::flat_hash_map<const Obj*, Place> places;
  absl::flat_hash_map<const c10::ClassType*, int> type_uses;
  absl::flat_hash_map<const Obj*, std::vector<const Obj*>> children;
  absl::flat_hash_map<const c10::ClassType*, std::vector<const Obj*>> instances;
  // Attributes some method reads, by the class of the object it reads them from: a method reads
  // its own attributes and, through GetAttr chains, those of the objects below (a loop over a
  // ModuleList in a method of the list's parent reads the list's entries). Every method of every
  // class counts, except the root's: its forward is the graph being rewritten, and its other
  // methods are the helpers forward called (inlined into it now: DLRM's apply_emb), which go
  // where they read what moves (StaleRootMethods).
  absl::flat_hash_map<const c10::ClassType*, absl::flat_hash_set<std::string>> method_reads;
  // The graph's reads: GetAttr nodes reading a non-module attribute of each object, objects that
  // some other node takes as input, and GetAttr nodes per attribute of the root.
  absl::flat_hash_map<const Obj*, int64_t> param_reads;
  absl::flat_hash_set<const Obj*> other_reads;
  absl::flat_hash_map<std::string, int64_t> root_reads;

  const Obj* parent(const Obj* o) const { return places.at(o).parent; }
  bool ReadByMethods(const Obj* o, const std::string& attr) const {
    auto it = method_reads.find(o->type().get());
    return it != method_reads.end() && it->second.contains(attr);
  }
};

// The units that leave the tree with the accepted candidates.
struct LeavingUnits {
  const ModuleTree* tree;
  absl::flat_hash_set<const Obj*> units;

  // Whether `o` is (inside) a unit that goes.
  bool Goes(const Obj* o) const {
    for (; o != nullptr; o = tree->parent(o)) {
      if (units.contains(o)) return true;
    }
    return false;
  }
};

// stacked_parameters_store.cc: storing the accepted candidates, and removing what moved.

// Each accepted candidate becomes a stored parameter (its record goes to `layout`) that the graph
// reads in its place; the root's own parameters that moved go to `removed_root_params`.
absl::Status StoreCandidates(Graph& graph, const ModuleObjectMap& objects, const std::vector<Candidate>& candidates,
                             const std::vector<bool>& accepted, const ModuleTree& tree,
                             const LeavingUnits& leaving, ParamLayout* layout,
                             std::vector<std::string>* removed_root_params);

// An error where the graph still reads a module that goes or a moved parameter of the root.
absl::Status CheckMovedStateUnread(Graph& graph, const ModuleTree& tree, const LeavingUnits& leaving,
                                   const std::vector<std::string>& removed_root_params);

// The root's methods other than forward that read what moved, or call such a method.
std::vector<std::string> StaleRootMethods(const ModuleTree& tree, const LeavingUnits& leaving,
                                          const std::vector<std::string>& removed_root_params);

// Removes the root's moved parameters, then each unit that goes from its parent.
void RemoveMovedState(const ModuleTree& tree, const LeavingUnits& leaving,
                      const std::vector<std::string>& removed_root_params);

// stacked_parameters_layout.cc: the layout record and the state_dict methods.

// The original state_dict's names and shapes, into `layout`, before anything moves.
void RecordOriginalState(const torch::jit::Module& module, ParamLayout* layout);

// Records `layout` in the module and defines original_state_dict() and
// load_original_state_dict().
absl::Status RecordLayout(torch::jit::Module& module, const ParamLayout& layout);

}  // namespace stacked_parameters
}  // namespace internal
}  // namespace sentier

#endif  // SENTIER_PASSES_INTERNAL_STACKED_PARAMETERS_PARTS_H_
