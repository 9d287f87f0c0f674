// rule_parser_rewrite.cc — the statements of a `rewrite` section, one per line:
//   %r = aten::op(args, name=value)        kInsert (one output)
//   %a, _, %c = aten::op(args)             kInsert (one name or `_` per output)
//   %xs... = unpack(%list) | constants(..) kUnpack / kConstants (a sequence)
//   %xs... = each | scan aten::op(args)    kEach / kScan (a sequence, one node per element)
//   replace %old with %new                 kReplace
//   call builtin(args)                     kCall
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "passes/internal/rule_parser_parts.h"
#include "passes/status_macros.h"

namespace sentier {
namespace internal {
namespace {

// `replace FROM with TO` (at 'replace').
absl::Status ParseReplace(TokenStream& ts, RewriteStmt* stmt) {
  stmt->kind = RewriteStmt::Kind::kReplace;
  ts.Next();
  SENTIER_ASSIGN_OR_RETURN(f, ParseExpr(ts));
  if (!ts.IsIdent("with")) return ts.ErrorHere(absl::StrCat("expected 'with'", ts.Found()));
  ts.Next();
  SENTIER_ASSIGN_OR_RETURN(t, ParseExpr(ts));
  SENTIER_RETURN_IF_ERROR(ts.ExpectEnd());
  stmt->from = f;
  stmt->to = t;
  return absl::OkStatus();
}

// Parses `a, b, name=c)` (the opening parenthesis already consumed). Keyword arguments are
// accepted when `kwargs` is given, and only after the positional ones.
absl::Status ParseArgList(TokenStream& ts, std::vector<ExprPtr>* out,
                          std::vector<std::pair<std::string, ExprPtr>>* kwargs = nullptr) {
  if (!ts.IsPunct(")")) {
    while (true) {
      if (ts.Peek().kind == Token::Kind::kIdent && ts.IsPunct("=", 1)) {
        if (kwargs == nullptr) return ts.ErrorHere("keyword arguments are for operators only");
        std::string name = ts.Next().text;
        ts.Next();  // '='
        SENTIER_ASSIGN_OR_RETURN(e, ParseExpr(ts));
        kwargs->emplace_back(name, e);
        if (ts.IsPunct(",")) {
          ts.Next();
          continue;
        }
        break;
      }
      if (kwargs != nullptr && !kwargs->empty()) {
        return ts.ErrorHere("a positional argument cannot follow a keyword argument");
      }
      SENTIER_ASSIGN_OR_RETURN(e, ParseExpr(ts));
      out->push_back(e);
      if (ts.IsPunct(",")) {
        ts.Next();
        continue;
      }
      break;
    }
  }
  return ts.Expect(")");
}

// `call builtin(args)` (at 'call').
absl::Status ParseCall(TokenStream& ts, RewriteStmt* stmt) {
  stmt->kind = RewriteStmt::Kind::kCall;
  ts.Next();
  if (ts.Peek().kind != Token::Kind::kIdent) {
    return ts.ErrorHere(absl::StrCat("expected a builtin name after 'call'", ts.Found()));
  }
  stmt->op = ts.Next().text;
  SENTIER_RETURN_IF_ERROR(ts.Expect("("));
  SENTIER_RETURN_IF_ERROR(ParseArgList(ts, &stmt->args));
  return ts.ExpectEnd();
}

// The names before the '=': `%r`, `%xs...`, or `%a, _, %c` (one name or `_` per output of a
// many-output operator; `stmt->outputs` is then filled). Returns the first name's token.
absl::StatusOr<Token> ParseDefinedNames(TokenStream& ts, RewriteStmt* stmt) {
  const Token out = ts.Peek();
  const bool skip_first = out.kind == Token::Kind::kIdent && out.text == "_" && ts.IsPunct(",", 1);
  if (out.kind != Token::Kind::kValue && !skip_first) {
    return ts.ErrorHere(absl::StrCat(
        "expected '%name = op(...)', '%a, %b = op(...)', '%names... = unpack(...)', "
        "'%names... = each op(...)', '%names... = scan op(...)', '%names... = constants(...)', "
        "'replace' or 'call'",
        ts.Found()));
  }
  ts.Next();
  stmt->output = skip_first ? "" : out.text;
  if (!ts.IsPunct(",")) return out;
  if (out.variadic) {
    return ts.ErrorAt(out, "an operator's outputs are named one by one: drop the '...'");
  }
  stmt->outputs.push_back(stmt->output);
  while (ts.IsPunct(",")) {
    ts.Next();
    const Token o = ts.Peek();
    if (o.kind == Token::Kind::kIdent && o.text == "_") {
      stmt->outputs.push_back("");
    } else if (o.kind == Token::Kind::kValue && !o.variadic) {
      stmt->outputs.push_back(o.text);
    } else {
      return ts.ErrorHere(absl::StrCat("expected an output name or '_'", ts.Found()));
    }
    ts.Next();
  }
  return out;
}

// What follows `=` up to the '(': `unpack`, `constants`, `each OP`, `scan OP` or an operator.
// Sets the statement's kind and operator; `out` is the first defined name, which must be a
// sequence (`%xs...`) for all but an operator.
absl::Status ParseDefiningOp(TokenStream& ts, const Token& out, RewriteStmt* stmt) {
  const Token op = ts.Peek();
  if (op.kind != Token::Kind::kIdent) {
    return ts.ErrorHere(absl::StrCat("expected an operator or unpack(...)", ts.Found()));
  }
  ts.Next();
  stmt->op = op.text;
  if (!stmt->outputs.empty() && (op.text == "unpack" || op.text == "constants" ||
                                 op.text == "each" || op.text == "scan")) {
    return ts.ErrorAt(op, absl::StrCat(op.text, " defines one sequence, not several names"));
  }
  if (op.text == "unpack" || op.text == "constants") {
    stmt->kind = op.text == "unpack" ? RewriteStmt::Kind::kUnpack : RewriteStmt::Kind::kConstants;
    if (!out.variadic) {
      return ts.ErrorAt(out, absl::StrCat(op.text, "(...) defines a sequence: write %name..."));
    }
  } else if (op.text == "each" || op.text == "scan") {
    stmt->kind = op.text == "each" ? RewriteStmt::Kind::kEach : RewriteStmt::Kind::kScan;
    if (!out.variadic) {
      return ts.ErrorAt(out, absl::StrCat(op.text, " defines a sequence: write %name..."));
    }
    const Token each_op = ts.Peek();
    if (each_op.kind != Token::Kind::kIdent || each_op.text.find("::") == std::string::npos) {
      return ts.ErrorHere(absl::StrCat("expected an operator such as aten::add after '", op.text,
                                       "'", ts.Found()));
    }
    ts.Next();
    stmt->op = each_op.text;
  } else {
    stmt->kind = RewriteStmt::Kind::kInsert;
    if (out.variadic) return ts.ErrorAt(out, "an operator defines one value: drop the '...'");
    if (op.text.find("::") == std::string::npos) {
      return ts.ErrorAt(op, absl::StrCat("expected an operator such as aten::slice, found '",
                                         op.text, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RewriteStmt> ParseRewriteLine(TokenStream& ts) {
  RewriteStmt stmt;
  stmt.loc = ts.LocHere();
  if (ts.IsIdent("replace")) {
    SENTIER_RETURN_IF_ERROR(ParseReplace(ts, &stmt));
    return stmt;
  }
  if (ts.IsIdent("call")) {
    SENTIER_RETURN_IF_ERROR(ParseCall(ts, &stmt));
    return stmt;
  }
  SENTIER_ASSIGN_OR_RETURN(out, ParseDefinedNames(ts, &stmt));
  SENTIER_RETURN_IF_ERROR(ts.Expect("="));
  SENTIER_RETURN_IF_ERROR(ParseDefiningOp(ts, out, &stmt));
  SENTIER_RETURN_IF_ERROR(ts.Expect("("));
  // Operators take keyword arguments (`alpha=1`); unpack and constants do not.
  const bool takes_kwargs = stmt.kind == RewriteStmt::Kind::kInsert ||
                            stmt.kind == RewriteStmt::Kind::kEach ||
                            stmt.kind == RewriteStmt::Kind::kScan;
  SENTIER_RETURN_IF_ERROR(ParseArgList(ts, &stmt.args, takes_kwargs ? &stmt.kwargs : nullptr));
  SENTIER_RETURN_IF_ERROR(ts.ExpectEnd());
  return stmt;
}

}  // namespace internal
}  // namespace sentier
