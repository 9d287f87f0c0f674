// rule_lexer_test.cc — tokens of one line, their columns, lexing errors, and the token cursor.
#include "passes/internal/rule_lexer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sentier {
namespace internal {
namespace {

using Kind = Token::Kind;

SourceLoc LineLoc(int line) {
  SourceLoc loc;
  loc.file = "t.rules";
  loc.line = line;
  return loc;
}

std::vector<Token> Lex(absl::string_view line) {
  auto tokens = LexLine(line, LineLoc(3));
  EXPECT_TRUE(tokens.ok()) << tokens.status();
  return tokens.ok() ? *tokens : std::vector<Token>{};
}

std::string LexError(absl::string_view line) {
  auto tokens = LexLine(line, LineLoc(3));
  EXPECT_FALSE(tokens.ok());
  return tokens.ok() ? "" : std::string(tokens.status().message());
}

// kind:text@col for each token, variadic ones marked with "...".
std::string Render(const std::vector<Token>& tokens) {
  std::string out;
  for (const Token& t : tokens) {
    static const char* kNames[] = {"ident", "int", "float", "string", "value", "const", "punct",
                                   "end"};
    if (!out.empty()) out += " ";
    out += std::string(kNames[static_cast<int>(t.kind)]) + ":" + t.text +
           (t.variadic ? "..." : "") + "@" + std::to_string(t.col);
  }
  return out;
}

TEST(RuleLexerTest, PatternLineTokensAndColumns) {
  EXPECT_EQ(Render(Lex("  %p... = prim::ListUnpack(%parts, $d, _...) @ $k")),
            "value:p...@3 punct:=@9 ident:prim::ListUnpack@11 punct:(@27 value:parts@28 "
            "punct:,@34 const:d@36 punct:,@38 ident:_...@40 punct:)@44 punct:@@46 const:k@48 "
            "end:@50");
}

TEST(RuleLexerTest, OpRegexIsOneIdentifier) {
  EXPECT_EQ(Render(Lex("aten::(split|chunk)(%x)")),
            "ident:aten::(split|chunk)@1 punct:(@20 value:x@21 punct:)@23 end:@24");
}

TEST(RuleLexerTest, NumbersAndStrings) {
  EXPECT_EQ(Render(Lex("12 1.5 1e-3 2E+4 \"a # b\"")),
            "int:12@1 float:1.5@4 float:1e-3@8 float:2E+4@13 string:a # b@18 end:@25");
}

TEST(RuleLexerTest, PercentAloneIsModulo) {
  EXPECT_EQ(Render(Lex("$a % 2 == %b")),
            "const:a@1 punct:%@4 int:2@6 punct:==@8 value:b@11 end:@13");
}

TEST(RuleLexerTest, TwoCharacterOperators) {
  EXPECT_EQ(Render(Lex("a==b!=c<=d>=e->f<g")),
            "ident:a@1 punct:==@2 ident:b@4 punct:!=@5 ident:c@7 punct:<=@8 ident:d@10 "
            "punct:>=@11 ident:e@13 punct:->@14 ident:f@16 punct:<@17 ident:g@18 end:@19");
}

TEST(RuleLexerTest, EmptyLineIsJustTheEnd) {
  EXPECT_EQ(Render(Lex("")), "end:@1");
  EXPECT_EQ(Render(Lex("   ")), "end:@4");
}

TEST(RuleLexerTest, ErrorsNameFileLineAndColumn) {
  EXPECT_EQ(LexError("  $ + 1"), "t.rules:3:3: expected a name after '$'");
  EXPECT_EQ(LexError("x == \"open"), "t.rules:3:6: unterminated string literal");
  EXPECT_EQ(LexError("%a ? 1"), "t.rules:3:4: unexpected character '?'");
  EXPECT_EQ(LexError("  aten::(relu|tanh"), "t.rules:3:3: unbalanced parentheses in op name");
}

TEST(RuleLexerTest, StripCommentKeepsHashesInStrings) {
  EXPECT_EQ(StripComment("%y = f(%x)  # note"), "%y = f(%x)  ");
  EXPECT_EQ(StripComment("x == \"a#b\" # note"), "x == \"a#b\" ");
  EXPECT_EQ(StripComment("no comment"), "no comment");
}

TEST(TokenStreamTest, PeekNextAndEnd) {
  TokenStream ts(Lex("%a , b"), LineLoc(7));
  EXPECT_EQ(ts.Peek(1).text, ",");
  EXPECT_EQ(ts.Peek(9).kind, Kind::kEnd);  // past the end: the end token
  EXPECT_TRUE(ts.IsPunct(",", 1));
  EXPECT_EQ(ts.Next().text, "a");
  EXPECT_TRUE(ts.Expect(",").ok());
  EXPECT_TRUE(ts.IsIdent("b"));
  EXPECT_EQ(ts.LocHere().ToString(), "t.rules:7:6");
  ts.Next();
  EXPECT_TRUE(ts.AtEnd());
  EXPECT_TRUE(ts.ExpectEnd().ok());
  ts.Next();  // stays at the end
  EXPECT_TRUE(ts.AtEnd());
}

TEST(TokenStreamTest, ErrorsDescribeWhatWasFound) {
  TokenStream ts(Lex("%xs... \"s\" $k"), LineLoc(2));
  EXPECT_EQ(ts.Expect("(").message(), "t.rules:2:1: expected '(', found '%xs...'");
  ts.Next();
  EXPECT_EQ(ts.ExpectEnd().message(), "t.rules:2:8: unexpected text, found '\"s\"'");
  ts.Next();
  EXPECT_EQ(ts.Found(), ", found '$k'");
  ts.Next();
  EXPECT_EQ(ts.Expect(")").message(), "t.rules:2:14: expected ')', found end of line");
  EXPECT_EQ(ts.ErrorAt(ts.Peek(), "msg").code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace internal
}  // namespace sentier
