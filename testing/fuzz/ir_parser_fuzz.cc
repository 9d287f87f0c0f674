// ir_parser_fuzz.cc — libFuzzer target: LibTorch's text-IR reader (torch::jit::parseIR), which
// Sentier uses for `.ir` models (LoadModel). Arbitrary text must not crash: exceptions are fine.
// When the text parses, printing the graph and parsing the print again must not crash either.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/irparser.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 16384) return 0;
  std::string text(reinterpret_cast<const char*>(data), size);
  auto graph = std::make_shared<torch::jit::Graph>();
  try {
    torch::jit::parseIR(text, graph.get());
  } catch (const std::exception&) {
    return 0;
  }
  try {
    std::string printed = graph->toString();
    auto again = std::make_shared<torch::jit::Graph>();
    torch::jit::parseIR(printed, again.get());
  } catch (const std::exception&) {
  }
  return 0;
}
