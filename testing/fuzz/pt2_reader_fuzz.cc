// pt2_reader_fuzz.cc — libFuzzer target: the exported-program reader (runtime/pt2/) on arbitrary
// bytes. Bad bytes must give an InvalidArgumentError, never a crash, a hang or a huge allocation.
//
// Two kinds of input, by their first byte:
//   '{'   the program's JSON (models/model.json), put into a sound archive (the weights of
//         runtime/pt2/testdata/towers.pt2), then read into the engine's module: the JSON
//         reader's checks (schema version, signature, nodes bound to ATen schemas, symbolic
//         sizes, outputs) meet mutated programs;
//   else  a whole archive: the zip container's checks (runtime/archive_check.h, entry names,
//         sizes, archive_format), then the program.
// The checked-in seed is the JSON of towers.pt2 (text); the archive itself is written to
// $SENTIER_FUZZ_SEED_DIR at start-up (testing/fuzz_smoke.sh sets it, running from the
// repository root).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "runtime/pt2/exported_program.h"
#include "runtime/pt2/pt2_archive.h"

namespace {

sentier::Pt2Archive* g_base = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::ifstream in("runtime/pt2/testdata/towers.pt2", std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  auto base = sentier::ReadPt2Archive(bytes.str(), "towers.pt2");
  if (!base.ok()) std::abort();  // run from the repository root
  g_base = new sentier::Pt2Archive(*base);
  if (const char* dir = std::getenv("SENTIER_FUZZ_SEED_DIR")) {
    std::ofstream(std::string(dir) + "/towers.pt2", std::ios::binary) << bytes.str();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  if (!input.empty() && input[0] == '{') {
    sentier::Pt2Archive archive = *g_base;
    archive.entries[std::string(sentier::kPt2ProgramEntry)] = input;
    (void)sentier::ModuleFromProgram(std::move(archive), "fuzz.pt2");
    return 0;
  }
  auto archive = sentier::ReadPt2Archive(input, "fuzz.pt2");
  if (archive.ok()) (void)sentier::ModuleFromProgram(std::move(*archive), "fuzz.pt2");
  return 0;
}
