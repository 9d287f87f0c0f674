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

TEST(RuleCompilerTest, UnknownOperatorIsAnErrorAtItsLine) {
  std::string text = kRule;
  text.replace(text.find("aten::add"), 9, "aten::no_such_op");
  auto rule = CompileOne(text);
  ASSERT_FALSE(rule.ok());
  EXPECT_EQ(rule.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rule.status().message().find("test.rules:5:"), std::string::npos) << rule.status();
  EXPECT_NE(rule.status().message().find("unknown operator 'aten::no_such_op'"), std::string::npos)
      << rule.status();
}

TEST(RuleCompilerTest, UnboundCaptureIsAnErrorAtItsUse) {
  std::string text = kRule;
  text.replace(text.find("replace %y with %s"), 18, "replace %y with %t");
  auto rule = CompileOne(text);
  ASSERT_FALSE(rule.ok());
  EXPECT_NE(rule.status().message().find("test.rules:10:"), std::string::npos) << rule.status();
  EXPECT_NE(rule.status().message().find("unknown capture '%t'"), std::string::npos)
      << rule.status();
}

TEST(RuleCompilerTest, LineNotReachingTheAnchorIsAnError) {
  std::string text = kRule;
  text.replace(text.find("aten::(relu|tanh)(%s)"), 21, "aten::(relu|tanh)(%a)");
  auto rule = CompileOne(text);
  ASSERT_FALSE(rule.ok());
  EXPECT_NE(rule.status().message().find("test.rules:5:"), std::string::npos) << rule.status();
  EXPECT_NE(rule.status().message().find("not connected to the anchor"), std::string::npos)
      << rule.status();
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
