// archive_check_fuzz.cc — libFuzzer target: CheckArchive (runtime/archive_check.h), the structural
// check that archive bytes pass before LibTorch's reader sees them. Arbitrary bytes must give OK
// or an InvalidArgumentError, never a read outside the buffer (ASan) or a crash. Bytes that pass
// are then handed to LibTorch's reader (torch::jit::pickle_load), which must not read outside
// them either: that is what the check is for.
//
// Binary seeds (valid torch.save archives) are written at start-up when $SENTIER_FUZZ_SEED_DIR
// names a directory (testing/fuzz_smoke.sh does this).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>

#include "runtime/archive_check.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("SENTIER_FUZZ_SEED_DIR")) {
    torch::manual_seed(0);
    std::vector<char> bytes =
        torch::jit::pickle_save(c10::ivalue::Tuple::create({torch::randn({2, 3}), torch::arange(4)}));
    std::ofstream(std::string(dir) + "/tuple2.pt", std::ios::binary).write(bytes.data(), bytes.size());
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 65536) return 0;
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::Status st = sentier::CheckArchive(bytes, 4 * static_cast<int64_t>(size) + (1 << 20));
  if (!st.ok()) {
    if (!absl::IsInvalidArgument(st)) std::abort();
    return 0;
  }
  try {
    std::vector<char> copy(bytes.begin(), bytes.end());
    (void)torch::jit::pickle_load(copy);
  } catch (const std::exception&) {
  }
  return 0;
}
