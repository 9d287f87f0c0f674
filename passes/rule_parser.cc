// rule_parser.cc — a line-oriented recursive-descent parser for rule files.
//
// The grammar is in patterns/README.md. Each rule is a block from `rule NAME` to `end`; inside it,
// attribute lines (`family`, `description`) and sections (`match`, `where`, `rewrite`). Lines are
// tokenized one at a time so that every error can name its file, line and column.
#include "passes/rule_parser.h"

#include <cctype>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "passes/status_macros.h"

namespace sentier {
namespace {

struct Token {
  enum class Kind { kIdent, kInt, kFloat, kString, kValue, kConst, kPunct, kEnd };
  Kind kind = Kind::kEnd;
  std::string text;
  bool variadic = false;  // %x... / $x... / _...
  int col = 0;            // 1-based
};

bool IsIdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsIdentChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
}

// Strips a trailing `# comment` that is not inside a string literal.
std::string StripComment(absl::string_view line) {
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '"') in_string = !in_string;
    if (line[i] == '#' && !in_string) return std::string(line.substr(0, i));
  }
  return std::string(line);
}

class LineLexer {
 public:
  LineLexer(absl::string_view line, SourceLoc loc) : line_(line), loc_(std::move(loc)) {}

  absl::StatusOr<std::vector<Token>> Lex() {
    std::vector<Token> out;
    size_t i = 0;
    while (i < line_.size()) {
      char c = line_[i];
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++i;
        continue;
      }
      Token t;
      t.col = static_cast<int>(i) + 1;
      if (c == '%' || c == '$') {
        size_t j = i + 1;
        while (j < line_.size() && (IsIdentChar(line_[j]) && line_[j] != '.')) ++j;
        if (j == i + 1) {
          if (c == '$') return Error(t.col, "expected a name after '$'");
          t.kind = Token::Kind::kPunct;  // the modulo operator
          t.text = "%";
          ++i;
          out.push_back(std::move(t));
          continue;
        }
        t.kind = c == '%' ? Token::Kind::kValue : Token::Kind::kConst;
        t.text = std::string(line_.substr(i + 1, j - i - 1));
        if (line_.substr(j, 3) == "...") {
          t.variadic = true;
          j += 3;
        }
        i = j;
      } else if (IsIdentStart(c)) {
        // Identifiers may contain "::" (op names) and dots; an op regex such as
        // aten::(relu|tanh) is lexed as one identifier including its parenthesized alternatives.
        size_t j = i;
        while (j < line_.size()) {
          if (line_.substr(j, 3) == "...") break;
          if (IsIdentChar(line_[j])) {
            ++j;
          } else if (line_.substr(j, 2) == "::") {
            j += 2;
            if (j < line_.size() && line_[j] == '(') {  // regex alternatives after ::
              int depth = 0;
              while (j < line_.size()) {
                if (line_[j] == '(') ++depth;
                if (line_[j] == ')') --depth;
                ++j;
                if (depth == 0) break;
              }
              if (depth != 0) return Error(t.col, "unbalanced parentheses in op name");
            }
          } else {
            break;
          }
        }
        t.text = std::string(line_.substr(i, j - i));
        if (t.text == "_" && line_.substr(j, 3) == "...") {
          t.variadic = true;
          j += 3;
        }
        t.kind = Token::Kind::kIdent;
        i = j;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t j = i;
        bool is_float = false;
        while (j < line_.size() &&
               (std::isdigit(static_cast<unsigned char>(line_[j])) || line_[j] == '.' ||
                line_[j] == 'e' || line_[j] == 'E' ||
                ((line_[j] == '-' || line_[j] == '+') && j > i &&
                 (line_[j - 1] == 'e' || line_[j - 1] == 'E')))) {
          if (line_[j] == '.') {
            if (line_.substr(j, 3) == "...") break;
            is_float = true;
          }
          if (line_[j] == 'e' || line_[j] == 'E') is_float = true;
          ++j;
        }
        t.kind = is_float ? Token::Kind::kFloat : Token::Kind::kInt;
        t.text = std::string(line_.substr(i, j - i));
        i = j;
      } else if (c == '"') {
        size_t j = i + 1;
        while (j < line_.size() && line_[j] != '"') ++j;
        if (j >= line_.size()) return Error(t.col, "unterminated string literal");
        t.kind = Token::Kind::kString;
        t.text = std::string(line_.substr(i + 1, j - i - 1));
        i = j + 1;
      } else {
        static const char* kTwo[] = {"==", "!=", "<=", ">=", "->"};
        t.kind = Token::Kind::kPunct;
        bool two = false;
        for (const char* p : kTwo) {
          if (line_.substr(i, 2) == p) {
            t.text = p;
            i += 2;
            two = true;
            break;
          }
        }
        if (!two) {
          if (std::string("()[],=:+-*/%<>@").find(c) == std::string::npos) {
            return Error(t.col, absl::StrCat("unexpected character '", std::string(1, c), "'"));
          }
          t.text = std::string(1, c);
          ++i;
        }
      }
      out.push_back(std::move(t));
    }
    Token end;
    end.kind = Token::Kind::kEnd;
    end.col = static_cast<int>(line_.size()) + 1;
    out.push_back(end);
    return out;
  }

 private:
  absl::Status Error(int col, absl::string_view msg) const {
    return absl::InvalidArgumentError(
        absl::StrCat(loc_.file, ":", loc_.line, ":", col, ": ", msg));
  }
  absl::string_view line_;
  SourceLoc loc_;
};

// TokenStream: a cursor over one line's tokens with error helpers.
class TokenStream {
 public:
  TokenStream(std::vector<Token> tokens, SourceLoc loc)
      : tokens_(std::move(tokens)), loc_(std::move(loc)) {}

  const Token& Peek(size_t ahead = 0) const {
    size_t i = std::min(pos_ + ahead, tokens_.size() - 1);
    return tokens_[i];
  }
  Token Next() {
    Token t = Peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return t;
  }
  bool AtEnd() const { return Peek().kind == Token::Kind::kEnd; }
  bool IsPunct(absl::string_view p, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::Kind::kPunct && Peek(ahead).text == p;
  }
  bool IsIdent(absl::string_view p) const {
    return Peek().kind == Token::Kind::kIdent && Peek().text == p;
  }
  absl::Status Expect(absl::string_view p) {
    if (!IsPunct(p)) return ErrorHere(absl::StrCat("expected '", p, "'", Found()));
    Next();
    return absl::OkStatus();
  }
  absl::Status ExpectEnd() {
    if (!AtEnd()) return ErrorHere(absl::StrCat("unexpected text", Found()));
    return absl::OkStatus();
  }
  std::string Found() const {
    const Token& t = Peek();
    if (t.kind == Token::Kind::kEnd) return ", found end of line";
    return absl::StrCat(", found '", Describe(t), "'");
  }
  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::kValue:
        return absl::StrCat("%", t.text, t.variadic ? "..." : "");
      case Token::Kind::kConst:
        return absl::StrCat("$", t.text, t.variadic ? "..." : "");
      case Token::Kind::kString:
        return absl::StrCat("\"", t.text, "\"");
      default:
        return t.text;
    }
  }
  SourceLoc LocHere() const {
    SourceLoc l = loc_;
    l.col = Peek().col;
    return l;
  }
  SourceLoc LocOf(const Token& t) const {
    SourceLoc l = loc_;
    l.col = t.col;
    return l;
  }
  absl::Status ErrorHere(absl::string_view msg) const { return ErrorAt(Peek(), msg); }
  absl::Status ErrorAt(const Token& t, absl::string_view msg) const {
    return absl::InvalidArgumentError(
        absl::StrCat(loc_.file, ":", loc_.line, ":", t.col, ": ", msg));
  }

 private:
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  SourceLoc loc_;
};


// ---------------------------------------------------------------------------------------------
// Expressions: precedence climbing. or < and < not < comparison < + - < * / % < unary < postfix.
class ExprParser {
 public:
  explicit ExprParser(TokenStream& ts) : ts_(ts) {}

  absl::StatusOr<ExprPtr> Parse() { return ParseOr(); }

 private:
  ExprPtr MakeBinary(std::string op, ExprPtr a, ExprPtr b, SourceLoc loc) {
    auto e = std::make_shared<Expr>();
    e->kind = Expr::Kind::kBinary;
    e->text = std::move(op);
    e->args = {std::move(a), std::move(b)};
    e->loc = std::move(loc);
    return e;
  }
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
      auto e = std::make_shared<Expr>();
      e->kind = Expr::Kind::kUnary;
      e->text = "not";
      e->args = {inner};
      e->loc = loc;
      return ExprPtr(e);
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
      auto e = std::make_shared<Expr>();
      e->kind = Expr::Kind::kUnary;
      e->text = "-";
      e->args = {inner};
      e->loc = loc;
      return ExprPtr(e);
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
  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token t = ts_.Peek();
    auto e = std::make_shared<Expr>();
    e->loc = ts_.LocOf(t);
    switch (t.kind) {
      case Token::Kind::kInt: {
        ts_.Next();
        e->kind = Expr::Kind::kInt;
        if (!absl::SimpleAtoi(t.text, &e->int_value)) {
          return ts_.ErrorAt(t, absl::StrCat("bad integer '", t.text, "'"));
        }
        return ExprPtr(e);
      }
      case Token::Kind::kFloat: {
        ts_.Next();
        e->kind = Expr::Kind::kFloat;
        if (!absl::SimpleAtod(t.text, &e->float_value)) {
          return ts_.ErrorAt(t, absl::StrCat("bad number '", t.text, "'"));
        }
        return ExprPtr(e);
      }
      case Token::Kind::kString:
        ts_.Next();
        e->kind = Expr::Kind::kString;
        e->text = t.text;
        return ExprPtr(e);
      case Token::Kind::kValue:
      case Token::Kind::kConst:
        ts_.Next();
        e->kind = t.kind == Token::Kind::kValue ? Expr::Kind::kValueRef : Expr::Kind::kConstRef;
        e->text = t.text;
        e->variadic = t.variadic;
        return ExprPtr(e);
      case Token::Kind::kIdent: {
        ts_.Next();
        if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
          e->kind = Expr::Kind::kBool;
          e->bool_value = t.text == "true" || t.text == "True";
          return ExprPtr(e);
        }
        if (t.text == "None") {
          e->kind = Expr::Kind::kNone;
          return ExprPtr(e);
        }
        if (!ts_.IsPunct("(")) {
          return ts_.ErrorAt(t, absl::StrCat("unknown name '", t.text,
                                             "' (captures start with % or $; functions need ())"));
        }
        ts_.Next();
        e->kind = Expr::Kind::kCall;
        e->text = t.text;
        if (!ts_.IsPunct(")")) {
          while (true) {
            SENTIER_ASSIGN_OR_RETURN(arg, ParseOr());
            e->args.push_back(arg);
            if (ts_.IsPunct(",")) {
              ts_.Next();
              continue;
            }
            break;
          }
        }
        SENTIER_RETURN_IF_ERROR(ts_.Expect(")"));
        return ExprPtr(e);
      }
      case Token::Kind::kPunct:
        if (t.text == "(") {
          ts_.Next();
          SENTIER_ASSIGN_OR_RETURN(inner, ParseOr());
          SENTIER_RETURN_IF_ERROR(ts_.Expect(")"));
          return inner;
        }
        if (t.text == "[") {
          ts_.Next();
          e->kind = Expr::Kind::kList;
          if (!ts_.IsPunct("]")) {
            while (true) {
              SENTIER_ASSIGN_OR_RETURN(item, ParseOr());
              e->args.push_back(item);
              if (ts_.IsPunct(",")) {
                ts_.Next();
                continue;
              }
              break;
            }
          }
          SENTIER_RETURN_IF_ERROR(ts_.Expect("]"));
          return ExprPtr(e);
        }
        break;
      case Token::Kind::kEnd:
        return ts_.ErrorAt(t, "expected an expression, found end of line");
    }
    return ts_.ErrorAt(t, absl::StrCat("expected an expression", ts_.Found()));
  }

  TokenStream& ts_;
};

// ---------------------------------------------------------------------------------------------
class FileParser {
 public:
  FileParser(absl::string_view text, absl::string_view file) : file_(file) {
    lines_ = absl::StrSplit(text, '\n');
  }

  absl::StatusOr<std::vector<Rule>> Parse() {
    std::vector<Rule> rules;
    while (line_no_ < lines_.size()) {
      std::string content = StripComment(lines_[line_no_]);
      if (absl::StripAsciiWhitespace(content).empty()) {
        ++line_no_;
        continue;
      }
      SENTIER_ASSIGN_OR_RETURN(tokens, LexLine(line_no_));
      TokenStream ts(tokens, Loc(line_no_, 1));
      if (!ts.IsIdent("rule")) {
        return ts.ErrorHere(absl::StrCat("expected 'rule NAME'", ts.Found()));
      }
      SENTIER_ASSIGN_OR_RETURN(rule, ParseRule());
      rules.push_back(std::move(rule));
    }
    return rules;
  }

 private:
  SourceLoc Loc(size_t line_index, int col) const {
    SourceLoc l;
    l.file = std::string(file_);
    l.line = static_cast<int>(line_index) + 1;
    l.col = col;
    return l;
  }
  absl::StatusOr<std::vector<Token>> LexLine(size_t index) {
    std::string content = StripComment(lines_[index]);
    LineLexer lexer(content, Loc(index, 1));
    return lexer.Lex();
  }
  int IndentOf(size_t index) const {
    int n = 0;
    for (char c : lines_[index]) {
      if (c == ' ') {
        ++n;
      } else if (c == '\t') {
        n += 8 - n % 8;
      } else {
        break;
      }
    }
    return n;
  }
  absl::Status Error(size_t index, int col, absl::string_view msg) const {
    return absl::InvalidArgumentError(
        absl::StrCat(file_, ":", index + 1, ":", col, ": ", msg));
  }

  absl::StatusOr<Rule> ParseRule() {
    Rule rule;
    size_t start = line_no_;
    SENTIER_ASSIGN_OR_RETURN(head, LexLine(line_no_));
    TokenStream hs(head, Loc(line_no_, 1));
    rule.loc = hs.LocHere();
    hs.Next();  // 'rule'
    if (hs.Peek().kind != Token::Kind::kIdent || hs.Peek().text.find(':') != std::string::npos) {
      return hs.ErrorHere(absl::StrCat("expected a rule name", hs.Found()));
    }
    rule.name = hs.Next().text;
    SENTIER_RETURN_IF_ERROR(hs.ExpectEnd());
    std::vector<std::string> normalized = {absl::StrCat("rule ", rule.name)};
    ++line_no_;

    enum class Section { kNone, kMatch, kKey, kWhere, kRewrite } section = Section::kNone;
    bool saw_match = false, saw_rewrite = false, saw_end = false;
    ForeachPattern* open_foreach = nullptr;
    int foreach_indent = 0;

    while (line_no_ < lines_.size()) {
      std::string content = StripComment(lines_[line_no_]);
      std::string trimmed(absl::StripAsciiWhitespace(content));
      if (trimmed.empty()) {
        ++line_no_;
        continue;
      }
      // Attribute lines carry free text, so they are split before lexing.
      std::string keyword = trimmed.substr(0, trimmed.find_first_of(" \t"));
      int col = static_cast<int>(content.find(keyword)) + 1;
      if (keyword == "end") {
        if (trimmed != "end") return Error(line_no_, col, "unexpected text after 'end'");
        saw_end = true;
        ++line_no_;
        break;
      }
      if (keyword == "rule") {
        return Error(line_no_, col,
                     absl::StrCat("rule '", rule.name, "' (line ", start + 1,
                                  ") is missing 'end' before the next rule"));
      }
      if (keyword == "min_group" || keyword == "max_group") {
        std::string value(absl::StripAsciiWhitespace(trimmed.substr(keyword.size())));
        int64_t v = 0;
        if (!absl::SimpleAtoi(value, &v) || v < 1) {
          return Error(line_no_, col + static_cast<int>(keyword.size()) + 1,
                       absl::StrCat("'", keyword, "' needs a positive integer"));
        }
        (keyword == "min_group" ? rule.min_group : rule.max_group) = v;
        normalized.push_back(absl::StrCat(keyword, " ", v));
        section = Section::kNone;
        ++line_no_;
        continue;
      }
      if (keyword == "any_batch_size") {
        if (trimmed != keyword) return Error(line_no_, col, "'any_batch_size' takes no value");
        rule.any_batch_size = true;
        normalized.push_back(keyword);
        section = Section::kNone;
        ++line_no_;
        continue;
      }
      if (keyword == "description" || keyword == "family") {
        std::string value(absl::StripAsciiWhitespace(trimmed.substr(keyword.size())));
        if (value.empty()) return Error(line_no_, col, absl::StrCat("'", keyword, "' needs a value"));
        if (keyword == "family") {
          for (char c : value) {
            if (!IsIdentChar(c)) {
              return Error(line_no_, col + static_cast<int>(keyword.size()) + 1,
                           "a family is one word ([A-Za-z0-9_.])");
            }
          }
          rule.family = value;
        } else {
          rule.description = value;
        }
        normalized.push_back(absl::StrCat(keyword, " ", value));
        section = Section::kNone;
        ++line_no_;
        continue;
      }
      if (trimmed == "match" || trimmed == "group" || trimmed == "key" || trimmed == "where" ||
          trimmed == "rewrite") {
        if (trimmed == "match" || trimmed == "group") {
          if (saw_match) return Error(line_no_, col, "a rule has one 'match' or 'group' section");
          section = Section::kMatch;
          saw_match = true;
          rule.is_group = trimmed == "group";
        } else if (trimmed == "key") {
          if (!rule.is_group) return Error(line_no_, col, "'key' belongs to a 'group' rule");
          section = Section::kKey;
        } else if (trimmed == "where") {
          section = Section::kWhere;
        } else {
          if (saw_rewrite) return Error(line_no_, col, "a rule has one 'rewrite' section");
          section = Section::kRewrite;
          saw_rewrite = true;
        }
        open_foreach = nullptr;
        normalized.push_back(trimmed);
        ++line_no_;
        continue;
      }
      normalized.push_back(trimmed);
      SENTIER_ASSIGN_OR_RETURN(tokens, LexLine(line_no_));
      TokenStream ts(tokens, Loc(line_no_, 1));
      switch (section) {
        case Section::kNone:
          return ts.ErrorHere(absl::StrCat(
              "expected 'family', 'description', 'match', 'group', 'key', 'where', 'rewrite' "
              "or 'end'",
              ts.Found()));
        case Section::kMatch: {
          int indent = IndentOf(line_no_);
          if (open_foreach != nullptr && indent <= foreach_indent) open_foreach = nullptr;
          if (ts.IsIdent("foreach")) {
            SENTIER_ASSIGN_OR_RETURN(fe, ParseForeachHeader(ts));
            rule.foreach.push_back(std::move(fe));
            open_foreach = &rule.foreach.back();
            foreach_indent = indent;
            break;
          }
          SENTIER_ASSIGN_OR_RETURN(node, ParsePatternNode(ts));
          if (open_foreach != nullptr) {
            open_foreach->nodes.push_back(std::move(node));
          } else {
            if (!rule.foreach.empty()) {
              return ts.ErrorAt(ts.Peek(0),
                                "pattern lines after a 'foreach' block must be indented under it "
                                "(write the main pattern first)");
            }
            rule.match.push_back(std::move(node));
          }
          break;
        }
        case Section::kWhere:
        case Section::kKey: {
          ExprParser ep(ts);
          SENTIER_ASSIGN_OR_RETURN(e, ep.Parse());
          SENTIER_RETURN_IF_ERROR(ts.ExpectEnd());
          (section == Section::kKey ? rule.key : rule.where).push_back(e);
          break;
        }
        case Section::kRewrite: {
          SENTIER_ASSIGN_OR_RETURN(stmt, ParseRewrite(ts));
          rule.rewrite.push_back(std::move(stmt));
          break;
        }
      }
      ++line_no_;
    }
    if (!saw_end) {
      return Error(start, 1, absl::StrCat("rule '", rule.name, "' is missing 'end'"));
    }
    if (!saw_match) {
      return Error(start, 1, absl::StrCat("rule '", rule.name, "' has no 'match' or 'group' section"));
    }
    if (rule.is_group && !rule.foreach.empty()) {
      return Error(start, 1, absl::StrCat("group rule '", rule.name, "' cannot use 'foreach'"));
    }
    if (rule.min_group > rule.max_group) {
      return Error(start, 1, absl::StrCat("rule '", rule.name, "': min_group > max_group"));
    }
    if (rule.any_batch_size && !rule.is_group) {
      return Error(start, 1, absl::StrCat("'any_batch_size' belongs to a 'group' rule ('", rule.name,
                                          "' is a match rule)"));
    }
    if (rule.match.empty()) {
      return Error(start, 1, absl::StrCat("rule '", rule.name, "' has an empty 'match' section"));
    }
    if (!saw_rewrite || rule.rewrite.empty()) {
      return Error(start, 1, absl::StrCat("rule '", rule.name, "' has no 'rewrite' section"));
    }
    if (rule.family.empty()) return Error(start, 1, absl::StrCat("rule '", rule.name, "' needs a 'family'"));
    if (rule.description.empty()) {
      return Error(start, 1, absl::StrCat("rule '", rule.name, "' needs a 'description'"));
    }
    for (const ForeachPattern& fe : rule.foreach) {
      if (fe.nodes.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(fe.loc.ToString(), ": 'foreach' block has no indented pattern lines"));
      }
    }
    rule.normalized_text = absl::StrJoin(normalized, "\n");
    return rule;
  }

  // foreach %e[, %n, $k] in %seq...:
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

  // %a, %b... = op(args) [@ $k]
  absl::StatusOr<PatternNode> ParsePatternNode(TokenStream& ts) {
    PatternNode node;
    node.loc = ts.LocHere();
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
      node.outputs.push_back(out);
      if (ts.IsPunct(",")) {
        ts.Next();
        continue;
      }
      break;
    }
    for (size_t i = 0; i + 1 < node.outputs.size(); ++i) {
      if (node.outputs[i].variadic) {
        return absl::InvalidArgumentError(absl::StrCat(
            node.outputs[i].loc.ToString(), ": only the last output may be variadic"));
      }
    }
    SENTIER_RETURN_IF_ERROR(ts.Expect("="));
    const Token op = ts.Peek();
    if (op.kind != Token::Kind::kIdent || op.text.find("::") == std::string::npos) {
      return ts.ErrorHere(absl::StrCat("expected an operator such as aten::cat", ts.Found()));
    }
    node.op = op.text;
    node.op_loc = ts.LocOf(op);
    ts.Next();
    SENTIER_RETURN_IF_ERROR(ts.Expect("("));
    if (!ts.IsPunct(")")) {
      while (true) {
        SENTIER_ASSIGN_OR_RETURN(arg, ParsePatternArg(ts));
        node.args.push_back(std::move(arg));
        if (ts.IsPunct(",")) {
          ts.Next();
          continue;
        }
        break;
      }
    }
    SENTIER_RETURN_IF_ERROR(ts.Expect(")"));
    for (size_t i = 0; i + 1 < node.args.size(); ++i) {
      if (node.args[i].variadic) {
        return absl::InvalidArgumentError(
            absl::StrCat(node.args[i].loc.ToString(), ": only the last input may be variadic"));
      }
    }
    if (ts.IsPunct("@")) {
      ts.Next();
      if (ts.Peek().kind != Token::Kind::kConst || ts.Peek().variadic) {
        return ts.ErrorHere(absl::StrCat("expected '$name' after '@'", ts.Found()));
      }
      node.output_index = ts.Next().text;
      if (node.outputs.size() != 1 || node.outputs[0].variadic) {
        return absl::InvalidArgumentError(absl::StrCat(
            node.loc.ToString(), ": '@ $k' needs exactly one non-variadic output"));
      }
    }
    SENTIER_RETURN_IF_ERROR(ts.ExpectEnd());
    return node;
  }

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
    ExprParser ep(ts);
    SENTIER_ASSIGN_OR_RETURN(lit, ep.Parse());
    if (!IsLiteral(*lit)) {
      return absl::InvalidArgumentError(absl::StrCat(
          arg.loc.ToString(), ": pattern inputs are %value, $const, _, or a literal constant"));
    }
    arg.kind = PatternArg::Kind::kLiteral;
    arg.literal = lit;
    return arg;
  }

  static bool IsLiteral(const Expr& e) {
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

  absl::StatusOr<RewriteStmt> ParseRewrite(TokenStream& ts) {
    RewriteStmt stmt;
    stmt.loc = ts.LocHere();
    if (ts.IsIdent("replace")) {
      stmt.kind = RewriteStmt::Kind::kReplace;
      ts.Next();
      ExprParser from(ts);
      SENTIER_ASSIGN_OR_RETURN(f, from.Parse());
      if (!ts.IsIdent("with")) return ts.ErrorHere(absl::StrCat("expected 'with'", ts.Found()));
      ts.Next();
      ExprParser to(ts);
      SENTIER_ASSIGN_OR_RETURN(t, to.Parse());
      SENTIER_RETURN_IF_ERROR(ts.ExpectEnd());
      stmt.from = f;
      stmt.to = t;
      return stmt;
    }
    if (ts.IsIdent("call")) {
      stmt.kind = RewriteStmt::Kind::kCall;
      ts.Next();
      if (ts.Peek().kind != Token::Kind::kIdent) {
        return ts.ErrorHere(absl::StrCat("expected a builtin name after 'call'", ts.Found()));
      }
      stmt.op = ts.Next().text;
      SENTIER_RETURN_IF_ERROR(ts.Expect("("));
      SENTIER_RETURN_IF_ERROR(ParseArgList(ts, &stmt.args));
      SENTIER_RETURN_IF_ERROR(ts.ExpectEnd());
      return stmt;
    }
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
    stmt.output = skip_first ? "" : out.text;
    // `%a, _, %c = op(...)`: one name (or `_`) per output of a many-output operator.
    if (ts.IsPunct(",")) {
      if (out.variadic) return ts.ErrorAt(out, "an operator's outputs are named one by one: drop the '...'");
      stmt.outputs.push_back(stmt.output);
      while (ts.IsPunct(",")) {
        ts.Next();
        const Token o = ts.Peek();
        if (o.kind == Token::Kind::kIdent && o.text == "_") {
          stmt.outputs.push_back("");
        } else if (o.kind == Token::Kind::kValue && !o.variadic) {
          stmt.outputs.push_back(o.text);
        } else {
          return ts.ErrorHere(absl::StrCat("expected an output name or '_'", ts.Found()));
        }
        ts.Next();
      }
    }
    SENTIER_RETURN_IF_ERROR(ts.Expect("="));
    const Token op = ts.Peek();
    if (op.kind != Token::Kind::kIdent) {
      return ts.ErrorHere(absl::StrCat("expected an operator or unpack(...)", ts.Found()));
    }
    ts.Next();
    stmt.op = op.text;
    if (!stmt.outputs.empty() && (op.text == "unpack" || op.text == "constants" || op.text == "each" ||
                                op.text == "scan")) {
      return ts.ErrorAt(op, absl::StrCat(op.text, " defines one sequence, not several names"));
    }
    if (op.text == "unpack" || op.text == "constants") {
      stmt.kind = op.text == "unpack" ? RewriteStmt::Kind::kUnpack : RewriteStmt::Kind::kConstants;
      if (!out.variadic) {
        return ts.ErrorAt(out, absl::StrCat(op.text, "(...) defines a sequence: write %name..."));
      }
    } else if (op.text == "each" || op.text == "scan") {
      stmt.kind = op.text == "each" ? RewriteStmt::Kind::kEach : RewriteStmt::Kind::kScan;
      if (!out.variadic) {
        return ts.ErrorAt(out, absl::StrCat(op.text, " defines a sequence: write %name..."));
      }
      const Token each_op = ts.Peek();
      if (each_op.kind != Token::Kind::kIdent || each_op.text.find("::") == std::string::npos) {
        return ts.ErrorHere(absl::StrCat("expected an operator such as aten::add after '",
                                         op.text, "'", ts.Found()));
      }
      ts.Next();
      stmt.op = each_op.text;
    } else {
      stmt.kind = RewriteStmt::Kind::kInsert;
      if (out.variadic) return ts.ErrorAt(out, "an operator defines one value: drop the '...'");
      if (op.text.find("::") == std::string::npos) {
        return ts.ErrorAt(op, absl::StrCat("expected an operator such as aten::slice, found '",
                                           op.text, "'"));
      }
    }
    SENTIER_RETURN_IF_ERROR(ts.Expect("("));
    const bool takes_kwargs =
        stmt.kind == RewriteStmt::Kind::kInsert || stmt.kind == RewriteStmt::Kind::kEach ||
        stmt.kind == RewriteStmt::Kind::kScan;
    SENTIER_RETURN_IF_ERROR(ParseArgList(ts, &stmt.args, takes_kwargs ? &stmt.kwargs : nullptr));
    SENTIER_RETURN_IF_ERROR(ts.ExpectEnd());
    return stmt;
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
          ExprParser ep(ts);
          SENTIER_ASSIGN_OR_RETURN(e, ep.Parse());
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
        ExprParser ep(ts);
        SENTIER_ASSIGN_OR_RETURN(e, ep.Parse());
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

  absl::string_view file_;
  std::vector<absl::string_view> lines_;
  size_t line_no_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<Rule>> ParseRules(absl::string_view text, absl::string_view file) {
  FileParser parser(text, file);
  return parser.Parse();
}

absl::StatusOr<ExprPtr> ParseExpression(absl::string_view text, absl::string_view file,
                                        int line) {
  SourceLoc loc;
  loc.file = std::string(file);
  loc.line = line;
  std::string content = StripComment(text);
  LineLexer lexer(content, loc);
  SENTIER_ASSIGN_OR_RETURN(tokens, lexer.Lex());
  TokenStream ts(tokens, loc);
  ExprParser ep(ts);
  SENTIER_ASSIGN_OR_RETURN(e, ep.Parse());
  SENTIER_RETURN_IF_ERROR(ts.ExpectEnd());
  return e;
}

}  // namespace sentier
