// rule_parser.h — parses Sentier rule files (text) into Rule syntax trees.
//
// RuleParser checks syntax only; names of operators, constraints and builtins are checked when the
// parsed rules are compiled into a RuleSet (rule_set.h). Every error is an
// absl::InvalidArgumentError whose message starts with `file:line:col: `.
//
//   absl::StatusOr<std::vector<Rule>> rules = ParseRules(text, "patterns/vertical.rules");
//
// NOTE: the parser does no I/O; callers read the file and pass its text.
#ifndef SENTIER_PASSES_RULE_PARSER_H_
#define SENTIER_PASSES_RULE_PARSER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "passes/rule_ast.h"

namespace sentier {

// ParseRules: parses every rule in `text`; `file` is used in error locations only.
absl::StatusOr<std::vector<Rule>> ParseRules(absl::string_view text, absl::string_view file);

// ParseExpression: parses one expression (used by tests and the rule compiler).
absl::StatusOr<ExprPtr> ParseExpression(absl::string_view text, absl::string_view file,
                                        int line);

}  // namespace sentier

#endif  // SENTIER_PASSES_RULE_PARSER_H_
