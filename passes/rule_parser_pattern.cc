// rule_parser_pattern.cc — the lines of a `match` or `group` section: pattern lines
// `%a, %b... = op(inputs) [@ $k]` and `foreach` headers. Which block a line belongs to (by its
// indentation) is decided in rule_parser.cc.
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "passes/internal/rule_parser_parts.h"
#include "passes/status_macros.h"

namespace sentier {
namespace internal {
namespace {

// A literal constant as a pattern input: a number (optionally negated), a boolean, None, a string,
// or a list of these.
bool IsLiteral(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kInt:
    case Expr::Kind::kFloat:
    case Expr::Kind::kBool:
    case Expr::Kind::kNone:
    case Expr::Kind::kString:
      return true;
    case Expr::Kind::kUnary:
      return e.text == "-" && (e.args[0]->kind == Expr::Kind::kInt ||
                               e.args[0]->kind == Expr::Kind::kFloat);
    case Expr::Kind::kList:
      for (const auto& a : e.args) {
        if (!IsLiteral(*a)) return false;
      }
      return true;
    default:
      return false;
  }
}

// `%a, _, %rest...` before the '=': the names of the node's outputs; only the last may be
// variadic.
absl::Status ParsePatternOutputs(TokenStream& ts, PatternNode* node) {
  while (true) {
    const Token t = ts.Peek();
    PatternOutput out;
    out.loc = ts.LocOf(t);
    if (t.kind == Token::Kind::kValue) {
      out.name = t.text;
      out.variadic = t.variadic;
    } else if (t.kind == Token::Kind::kIdent && t.text == "_") {
      out.variadic = t.variadic;
    } else {
      return ts.ErrorHere(absl::StrCat("expected an output (%name) at the start of a pattern line",
                                       ts.Found()));
    }
    ts.Next();
    node->outputs.push_back(out);
    if (ts.IsPunct(",")) {
      ts.Next();
      continue;
    }
    break;
  }
  for (size_t i = 0; i + 1 < node->outputs.size(); ++i) {
    if (node->outputs[i].variadic) {
      return absl::InvalidArgumentError(absl::StrCat(
          node->outputs[i].loc.ToString(), ": only the last output may be variadic"));
    }
  }
  return absl::OkStatus();
}

// One input: %value, $const, _ (each possibly variadic, except $const), or a literal constant.
absl::StatusOr<PatternArg> ParsePatternArg(TokenStream& ts) {
  PatternArg arg;
  const Token t = ts.Peek();
  arg.loc = ts.LocOf(t);
  if (t.kind == Token::Kind::kValue || t.kind == Token::Kind::kConst) {
    arg.kind = t.kind == Token::Kind::kValue ? PatternArg::Kind::kValue : PatternArg::Kind::kConst;
    arg.name = t.text;
    arg.variadic = t.variadic;
    if (arg.variadic && arg.kind == PatternArg::Kind::kConst) {
      return ts.ErrorAt(t, "constant captures cannot be variadic in a pattern");
    }
    ts.Next();
    return arg;
  }
  if (t.kind == Token::Kind::kIdent && t.text == "_") {
    arg.kind = PatternArg::Kind::kWildcard;
    arg.variadic = t.variadic;
    ts.Next();
    return arg;
  }
  SENTIER_ASSIGN_OR_RETURN(lit, ParseExpr(ts));
  if (!IsLiteral(*lit)) {
    return absl::InvalidArgumentError(absl::StrCat(
        arg.loc.ToString(), ": pattern inputs are %value, $const, _, or a literal constant"));
  }
  arg.kind = PatternArg::Kind::kLiteral;
  arg.literal = lit;
  return arg;
}

// `op(inputs)` after the '=': the operator (a name with "::", or a regex of names) and its
// inputs; only the last input may be variadic.
absl::Status ParsePatternCall(TokenStream& ts, PatternNode* node) {
  const Token op = ts.Peek();
  if (op.kind != Token::Kind::kIdent || op.text.find("::") == std::string::npos) {
    return ts.ErrorHere(absl::StrCat("expected an operator such as aten::cat", ts.Found()));
  }
  node->op = op.text;
  node->op_loc = ts.LocOf(op);
  ts.Next();
  SENTIER_RETURN_IF_ERROR(ts.Expect("("));
  if (!ts.IsPunct(")")) {
    while (true) {
      SENTIER_ASSIGN_OR_RETURN(arg, ParsePatternArg(ts));
      node->args.push_back(std::move(arg));
      if (ts.IsPunct(",")) {
        ts.Next();
        continue;
      }
      break;
    }
  }
  SENTIER_RETURN_IF_ERROR(ts.Expect(")"));
  for (size_t i = 0; i + 1 < node->args.size(); ++i) {
    if (node->args[i].variadic) {
      return absl::InvalidArgumentError(
          absl::StrCat(node->args[i].loc.ToString(), ": only the last input may be variadic"));
    }
  }
  return absl::OkStatus();
}

// `@ $k` (the '@' already consumed): the node is the `$k`-th output of its producer, which needs
// a single, non-variadic output name.
absl::Status ParseOutputIndex(TokenStream& ts, PatternNode* node) {
  if (ts.Peek().kind != Token::Kind::kConst || ts.Peek().variadic) {
    return ts.ErrorHere(absl::StrCat("expected '$name' after '@'", ts.Found()));
  }
  node->output_index = ts.Next().text;
  if (node->outputs.size() != 1 || node->outputs[0].variadic) {
    return absl::InvalidArgumentError(absl::StrCat(
        node->loc.ToString(), ": '@ $k' needs exactly one non-variadic output"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PatternNode> ParsePatternLine(TokenStream& ts) {
  PatternNode node;
  node.loc = ts.LocHere();
  SENTIER_RETURN_IF_ERROR(ParsePatternOutputs(ts, &node));
  SENTIER_RETURN_IF_ERROR(ts.Expect("="));
  SENTIER_RETURN_IF_ERROR(ParsePatternCall(ts, &node));
  if (ts.IsPunct("@")) {
    ts.Next();
    SENTIER_RETURN_IF_ERROR(ParseOutputIndex(ts, &node));
  }
  SENTIER_RETURN_IF_ERROR(ts.ExpectEnd());
  return node;
}

absl::StatusOr<ForeachPattern> ParseForeachHeader(TokenStream& ts) {
  ForeachPattern fe;
  fe.loc = ts.LocHere();
  ts.Next();  // foreach
  if (ts.Peek().kind != Token::Kind::kValue || ts.Peek().variadic) {
    return ts.ErrorHere(absl::StrCat("expected the element name (%e) after 'foreach'", ts.Found()));
  }
  fe.element = ts.Next().text;
  while (ts.IsPunct(",")) {
    ts.Next();
    const Token& t = ts.Peek();
    if ((t.kind != Token::Kind::kValue && t.kind != Token::Kind::kConst) || t.variadic) {
      return ts.ErrorHere(absl::StrCat("expected a per-element name (%n or $k)", ts.Found()));
    }
    fe.per_element.push_back(absl::StrCat(t.kind == Token::Kind::kValue ? "%" : "$", t.text));
    ts.Next();
  }
  if (!ts.IsIdent("in")) return ts.ErrorHere(absl::StrCat("expected 'in'", ts.Found()));
  ts.Next();
  if (ts.Peek().kind != Token::Kind::kValue || !ts.Peek().variadic) {
    return ts.ErrorHere(absl::StrCat("expected a sequence capture (%xs...)", ts.Found()));
  }
  fe.sequence = ts.Next().text;
  SENTIER_RETURN_IF_ERROR(ts.Expect(":"));
  SENTIER_RETURN_IF_ERROR(ts.ExpectEnd());
  return fe;
}

}  // namespace internal
}  // namespace sentier
