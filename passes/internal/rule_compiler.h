// internal/rule_compiler.h — the rule compiler: one parsed Rule (rule_ast.h) in, one
// CompiledRule (compiled_rule.h) out, checked against LibTorch's operator registry and the
// rule language's functions and builtins. RuleSet::Create (rule_set.h) compiles a whole file's
// rules with it. Not part of the public API.
#ifndef SENTIER_PASSES_INTERNAL_RULE_COMPILER_H_
#define SENTIER_PASSES_INTERNAL_RULE_COMPILER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "passes/internal/compiled_rule.h"
#include "passes/rule_ast.h"

namespace sentier {
namespace internal {

// CompileRule: compiles `rule`. Every error is an InvalidArgumentError whose message starts with
// the `file:line:col` of the offending line or name.
absl::StatusOr<std::shared_ptr<CompiledRule>> CompileRule(Rule rule);

}  // namespace internal
}  // namespace sentier

#endif  // SENTIER_PASSES_INTERNAL_RULE_COMPILER_H_
