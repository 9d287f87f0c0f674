// sample_inputs_fuzz.cc — libFuzzer target: the sample-inputs reader (runtime/model_io.h
// LoadSampleInputs, i.e. torch::jit::pickle_load) on arbitrary bytes written to a temp file.
// Bad bytes must give an InvalidArgumentError, never a crash.
//
// The checked-in corpus is text only; binary seeds (valid torch.save archives of a tuple, a list
// and a single tensor) are written at start-up when $SENTIER_FUZZ_SEED_DIR names a directory
// (testing/fuzz_smoke.sh does this), so the fuzzer starts from real archives.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include "runtime/model_io.h"

namespace {

std::string g_path;

void WriteSeed(const std::string& dir, const std::string& name, const c10::IValue& value) {
  std::vector<char> bytes = torch::jit::pickle_save(value);
  std::ofstream(dir + "/" + name, std::ios::binary).write(bytes.data(), bytes.size());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* tmp = std::getenv("TMPDIR");
  g_path = std::string(tmp ? tmp : "/tmp") + "/sentier_inputs_fuzz." + std::to_string(::getpid()) + ".pt";
  if (const char* dir = std::getenv("SENTIER_FUZZ_SEED_DIR")) {
    torch::manual_seed(0);
    WriteSeed(dir, "tuple2.pt",
              c10::ivalue::Tuple::create({torch::randn({2, 3}), torch::arange(4)}));
    WriteSeed(dir, "single.pt", torch::ones({3}));
    c10::List<at::Tensor> list;
    list.push_back(torch::zeros({1, 2}));
    list.push_back(torch::randn({2}).to(torch::kDouble));
    WriteSeed(dir, "list.pt", list);
    WriteSeed(dir, "int.pt", c10::IValue(int64_t{3}));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 65536) return 0;
  FILE* f = std::fopen(g_path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    auto inputs = sentier::LoadSampleInputs(g_path);
    (void)inputs;
  } catch (...) {
    // LoadSampleInputs catches std::exception from pickle_load; anything escaping is a bug.
    __builtin_trap();
  }
  return 0;
}
