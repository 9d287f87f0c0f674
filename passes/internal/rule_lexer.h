// internal/rule_lexer.h — the rule language's tokens, one line at a time, and a cursor over them.
//
// Rule files are read line by line (rule_parser.cc), so the lexer works on one line with its
// comment already stripped; every token records its 1-based column, and every error it or the
// cursor reports reads `file:line:col: message`. Only the rule parser and its tests use this;
// the public face is rule_parser.h.
//
//   std::string content = StripComment(line);
//   SENTIER_ASSIGN_OR_RETURN(tokens, LexLine(content, loc));
//   TokenStream ts(tokens, loc);
//   if (ts.IsIdent("rule")) ...
#ifndef SENTIER_PASSES_INTERNAL_RULE_LEXER_H_
#define SENTIER_PASSES_INTERNAL_RULE_LEXER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "passes/rule_ast.h"

namespace sentier {
namespace internal {

// Token: one lexeme. Captures keep their name without the sigil (`%x...` is kValue "x",
// variadic); string literals keep their text without the quotes; kEnd closes every line.
struct Token {
  enum class Kind { kIdent, kInt, kFloat, kString, kValue, kConst, kPunct, kEnd };
  Kind kind = Kind::kEnd;
  std::string text;
  bool variadic = false;  // %x... / $x... / _...
  int col = 0;            // 1-based
};

// IsIdentChar: true for the characters of a name after its first ([A-Za-z0-9_.]).
bool IsIdentChar(char c);

// StripComment: `line` without a trailing `# comment` that is not inside a string literal.
std::string StripComment(absl::string_view line);

// LexLine: the tokens of `line` (comment already stripped), ending with one kEnd token whose
// column is just past the line. `loc` gives the file and line of errors; its column is unused.
absl::StatusOr<std::vector<Token>> LexLine(absl::string_view line, const SourceLoc& loc);

// TokenStream: a cursor over one line's tokens with error helpers. Reading past the end keeps
// returning the kEnd token.
class TokenStream {
 public:
  TokenStream(std::vector<Token> tokens, SourceLoc loc);

  const Token& Peek(size_t ahead = 0) const;
  Token Next();
  bool AtEnd() const { return Peek().kind == Token::Kind::kEnd; }
  bool IsPunct(absl::string_view p, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::Kind::kPunct && Peek(ahead).text == p;
  }
  bool IsIdent(absl::string_view p) const {
    return Peek().kind == Token::Kind::kIdent && Peek().text == p;
  }

  // Expect: consumes the punctuation `p`, or fails with "expected 'p', found ...".
  absl::Status Expect(absl::string_view p);
  // ExpectEnd: fails with "unexpected text, found ..." unless the line is used up.
  absl::Status ExpectEnd();
  // Found: ", found 'TOKEN'" or ", found end of line", to end an error message.
  std::string Found() const;
  // Describe: a token as it was written (`%x...`, `$k`, `"text"`, `aten::cat`).
  static std::string Describe(const Token& t);

  SourceLoc LocHere() const { return LocOf(Peek()); }
  SourceLoc LocOf(const Token& t) const;
  absl::Status ErrorHere(absl::string_view msg) const { return ErrorAt(Peek(), msg); }
  absl::Status ErrorAt(const Token& t, absl::string_view msg) const;

 private:
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  SourceLoc loc_;
};

}  // namespace internal
}  // namespace sentier

#endif  // SENTIER_PASSES_INTERNAL_RULE_LEXER_H_
