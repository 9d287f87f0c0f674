// exported_program.h — an exported program (torch.export's serialized ExportedProgram, schema
// major version 8) as the engine's module, and back.
//
// The engine rewrites one form: a TorchScript module whose `forward` is a straight-line graph of
// ATen operators. An exported program is already that, spelled as JSON, so the conversion is a
// translation, not a lowering:
//   - each parameter and buffer of the signature becomes a module attribute at its dotted name
//     (`lins.0.weight` is `self.lins.0.weight`, as in the module torch exported), read with
//     prim::GetAttr; a lifted tensor constant becomes a buffer under `sentier_constant_<n>`;
//   - each user input is a graph input (the program's flat inputs: a dict or list argument is
//     as many tensors as it has leaves), each user output a graph output (a tuple for several);
//   - each node `torch.ops.aten.<op>.<overload>` becomes the node of that ATen operator, its
//     arguments bound by name to the overload's schema (a scalar given for a Tensor argument
//     selects the `.Scalar` form, as FX's wrapped numbers mean the same); a Tensor[] result is
//     unpacked with prim::ListUnpack, as scripted graphs do.
// Anything else is refused with the node and what is wrong: symbolic sizes (a program exported
// with dynamic shapes), operators outside ATen (higher-order ops, custom ops), non-tensor inputs
// or outputs, input or output kinds other than parameters, buffers, constants and user values
// (a program that returns buffer mutations has been functionalized: export it for training,
// which keeps them in place).
// Back: ProgramFromModule writes the rewritten forward as nodes of the same schema, every tensor's
// metadata (dtype, sizes, strides, requires_grad) recorded from one run on the sample inputs, and
// every parameter and buffer the forward reads as a weight entry, under its dotted name (a stacked
// layout's parameters under their stored names, its record in extra/sentier_param_layout.json,
// read back into the module's `sentier_param_layout` attribute, as TorchScript artifacts hold it); the
// signature's user inputs and outputs, the module call graph and the rest of the JSON are the
// original's. Shapes are static: sizes read in the graph are folded to the run's values, and a
// value computed from tensor data that is not a tensor is refused.
#ifndef SENTIER_RUNTIME_PT2_EXPORTED_PROGRAM_H_
#define SENTIER_RUNTIME_PT2_EXPORTED_PROGRAM_H_

#include <map>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "runtime/model_io.h"
#include "runtime/pt2/pt2_archive.h"

namespace sentier {

// What Save needs of the program as loaded.
struct ExportedProgramSource : ModelFormatData {
  Pt2Archive archive;              // every entry as read
  nlohmann::json program;          // models/model.json
  // Buffer attribute name -> the program's tensor-constant name, for lifted constants.
  std::map<std::string, std::string> constants;
};

// ModuleFromProgram: the engine's model of the program in `archive`; `path` names it in messages.
absl::StatusOr<Model> ModuleFromProgram(Pt2Archive archive, const std::string& path);

// FlatSampleInputs: the forward's flat arguments from a pickled `(args, kwargs)` pair (the
// archive's data/sample_inputs/model.pt, or a file in that form), flattened as torch's pytree
// does (tuples and lists in order, dicts by their key order, args before kwargs), each checked
// against the program's input metadata (dtype and sizes).
absl::StatusOr<std::vector<c10::IValue>> FlatSampleInputs(const Model& model, const c10::IValue& pickled,
                                                          const std::string& what);

// NativeRuntimeInputs: `flat` (FlatSampleInputs' values) as nativert takes them: one value per
// input of the program's signature that is not a parameter, buffer or constant, None where the
// program holds a constant input (an argument exported as None).
std::vector<c10::IValue> NativeRuntimeInputs(const Model& model, const std::vector<c10::IValue>& flat);

// ProgramFromModule: the archive of `model` (loaded by ModuleFromProgram, then rewritten), its
// tensor metadata recorded by running the forward once on `inputs` (on a copy of the module).
absl::StatusOr<Pt2Archive> ProgramFromModule(const Model& model, const std::vector<c10::IValue>& inputs);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_PT2_EXPORTED_PROGRAM_H_
