// rule_compiler_test.cc — the rule compiler: a rule resolves to operator kinds, scopes and an
// anchor; rules that name an unknown operator, use an unbound capture or have a line that does
// not reach the anchor fail with an error at the offending `file:line:col`; RuleSet::Create
// refuses a second rule of the same name.
#include "passes/internal/rule_compiler.h"

#include <gtest/gtest.h>

#include "passes/internal/rule_engine_testing.h"
#include "passes/rule_parser.h"
#include "passes/rule_set.h"

namespace sentier {
namespace internal {
namespace {

using test_util::CompileOne;

constexpr char kRule[] = R"(rule add_then_relu
  family test
  description relu(add(a, b)) keeps its add
  match
    %s = aten::add(%a, %b, 1)
    %y = aten::(relu|tanh)(%s)
  where
    len([%a, %b]) == 2
  rewrite
    replace %y with %s
end
)";

TEST(RuleCompilerTest, CompilesKindsScopesAndAnchor) {
  auto rule = CompileOne(kRule);
  ASSERT_TRUE(rule.ok()) << rule.status();
  const CompiledRule& r = **rule;
  EXPECT_EQ(r.ast.name, "add_then_relu");
  ASSERT_EQ(r.nodes.size(), 2u);
  EXPECT_EQ(r.anchor, 1);
  EXPECT_TRUE(r.nodes[0].kinds.contains(c10::Symbol::fromQualString("aten::add")));
  EXPECT_EQ(r.nodes[1].kinds.size(), 2u);  // the regex alternative names two operators
  EXPECT_TRUE(r.nodes[1].kinds.contains(c10::Symbol::fromQualString("aten::tanh")));
  ASSERT_EQ(r.nodes[0].literals.size(), 3u);
  EXPECT_TRUE(r.nodes[0].literals[2].Equal(Datum::Int(1)));
  EXPECT_EQ(r.main.value_def.at("s"), std::make_pair(0, 0));
  EXPECT_EQ(r.main.value_def.at("y"), std::make_pair(1, 0));
}

// ErrorAfterEdit: the error of compiling kRule with `from` replaced by `to` ("" if it compiles).
std::string ErrorAfterEdit(const std::string& from, const std::string& to) {
  std::string text = kRule;
  text.replace(text.find(from), from.size(), to);
  auto rule = CompileOne(text);
  if (rule.ok()) return "";
  EXPECT_EQ(rule.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(rule.status().message());
}

TEST(RuleCompilerTest, UnknownOperatorIsAnErrorAtItsLine) {
  std::string error = ErrorAfterEdit("aten::add", "aten::no_such_op");
  EXPECT_NE(error.find("test.rules:5:"), std::string::npos) << error;
  EXPECT_NE(error.find("unknown operator 'aten::no_such_op'"), std::string::npos) << error;
}

TEST(RuleCompilerTest, UnboundCaptureIsAnErrorAtItsUse) {
  std::string error = ErrorAfterEdit("replace %y with %s", "replace %y with %t");
  EXPECT_NE(error.find("test.rules:10:"), std::string::npos) << error;
  EXPECT_NE(error.find("unknown capture '%t'"), std::string::npos) << error;
}

TEST(RuleCompilerTest, LineNotReachingTheAnchorIsAnError) {
  std::string error = ErrorAfterEdit("aten::(relu|tanh)(%s)", "aten::(relu|tanh)(%a)");
  EXPECT_NE(error.find("test.rules:5:"), std::string::npos) << error;
  EXPECT_NE(error.find("not connected to the anchor"), std::string::npos) << error;
}

TEST(RuleCompilerTest, UnknownFunctionAndWrongArityAreErrors) {
  EXPECT_NE(ErrorAfterEdit("len([%a, %b])", "no_such_fn(%a)").find("unknown function 'no_such_fn'"),
            std::string::npos);
  EXPECT_NE(ErrorAfterEdit("len([%a, %b])", "len(%a, %b)").find("function 'len' takes 1"),
            std::string::npos);
  EXPECT_EQ(ErrorAfterEdit("aten::add", "aten::add"), "");
}

// A many-output insert binds each named output; a name bound twice, or no name at all, is an
// error at the statement.
TEST(RuleCompilerTest, ManyOutputInsertBindsItsNames) {
  EXPECT_EQ(ErrorAfterEdit("    replace %y with %s\n",
                           "    %v, _ = aten::sort(%s)\n    replace %y with %v\n"),
            "");
  std::string twice = ErrorAfterEdit("    replace %y with %s\n",
                                     "    %v, %v = aten::sort(%s)\n    replace %y with %v\n");
  EXPECT_NE(twice.find("test.rules:10:5: '%v' is already bound"), std::string::npos) << twice;
  std::string none = ErrorAfterEdit("    replace %y with %s\n",
                                    "    _, _ = aten::sort(%s)\n    replace %y with %s\n");
  EXPECT_NE(none.find("must name at least one output"), std::string::npos) << none;
}

// `scan` needs the sequence it runs over, one named operator (not a regex), and a new name.
TEST(RuleCompilerTest, ScanNeedsASequenceAndANamedOperator) {
  EXPECT_EQ(ErrorAfterEdit("    replace %y with %s\n",
                           "    %r... = scan aten::add([%s, %s])\n    replace %y with %r...[1]\n"),
            "");
  std::string empty = ErrorAfterEdit("    replace %y with %s\n",
                                     "    %r... = scan aten::add()\n    replace %y with %s\n");
  EXPECT_NE(empty.find("test.rules:10:5: scan op(%xs..., ...) needs the sequence"), std::string::npos)
      << empty;
  std::string regex = ErrorAfterEdit("    replace %y with %s\n",
                                     "    %r... = scan aten::(add|mul)([%s])\n    replace %y with %s\n");
  EXPECT_NE(regex.find("'scan' inserts one named operator, not a regex"), std::string::npos) << regex;
  std::string unknown = ErrorAfterEdit("    replace %y with %s\n",
                                       "    %r... = scan aten::no_such_op([%s])\n    replace %y with %s\n");
  EXPECT_NE(unknown.find("unknown operator 'aten::no_such_op'"), std::string::npos) << unknown;
}

TEST(RuleCompilerTest, RuleSetRefusesADuplicateNameAndNamesIt) {
  auto parsed = ParseRules(std::string(kRule) + "\n" + kRule, "test.rules");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  auto set = RuleSet::Create(*parsed);
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.status().message().find("duplicate rule name 'add_then_relu'"), std::string::npos)
      << set.status();
  auto one = RuleSet::Create({(*parsed)[0]});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ((*one)->size(), 1u);
}

}  // namespace
}  // namespace internal
}  // namespace sentier
