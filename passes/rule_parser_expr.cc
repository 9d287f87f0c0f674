// rule_parser_expr.cc — expressions of the rule language, by precedence climbing:
// or < and < not < comparison < + - < * / % < unary < postfix (`a[i]`) < primary.
//
// Comparisons do not chain (`a < b < c` stops after `a < b`); the other binary operators are
// left-associative. Names are only calls (`len(%xs...)`), booleans and None: captures start with
// `%` or `$`.
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "passes/internal/rule_parser_parts.h"
#include "passes/status_macros.h"

namespace sentier {
namespace internal {
namespace {

ExprPtr MakeBinary(std::string op, ExprPtr a, ExprPtr b, SourceLoc loc) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::kBinary;
  e->text = std::move(op);
  e->args = {std::move(a), std::move(b)};
  e->loc = std::move(loc);
  return e;
}

ExprPtr MakeUnary(std::string op, ExprPtr inner, SourceLoc loc) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::kUnary;
  e->text = std::move(op);
  e->args = {std::move(inner)};
  e->loc = std::move(loc);
  return e;
}

class ExprParser {
 public:
  explicit ExprParser(TokenStream& ts) : ts_(ts) {}

  absl::StatusOr<ExprPtr> ParseOr() {
    SENTIER_ASSIGN_OR_RETURN(lhs, ParseAnd());
    while (ts_.IsIdent("or")) {
      SourceLoc loc = ts_.LocHere();
      ts_.Next();
      SENTIER_ASSIGN_OR_RETURN(rhs, ParseAnd());
      lhs = MakeBinary("or", lhs, rhs, loc);
    }
    return lhs;
  }

 private:
  absl::StatusOr<ExprPtr> ParseAnd() {
    SENTIER_ASSIGN_OR_RETURN(lhs, ParseNot());
    while (ts_.IsIdent("and")) {
      SourceLoc loc = ts_.LocHere();
      ts_.Next();
      SENTIER_ASSIGN_OR_RETURN(rhs, ParseNot());
      lhs = MakeBinary("and", lhs, rhs, loc);
    }
    return lhs;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (ts_.IsIdent("not")) {
      SourceLoc loc = ts_.LocHere();
      ts_.Next();
      SENTIER_ASSIGN_OR_RETURN(inner, ParseNot());
      return MakeUnary("not", inner, loc);
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    SENTIER_ASSIGN_OR_RETURN(lhs, ParseSum());
    for (const char* op : {"==", "!=", "<=", ">=", "<", ">"}) {
      if (ts_.IsPunct(op)) {
        SourceLoc loc = ts_.LocHere();
        ts_.Next();
        SENTIER_ASSIGN_OR_RETURN(rhs, ParseSum());
        return MakeBinary(op, lhs, rhs, loc);
      }
    }
    return lhs;
  }

  absl::StatusOr<ExprPtr> ParseSum() {
    SENTIER_ASSIGN_OR_RETURN(lhs, ParseProduct());
    while (ts_.IsPunct("+") || ts_.IsPunct("-")) {
      SourceLoc loc = ts_.LocHere();
      std::string op = ts_.Next().text;
      SENTIER_ASSIGN_OR_RETURN(rhs, ParseProduct());
      lhs = MakeBinary(op, lhs, rhs, loc);
    }
    return lhs;
  }

  absl::StatusOr<ExprPtr> ParseProduct() {
    SENTIER_ASSIGN_OR_RETURN(lhs, ParseUnary());
    while (ts_.IsPunct("*") || ts_.IsPunct("/") || ts_.IsPunct("%")) {
      SourceLoc loc = ts_.LocHere();
      std::string op = ts_.Next().text;
      SENTIER_ASSIGN_OR_RETURN(rhs, ParseUnary());
      lhs = MakeBinary(op, lhs, rhs, loc);
    }
    return lhs;
  }

  absl::StatusOr<ExprPtr> ParseUnary() {
    if (ts_.IsPunct("-")) {
      SourceLoc loc = ts_.LocHere();
      ts_.Next();
      SENTIER_ASSIGN_OR_RETURN(inner, ParseUnary());
      return MakeUnary("-", inner, loc);
    }
    return ParsePostfix();
  }

  absl::StatusOr<ExprPtr> ParsePostfix() {
    SENTIER_ASSIGN_OR_RETURN(e, ParsePrimary());
    while (ts_.IsPunct("[")) {
      SourceLoc loc = ts_.LocHere();
      ts_.Next();
      SENTIER_ASSIGN_OR_RETURN(index, ParseOr());
      SENTIER_RETURN_IF_ERROR(ts_.Expect("]"));
      auto ix = std::make_shared<Expr>();
      ix->kind = Expr::Kind::kIndex;
      ix->args = {e, index};
      ix->loc = loc;
      e = ix;
    }
    return e;
  }

  // A literal, a capture, a name (boolean, None or call), `( expr )` or a list `[a, b]`.
  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token t = ts_.Peek();
    switch (t.kind) {
      case Token::Kind::kInt:
      case Token::Kind::kFloat:
        return ParseNumber(t);
      case Token::Kind::kString:
      case Token::Kind::kValue:
      case Token::Kind::kConst:
        ts_.Next();
        return StringOrCapture(t);
      case Token::Kind::kIdent:
        return ParseName(t);
      case Token::Kind::kPunct:
        if (t.text == "(") {
          ts_.Next();
          SENTIER_ASSIGN_OR_RETURN(inner, ParseOr());
          SENTIER_RETURN_IF_ERROR(ts_.Expect(")"));
          return inner;
        }
        if (t.text == "[") {
          ts_.Next();
          auto list = NewExpr(Expr::Kind::kList, t);
          SENTIER_RETURN_IF_ERROR(ParseItems("]", &list->args));
          return ExprPtr(list);
        }
        break;
      case Token::Kind::kEnd:
        return ts_.ErrorAt(t, "expected an expression, found end of line");
    }
    return ts_.ErrorAt(t, absl::StrCat("expected an expression", ts_.Found()));
  }

  std::shared_ptr<Expr> NewExpr(Expr::Kind kind, const Token& t) const {
    auto e = std::make_shared<Expr>();
    e->kind = kind;
    e->loc = ts_.LocOf(t);
    return e;
  }

  // The integer or floating-point literal `t` (the current token).
  absl::StatusOr<ExprPtr> ParseNumber(const Token& t) {
    ts_.Next();
    if (t.kind == Token::Kind::kInt) {
      auto e = NewExpr(Expr::Kind::kInt, t);
      if (!absl::SimpleAtoi(t.text, &e->int_value)) {
        return ts_.ErrorAt(t, absl::StrCat("bad integer '", t.text, "'"));
      }
      return ExprPtr(e);
    }
    auto e = NewExpr(Expr::Kind::kFloat, t);
    if (!absl::SimpleAtod(t.text, &e->float_value)) {
      return ts_.ErrorAt(t, absl::StrCat("bad number '", t.text, "'"));
    }
    return ExprPtr(e);
  }

  // A string literal, `%name[...]` or `$name[...]` (already consumed).
  ExprPtr StringOrCapture(const Token& t) const {
    if (t.kind == Token::Kind::kString) {
      auto e = NewExpr(Expr::Kind::kString, t);
      e->text = t.text;
      return e;
    }
    auto e = NewExpr(
        t.kind == Token::Kind::kValue ? Expr::Kind::kValueRef : Expr::Kind::kConstRef, t);
    e->text = t.text;
    e->variadic = t.variadic;
    return e;
  }

  // true / True / false / False, None, or a call `name(args)`; any other bare name is an error.
  absl::StatusOr<ExprPtr> ParseName(const Token& t) {
    ts_.Next();
    if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
      auto e = NewExpr(Expr::Kind::kBool, t);
      e->bool_value = t.text == "true" || t.text == "True";
      return ExprPtr(e);
    }
    if (t.text == "None") return ExprPtr(NewExpr(Expr::Kind::kNone, t));
    if (!ts_.IsPunct("(")) {
      return ts_.ErrorAt(t, absl::StrCat("unknown name '", t.text,
                                         "' (captures start with % or $; functions need ())"));
    }
    ts_.Next();
    auto call = NewExpr(Expr::Kind::kCall, t);
    call->text = t.text;
    SENTIER_RETURN_IF_ERROR(ParseItems(")", &call->args));
    return ExprPtr(call);
  }

  // `a, b, c` up to and including `close` (the opening bracket already consumed).
  absl::Status ParseItems(absl::string_view close, std::vector<ExprPtr>* items) {
    if (!ts_.IsPunct(close)) {
      while (true) {
        SENTIER_ASSIGN_OR_RETURN(item, ParseOr());
        items->push_back(item);
        if (ts_.IsPunct(",")) {
          ts_.Next();
          continue;
        }
        break;
      }
    }
    return ts_.Expect(close);
  }

  TokenStream& ts_;
};

}  // namespace

absl::StatusOr<ExprPtr> ParseExpr(TokenStream& ts) { return ExprParser(ts).ParseOr(); }

}  // namespace internal
}  // namespace sentier
