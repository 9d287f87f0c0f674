// make_example_model — writes an example model and its sample inputs.
//
//   make_example_model --model=waste --batch=64 --out_model=model.pt --out_inputs=inputs.pt
//
// Exit codes: 0 written; 2 bad flags (unknown model); 1 write failure.
#include <iostream>

#include <gflags/gflags.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "runtime/model_io.h"
#include "tools/example_models.h"

DEFINE_string(model, "waste", "example model name (waste, towers, unbind_mix)");
DEFINE_int64(batch, 64, "rows in the sample inputs");
DEFINE_string(out_model, "", "where to write the TorchScript archive");
DEFINE_string(out_inputs, "", "where to write the sample inputs (a tuple of tensors)");
DEFINE_uint64(seed, 0, "parameter seed");

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_out_model.empty() || FLAGS_out_inputs.empty()) {
    std::cerr << "make_example_model: --out_model and --out_inputs are required\n";
    return 2;
  }
  sentier::ExampleModel m;
  try {
    m = sentier::MakeExampleModel(FLAGS_model, FLAGS_seed);
  } catch (const std::exception& e) {
    std::cerr << "make_example_model: " << e.what() << "\n";
    return 2;
  }
  try {
    sentier::Model model;
    model.is_module = true;
    model.module = m.module;
    model.graph = m.module.get_method("forward").graph();
    absl::Status st = sentier::SaveModel(model, FLAGS_out_model);
    if (!st.ok()) {
      std::cerr << "make_example_model: " << st.message() << "\n";
      return 1;
    }
    std::vector<c10::IValue> in = m.inputs(FLAGS_batch);
    std::vector<char> bytes = torch::jit::pickle_save(c10::ivalue::Tuple::create(in));
    st = sentier::WriteFileAtomically(FLAGS_out_inputs, std::string(bytes.begin(), bytes.end()));
    if (!st.ok()) {
      std::cerr << "make_example_model: " << st.message() << "\n";
      return 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "make_example_model: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
