// pt2_format.h — exported programs (`torch.export.save` archives, `.pt2`) behind the model-format
// seam (runtime/model_format.h).
//
//   Load          ReadPt2Archive, then ModuleFromProgram (exported_program.h);
//   SampleInputs  the archive's data/sample_inputs/model.pt (the example inputs torch.export.save
//                 keeps) or an `(args, kwargs)` file, flattened to the program's inputs;
//   Save          ProgramFromModule on the archive's own sample inputs (the metadata run), written
//                 atomically after it has been read back by this reader and, where the LibTorch
//                 has nativert (the C++ runtime of exported programs), loaded and run there;
//   KeepOriginal  the archive as read, byte for byte.
#ifndef SENTIER_RUNTIME_PT2_PT2_FORMAT_H_
#define SENTIER_RUNTIME_PT2_PT2_FORMAT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/model_format.h"

namespace sentier {

const ModelFormat& ExportedProgramFormat();

// RunInNativeRuntime: loads the archive at `path` in nativert and runs it on `inputs` (the flat
// inputs), returning its flat outputs; Unimplemented where the LibTorch has no nativert.
absl::StatusOr<std::vector<c10::IValue>> RunInNativeRuntime(const std::string& path,
                                                            const std::vector<c10::IValue>& inputs);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_PT2_PT2_FORMAT_H_
