// internal/rule_parser_parts.h — the line parsers rule_parser.cc calls for a rule's sections.
//
// rule_parser.cc reads the file: rule blocks, attribute lines, section headers and the checks on
// a whole rule. Each line inside a section is one of these, parsed from its tokens alone:
//   rule_parser_pattern.cc   `match` / `group` lines and `foreach` headers
//   rule_parser_expr.cc      expressions (`where`, `key`, arguments, pattern literals)
//   rule_parser_rewrite.cc   `rewrite` statements
// Errors are `file:line:col: message` (see rule_lexer.h). Not part of the public API.
#ifndef SENTIER_PASSES_INTERNAL_RULE_PARSER_PARTS_H_
#define SENTIER_PASSES_INTERNAL_RULE_PARSER_PARTS_H_

#include "absl/status/statusor.h"
#include "passes/internal/rule_lexer.h"
#include "passes/rule_ast.h"

namespace sentier {
namespace internal {

// ParseExpr: one expression from the cursor, by precedence climbing:
// or < and < not < comparison < + - < * / % < unary < postfix. Stops at the first token that
// cannot continue it (the caller checks what follows).
absl::StatusOr<ExprPtr> ParseExpr(TokenStream& ts);

// ParsePatternLine: `%a, %b... = op(args) [@ $k]`, the whole line.
absl::StatusOr<PatternNode> ParsePatternLine(TokenStream& ts);

// ParseForeachHeader: `foreach %e[, %n, $k] in %seq...:`, the whole line.
absl::StatusOr<ForeachPattern> ParseForeachHeader(TokenStream& ts);

// ParseRewriteLine: one `rewrite` statement (`%r = op(...)`, `%a, _ = op(...)`,
// `%xs... = unpack|constants(...)`, `%xs... = each|scan op(...)`, `replace`, `call`), the whole
// line.
absl::StatusOr<RewriteStmt> ParseRewriteLine(TokenStream& ts);

}  // namespace internal
}  // namespace sentier

#endif  // SENTIER_PASSES_INTERNAL_RULE_PARSER_PARTS_H_
