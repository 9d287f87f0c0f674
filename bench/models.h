// models.h — recommendation-style models at realistic sizes, for the GPU benchmark suite.
//
// Each model is TorchScript source compiled with Module::define, with its parameters registered
// from a seeded generator (the same model is rebuilt bit for bit). The source is ALSO valid
// Python once `torch.linear` is spelled `torch.nn.functional.linear` (torch.linear exists only in
// TorchScript): it uses only tensors passed in and `self.<name>` parameters, so a Python script
// can rebuild the model as an nn.Module (bench/compare_torch_compile.py does, from the archive
// model_bench exports) and run it under torch.compile.
//
//   BenchModel m = MakeBenchModel("dlrm");
//   std::vector<c10::IValue> in = m.inputs(m.gpu_batch);   // tensors on CPU
//   m.module.forward(in);
#ifndef SENTIER_BENCH_MODELS_H_
#define SENTIER_BENCH_MODELS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/script.h>

namespace sentier {
namespace bench {

struct BenchModel {
  std::string name;
  std::string description;  // one line, for tables
  torch::jit::Module module;
  std::string source;       // the TorchScript source of forward (see BenchModelSource)
  int64_t gpu_batch = 4096;  // the batch the GPU benchmark runs at
  // Sample inputs for a batch of `batch` rows: float tensors, and Long index tensors whose
  // values lie in [0, rows of their table). Seeded: the same batch gives the same tensors.
  std::function<std::vector<c10::IValue>(int64_t batch)> inputs;
};

// BenchModelNames: "dlrm", "dcn", "mmoe", "highway256", "split_cat_chains", "wide_branches".
std::vector<std::string> BenchModelNames();

// MakeBenchModel: builds the named model; throws std::invalid_argument for unknown names.
BenchModel MakeBenchModel(const std::string& name, uint64_t seed = 0);

// BenchModelSource: the TorchScript source of the named model's forward (`def forward(self,
// ...)`); every attribute it reads is a parameter of the module.
std::string BenchModelSource(const std::string& name);

}  // namespace bench
}  // namespace sentier

#endif  // SENTIER_BENCH_MODELS_H_
