// example_models.h — small TorchScript models with split/cat waste, built without Python.
//
// Each model is TorchScript source (also valid Python) compiled with Module::define, with its
// parameters registered from a seeded generator, so the same model is rebuilt bit for bit.
//
//   ExampleModel m = MakeExampleModel("waste");
//   m.module.save("model.pt");
#ifndef SENTIER_TOOLS_EXAMPLE_MODELS_H_
#define SENTIER_TOOLS_EXAMPLE_MODELS_H_

#include <string>
#include <vector>

#include <torch/script.h>

namespace sentier {

struct ExampleModel {
  std::string name;
  torch::jit::Module module;
  // Sample inputs for a batch of `batch` rows.
  std::vector<c10::IValue> (*inputs)(int64_t batch) = nullptr;
};

// ExampleModelNames: "waste" (scripted split/cat waste with loops and list indexing),
// "towers" (a submodule per feature slice, cat of their outputs), "unbind_mix" (unbind/stack,
// nested cats and full slices), and horizontal shapes: "feature_towers" (8 towers of
// Linear(32,64) -> tanh -> LayerNorm -> Linear(64,32) -> relu), "split_linears",
// "same_input_linears", "split_layernorms", "split_pointwise", "clamp_branches",
// "accumulated_linears", "highway" (the shapes of Optimus' own tests).
std::vector<std::string> ExampleModelNames();

// MakeFeatureTowers: `n` feature towers (input [B, 32n]); with `batched`, the same towers written
// batched by hand with pre-stacked parameters (the target shape of the horizontal rules).
torch::jit::Module MakeFeatureTowers(int n, uint64_t seed, bool batched);

// MakeExampleModel: builds the named model; throws std::invalid_argument for unknown names.
ExampleModel MakeExampleModel(const std::string& name, uint64_t seed = 0);

}  // namespace sentier

#endif  // SENTIER_TOOLS_EXAMPLE_MODELS_H_
