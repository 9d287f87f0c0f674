// internal/rule_lexer.cc — tokens of one rule-file line, and the cursor the parser reads them.
//
// The first character of a token decides its kind: `%` or `$` a capture (or `%` alone, the modulo
// operator), a letter or `_` a name, a digit a number, `"` a string, anything else punctuation.
// Each kind has its own Lex* step that returns the index just past the token.
#include "passes/internal/rule_lexer.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sentier {
namespace internal {
namespace {

bool IsIdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsDigit(char c) { return std::isdigit(static_cast<unsigned char>(c)); }

class LineLexer {
 public:
  LineLexer(absl::string_view line, const SourceLoc& loc) : line_(line), loc_(loc) {}

  absl::StatusOr<std::vector<Token>> Lex() {
    std::vector<Token> out;
    size_t i = 0;
    while (i < line_.size()) {
      if (std::isspace(static_cast<unsigned char>(line_[i]))) {
        ++i;
        continue;
      }
      Token t;
      t.col = static_cast<int>(i) + 1;
      absl::StatusOr<size_t> next = LexToken(i, &t);
      if (!next.ok()) return next.status();
      i = *next;
      out.push_back(std::move(t));
    }
    Token end;
    end.kind = Token::Kind::kEnd;
    end.col = static_cast<int>(line_.size()) + 1;
    out.push_back(end);
    return out;
  }

 private:
  // LexToken: fills `*t` (its column already set) from the token starting at `i`; returns the
  // index just past it.
  absl::StatusOr<size_t> LexToken(size_t i, Token* t) const {
    const char c = line_[i];
    if (c == '%' || c == '$') return LexCapture(i, t);
    if (IsIdentStart(c)) return LexName(i, t);
    if (IsDigit(c)) return LexNumber(i, t);
    if (c == '"') return LexString(i, t);
    return LexPunct(i, t);
  }

  // %name, $name, %name..., $name...; a `%` not followed by a name is the modulo operator.
  absl::StatusOr<size_t> LexCapture(size_t i, Token* t) const {
    const char c = line_[i];
    size_t j = i + 1;
    while (j < line_.size() && (IsIdentChar(line_[j]) && line_[j] != '.')) ++j;
    if (j == i + 1) {
      if (c == '$') return Error(t->col, "expected a name after '$'");
      t->kind = Token::Kind::kPunct;
      t->text = "%";
      return i + 1;
    }
    t->kind = c == '%' ? Token::Kind::kValue : Token::Kind::kConst;
    t->text = std::string(line_.substr(i + 1, j - i - 1));
    if (line_.substr(j, 3) == "...") {
      t->variadic = true;
      j += 3;
    }
    return j;
  }

  // Identifiers may contain "::" (op names) and dots; an op regex such as aten::(relu|tanh) is
  // lexed as one identifier including its parenthesized alternatives. `_...` is the variadic
  // wildcard.
  absl::StatusOr<size_t> LexName(size_t i, Token* t) const {
    size_t j = i;
    while (j < line_.size()) {
      if (line_.substr(j, 3) == "...") break;
      if (IsIdentChar(line_[j])) {
        ++j;
      } else if (line_.substr(j, 2) == "::") {
        j += 2;
        if (j < line_.size() && line_[j] == '(') {
          absl::StatusOr<size_t> after = SkipAlternatives(j, t->col);
          if (!after.ok()) return after.status();
          j = *after;
        }
      } else {
        break;
      }
    }
    t->text = std::string(line_.substr(i, j - i));
    if (t->text == "_" && line_.substr(j, 3) == "...") {
      t->variadic = true;
      j += 3;
    }
    t->kind = Token::Kind::kIdent;
    return j;
  }

  // The regex alternatives `(a|b)` after `::` in an op name, from the '(' at `j` to its matching
  // ')'; returns the index past it. `col` is the name's column, for the error.
  absl::StatusOr<size_t> SkipAlternatives(size_t j, int col) const {
    int depth = 0;
    while (j < line_.size()) {
      if (line_[j] == '(') ++depth;
      if (line_[j] == ')') --depth;
      ++j;
      if (depth == 0) break;
    }
    if (depth != 0) return Error(col, "unbalanced parentheses in op name");
    return j;
  }

  // 12, 1.5, 1e-3, 2E+4; a number stops before "...".
  absl::StatusOr<size_t> LexNumber(size_t i, Token* t) const {
    size_t j = i;
    bool is_float = false;
    while (j < line_.size() &&
           (IsDigit(line_[j]) || line_[j] == '.' || line_[j] == 'e' || line_[j] == 'E' ||
            ((line_[j] == '-' || line_[j] == '+') && j > i &&
             (line_[j - 1] == 'e' || line_[j - 1] == 'E')))) {
      if (line_[j] == '.') {
        if (line_.substr(j, 3) == "...") break;
        is_float = true;
      }
      if (line_[j] == 'e' || line_[j] == 'E') is_float = true;
      ++j;
    }
    t->kind = is_float ? Token::Kind::kFloat : Token::Kind::kInt;
    t->text = std::string(line_.substr(i, j - i));
    return j;
  }

  // "text": no escapes; the literal ends at the next quote on the line.
  absl::StatusOr<size_t> LexString(size_t i, Token* t) const {
    size_t j = i + 1;
    while (j < line_.size() && line_[j] != '"') ++j;
    if (j >= line_.size()) return Error(t->col, "unterminated string literal");
    t->kind = Token::Kind::kString;
    t->text = std::string(line_.substr(i + 1, j - i - 1));
    return j + 1;
  }

  // Two-character operators first, then one of ()[],=:+-*/%<>@.
  absl::StatusOr<size_t> LexPunct(size_t i, Token* t) const {
    static const char* kTwo[] = {"==", "!=", "<=", ">=", "->"};
    t->kind = Token::Kind::kPunct;
    for (const char* p : kTwo) {
      if (line_.substr(i, 2) == p) {
        t->text = p;
        return i + 2;
      }
    }
    const char c = line_[i];
    if (std::string("()[],=:+-*/%<>@").find(c) == std::string::npos) {
      return Error(t->col, absl::StrCat("unexpected character '", std::string(1, c), "'"));
    }
    t->text = std::string(1, c);
    return i + 1;
  }

  absl::Status Error(int col, absl::string_view msg) const {
    return absl::InvalidArgumentError(
        absl::StrCat(loc_.file, ":", loc_.line, ":", col, ": ", msg));
  }

  absl::string_view line_;
  const SourceLoc& loc_;
};

}  // namespace

bool IsIdentChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
}

std::string StripComment(absl::string_view line) {
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '"') in_string = !in_string;
    if (line[i] == '#' && !in_string) return std::string(line.substr(0, i));
  }
  return std::string(line);
}

absl::StatusOr<std::vector<Token>> LexLine(absl::string_view line, const SourceLoc& loc) {
  return LineLexer(line, loc).Lex();
}

// ---------------------------------------------------------------------------------------------
// TokenStream

TokenStream::TokenStream(std::vector<Token> tokens, SourceLoc loc)
    : tokens_(std::move(tokens)), loc_(std::move(loc)) {}

const Token& TokenStream::Peek(size_t ahead) const {
  size_t i = std::min(pos_ + ahead, tokens_.size() - 1);
  return tokens_[i];
}

Token TokenStream::Next() {
  Token t = Peek();
  if (pos_ < tokens_.size() - 1) ++pos_;
  return t;
}

absl::Status TokenStream::Expect(absl::string_view p) {
  if (!IsPunct(p)) return ErrorHere(absl::StrCat("expected '", p, "'", Found()));
  Next();
  return absl::OkStatus();
}

absl::Status TokenStream::ExpectEnd() {
  if (!AtEnd()) return ErrorHere(absl::StrCat("unexpected text", Found()));
  return absl::OkStatus();
}

std::string TokenStream::Found() const {
  const Token& t = Peek();
  if (t.kind == Token::Kind::kEnd) return ", found end of line";
  return absl::StrCat(", found '", Describe(t), "'");
}

std::string TokenStream::Describe(const Token& t) {
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

SourceLoc TokenStream::LocOf(const Token& t) const {
  SourceLoc l = loc_;
  l.col = t.col;
  return l;
}

absl::Status TokenStream::ErrorAt(const Token& t, absl::string_view msg) const {
  return absl::InvalidArgumentError(
      absl::StrCat(loc_.file, ":", loc_.line, ":", t.col, ": ", msg));
}

}  // namespace internal
}  // namespace sentier
