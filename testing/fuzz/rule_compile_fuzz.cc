// rule_compile_fuzz.cc — libFuzzer target: parse arbitrary rule text, then compile what parses
// with RuleSet::Create (resolves operators against LibTorch's registry, checks captures,
// functions and connectivity). Neither step may crash; errors are statuses.
#include <cstddef>
#include <cstdint>
#include <string>

#include "passes/rule_parser.h"
#include "passes/rule_set.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto rules = sentier::ParseRules(text, "fuzz.rules");
  if (!rules.ok()) return 0;
  try {
    auto set = sentier::RuleSet::Create(std::move(*rules));
    if (set.ok()) {
      (void)(*set)->Fingerprint();
      for (size_t i = 0; i < (*set)->size(); ++i) (void)(*set)->rule(i).name;
    }
  } catch (...) {
    // RuleSet::Create is documented to return errors, not throw: an escaping exception is a bug.
    __builtin_trap();
  }
  return 0;
}
