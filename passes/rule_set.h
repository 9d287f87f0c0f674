// rule_set.h — a compiled, frozen set of text rules, ready to match TorchScript graphs.
//
// RuleSet::Create compiles parsed rules once: it resolves every operator name or RE2 alternative
// against LibTorch's operator registry, checks that every capture is bound before it is used,
// that every function and builtin exists with the right number of arguments, and that every
// pattern line is connected to the rule's anchor (its last match line). Errors name
// `file:line:col`. The result is immutable and can be shared by any number of graphs.
//
//   absl::StatusOr<std::vector<Rule>> parsed = ParseRules(text, "my.rules");
//   absl::StatusOr<std::shared_ptr<const RuleSet>> rules = RuleSet::Create(*parsed);
//   std::string fp = (*rules)->Fingerprint();
#ifndef SENTIER_PASSES_RULE_SET_H_
#define SENTIER_PASSES_RULE_SET_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "passes/rule_ast.h"

namespace sentier {

struct CompiledRule;  // defined in internal/compiled_rule.h (not part of the public API)

// RuleSet: compiled rules in load order (the order in which they are tried).
class RuleSet {
 public:
  // Create: compiles `rules`. Duplicate rule names are an error.
  static absl::StatusOr<std::shared_ptr<const RuleSet>> Create(std::vector<Rule> rules);

  // Filter: the subset whose names match `enable` (RE2, full match; empty = all) and do not
  // match `disable` (empty = none). An invalid regex is an InvalidArgumentError.
  absl::StatusOr<std::shared_ptr<const RuleSet>> Filter(const std::string& enable,
                                                        const std::string& disable) const;
  // Without: the subset without the rules named in `names` (exact names; others are ignored),
  // in load order. Without({}) is the whole set; Only({}) is the empty set.
  std::shared_ptr<const RuleSet> Without(const std::vector<std::string>& names) const;
  // Only: the subset of the rules named in `names`, in load order.
  std::shared_ptr<const RuleSet> Only(const std::vector<std::string>& names) const;

  // Fingerprint: sha256 (hex) over the normalized text of every rule, in order. Comments and
  // whitespace do not change it; any change to a rule's meaning does.
  std::string Fingerprint() const;

  size_t size() const { return rules_.size(); }
  const Rule& rule(size_t i) const;
  const CompiledRule& compiled(size_t i) const { return *rules_[i]; }

  ~RuleSet();

 private:
  RuleSet() = default;
  std::vector<std::shared_ptr<const CompiledRule>> rules_;
};

// DescribeLanguage: the functions (for `where` and arguments) and builtins (for `call`) the
// language offers, one per line as `name(args) — doc`; used by `sentier_opt --list_functions`.
std::string DescribeLanguage();

}  // namespace sentier

#endif  // SENTIER_PASSES_RULE_SET_H_
