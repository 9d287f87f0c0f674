// rule_parser_fuzz.cc — libFuzzer target: the rule-file parser on arbitrary text (torch-free).
// Property: ParseRules never crashes; it returns rules or an error that starts with
// "fuzz.rules:line:col: ".
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "passes/rule_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto rules = sentier::ParseRules(text, "fuzz.rules");
  if (!rules.ok() && !absl::StartsWith(rules.status().message(), "fuzz.rules:")) {
    // Every parse error must name file:line:col (rule_parser.h).
    std::abort();
  }
  return 0;
}
