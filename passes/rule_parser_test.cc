// rule_parser_test.cc — syntax of the rule language and its error locations.
#include "passes/rule_parser.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace sentier {
namespace {

constexpr char kGood[] = R"(# a comment
rule cat_of_pieces   # trailing comment
  family vertical
  description cat(split(x)) == x
  match
    %parts = aten::(split|chunk)(%x, _, $d)
    %p... = prim::ListUnpack(%parts)
    %l = prim::ListConstruct(%p...)
    %y = aten::cat(%l, $d)
    foreach %e, $k in %p...:
      %e = prim::ListUnpack(%parts) @ $k
  where
    len(%p...) >= 2 and not ($d < 0)
  rewrite
    %r = aten::slice(%x, $d, 0, -1 + 2 * 3, 1)
    replace %y with %r
end
)";

TEST(RuleParserTest, ParsesAFullRule) {
  auto rules = ParseRules(kGood, "good.rules");
  ASSERT_TRUE(rules.ok()) << rules.status();
  ASSERT_EQ(rules->size(), 1u);
  const Rule& r = (*rules)[0];
  EXPECT_EQ(r.name, "cat_of_pieces");
  EXPECT_EQ(r.family, "vertical");
  EXPECT_EQ(r.description, "cat(split(x)) == x");
  EXPECT_EQ(r.loc.line, 2);
  ASSERT_EQ(r.match.size(), 4u);
  EXPECT_EQ(r.match[0].op, "aten::(split|chunk)");
  EXPECT_EQ(r.match[0].args[1].kind, PatternArg::Kind::kWildcard);
  EXPECT_EQ(r.match[0].args[2].kind, PatternArg::Kind::kConst);
  EXPECT_TRUE(r.match[1].outputs[0].variadic);
  EXPECT_TRUE(r.match[2].args[0].variadic);
  ASSERT_EQ(r.foreach.size(), 1u);
  EXPECT_EQ(r.foreach[0].element, "e");
  EXPECT_EQ(r.foreach[0].sequence, "p");
  EXPECT_EQ(r.foreach[0].per_element, std::vector<std::string>{"$k"});
  EXPECT_EQ(r.foreach[0].nodes[0].output_index, "k");
  ASSERT_EQ(r.where.size(), 1u);
  EXPECT_EQ(r.where[0]->text, "and");
  ASSERT_EQ(r.rewrite.size(), 2u);
  EXPECT_EQ(r.rewrite[0].kind, RewriteStmt::Kind::kInsert);
  EXPECT_EQ(r.rewrite[1].kind, RewriteStmt::Kind::kReplace);
}

TEST(RuleParserTest, PrecedenceMultiplicationBindsTighter) {
  auto e = ParseExpression("1 + 2 * 3 == 7", "x", 1);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->text, "==");
  EXPECT_EQ((*e)->args[0]->text, "+");
  EXPECT_EQ((*e)->args[0]->args[1]->text, "*");
}

TEST(RuleParserTest, NormalizedTextIgnoresCommentsAndSpacing) {
  auto a = ParseRules(kGood, "a.rules");
  std::string spaced = std::string(kGood);
  spaced.replace(spaced.find("  description"), 13, "\n# a new comment\n      description  ");
  auto b = ParseRules(spaced, "b.rules");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)[0].normalized_text, (*b)[0].normalized_text);
}

struct BadCase {
  const char* text;
  const char* error;  // expected prefix of the message (file:line:col: ...)
};

class RuleParserErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(RuleParserErrorTest, NamesFileLineAndColumn) {
  auto rules = ParseRules(GetParam().text, "bad.rules");
  ASSERT_FALSE(rules.ok());
  EXPECT_EQ(rules.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(rules.status().message()).rfind(GetParam().error, 0), 0u)
      << rules.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Errors, RuleParserErrorTest,
    ::testing::Values(
        BadCase{"bogus\n", "bad.rules:1:1: expected 'rule NAME'"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = aten::relu(%x)\n",
                "bad.rules:1:1: rule 'r' is missing 'end'"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = aten::relu(%x\n  "
                "rewrite\n    replace %y with %x\nend\n",
                "bad.rules:5:23: expected ')'"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = relu(%x)\nend\n",
                "bad.rules:5:10: expected an operator"},
        BadCase{"rule r\n  family f\n  match\n    %y = aten::relu(%x)\n  rewrite\n    replace "
                "%y with %x\nend\n",
                "bad.rules:1:1: rule 'r' needs a 'description'"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = aten::relu(%x)\n  "
                "rewrite\n    replace %y %x\nend\n",
                "bad.rules:7:16: expected 'with'"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = aten::relu(%x...,"
                " %z)\n  rewrite\n    replace %y with %x\nend\n",
                "bad.rules:5:21: only the last input may be variadic"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = aten::relu(%x)\n  "
                "where\n    $a ? 1\n  rewrite\n    replace %y with %x\nend\n",
                "bad.rules:7:8: unexpected character '?'"},
        BadCase{"rule r\n  family two words\n", "bad.rules:2:10: a family is one word"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = aten::relu(%x)\n  "
                "rewrite\n    %j = each aten::neg(%x)\n    replace %y with %j\nend\n",
                "bad.rules:7:5: each defines a sequence: write %name..."},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = aten::relu(%x)\n  "
                "rewrite\n    %j... = each neg(%x)\n    replace %y with %x\nend\n",
                "bad.rules:7:18: expected an operator such as aten::add after 'each'"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = aten::relu(%x)\n  "
                "rewrite\n    %c = constants([1])\n    replace %y with %x\nend\n",
                "bad.rules:7:5: constants(...) defines a sequence: write %name..."},
        BadCase{"rule r\n  family f\n  description d\n  any_batch_size\n  match\n    %y = "
                "aten::relu(%x)\n  rewrite\n    replace %y with %x\nend\n",
                "bad.rules:1:1: 'any_batch_size' belongs to a 'group' rule ('r' is a match rule)"},
        BadCase{"rule r\n  family f\n  description d\n  any_batch_size yes\n",
                "bad.rules:4:3: 'any_batch_size' takes no value"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = aten::relu(%x)\n  "
                "rewrite\n    %a, 1 = aten::sort(%x)\n    replace %y with %a\nend\n",
                "bad.rules:7:9: expected an output name or '_'"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = aten::relu(%x)\n  "
                "rewrite\n    %a, %b = each aten::neg(%x)\n    replace %y with %a\nend\n",
                "bad.rules:7:14: each defines one sequence, not several names"}));

// Errors of each part: whole-rule checks, pattern lines, expressions, rewrite statements.
constexpr char kHead[] = "rule r\n  family f\n  description d\n";

INSTANTIATE_TEST_SUITE_P(
    PartErrors, RuleParserErrorTest,
    ::testing::Values(
        BadCase{"rule r\n  family f\n  description d\n  group\n    %y = aten::relu(%x)\n"
                "    foreach %e in %p...:\n      %e = aten::neg(%x)\n  key\n    1\n  rewrite\n"
                "    replace %y... with %x...\nend\n",
                "bad.rules:1:1: group rule 'r' cannot use 'foreach'"},
        BadCase{"rule r\n  family f\n  description d\n  min_group 5\n  max_group 3\n  group\n"
                "    %y = aten::relu(%x)\n  key\n    1\n  rewrite\n    replace %y... with %x...\n"
                "end\n",
                "bad.rules:1:1: rule 'r': min_group > max_group"},
        BadCase{"rule r\n  min_group 0\n", "bad.rules:2:13: 'min_group' needs a positive integer"},
        BadCase{"rule r\n  stacked_min_group 0\n", "bad.rules:2:21: 'stacked_min_group' needs a positive integer"},
        BadCase{"rule r\n  family f\n  description d\n  stacked_min_group 2\n  match\n    %y = aten::relu(%x)\n  rewrite\n    replace %y with %x\nend\n",
                "bad.rules:1:1: 'stacked_min_group' belongs to a 'group' rule ('r' is a match rule)"},
        BadCase{"rule r\n  family f\nrule q\n", "bad.rules:3:1: rule 'r' (line 1) is missing 'end' "
                                              "before the next rule"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %a, %b = prim::ListUnpack(%l)"
                " @ $k\n  rewrite\n    replace %a with %b\nend\n",
                "bad.rules:5:5: '@ $k' needs exactly one non-variadic output"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %a..., %b = "
                "prim::ListUnpack(%l)\n  rewrite\n    replace %a with %b\nend\n",
                "bad.rules:5:5: only the last output may be variadic"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = aten::relu(%x, 1 + 2)\n"
                "  rewrite\n    replace %y with %x\nend\n",
                "bad.rules:5:25: pattern inputs are %value, $const, _, or a literal constant"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = aten::relu($x...)\n",
                "bad.rules:5:21: constant captures cannot be variadic in a pattern"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %l = prim::ListConstruct(%p...)"
                "\n    foreach %e in %p...:\n      %e = aten::relu(%n)\n    %z = aten::cat(%l, 0)\n"
                "  rewrite\n    replace %z with %l\nend\n",
                "bad.rules:8:26: pattern lines after a 'foreach' block must be indented under it"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    foreach %e in %p:\n",
                "bad.rules:5:19: expected a sequence capture (%xs...), found '%p'"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = aten::relu(%x)\n  where\n"
                "    99999999999999999999 > 1\n",
                "bad.rules:7:5: bad integer '99999999999999999999'"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = aten::relu(%x)\n  where\n"
                "    x > 1\n",
                "bad.rules:7:5: unknown name 'x' (captures start with % or $; functions need ())"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = aten::relu(%x)\n  where\n"
                "    len(%x...) >\n",
                "bad.rules:7:17: expected an expression, found end of line"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = aten::relu(%x)\n  rewrite\n"
                "    %a..., %b = aten::sort(%x)\n",
                "bad.rules:7:5: an operator's outputs are named one by one: drop the '...'"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = aten::relu(%x)\n  rewrite\n"
                "    call fold(a=1)\n",
                "bad.rules:7:15: keyword arguments are for operators only"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = aten::relu(%x)\n  rewrite\n"
                "    %z = aten::add(%x, alpha=1, %x)\n",
                "bad.rules:7:33: a positional argument cannot follow a keyword argument"},
        BadCase{"rule r\n  family f\n  description d\n  match\n    %y = aten::relu(%x)\n  rewrite\n"
                "    %z = relu(%x)\n",
                "bad.rules:7:10: expected an operator such as aten::slice, found 'relu'"}));

// Expressions: unary, postfix index, calls, lists and their locations.
TEST(RuleParserTest, ParsesExpressionForms) {
  auto e = ParseExpression("not -$a[0] % 2 == len(%x..., [1, -2.5]) or None", "e.rules", 4);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->text, "or");
  const Expr& eq = *(*e)->args[0]->args[0];  // not (... == ...)
  EXPECT_EQ(eq.text, "==");
  EXPECT_EQ(eq.args[0]->text, "%");
  const Expr& neg = *eq.args[0]->args[0];
  EXPECT_EQ(neg.kind, Expr::Kind::kUnary);
  EXPECT_EQ(neg.args[0]->kind, Expr::Kind::kIndex);
  EXPECT_EQ(neg.args[0]->loc.ToString(), "e.rules:4:8");
  const Expr& call = *eq.args[1];
  EXPECT_EQ(call.kind, Expr::Kind::kCall);
  ASSERT_EQ(call.args.size(), 2u);
  EXPECT_TRUE(call.args[0]->variadic);
  EXPECT_EQ(call.args[1]->kind, Expr::Kind::kList);
  EXPECT_EQ(call.args[1]->loc.ToString(), "e.rules:4:30");
  EXPECT_EQ((*e)->args[1]->kind, Expr::Kind::kNone);
  auto bad = ParseExpression("1 < 2 < 3", "e.rules", 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "e.rules:2:7: unexpected text, found '<'");
}

// Pattern literals and the `call` statement.
TEST(RuleParserTest, ParsesLiteralInputsAndCall) {
  auto rules = ParseRules(absl::StrCat(kHead,
                                       "  match\n    %y = aten::relu(%x, -1, [1, None], \"s\")\n"
                                       "  rewrite\n    call fold(%x, 1)\n    replace %y with %x\n"
                                       "end\n"),
                          "t.rules");
  ASSERT_TRUE(rules.ok()) << rules.status();
  const Rule& r = (*rules)[0];
  ASSERT_EQ(r.match[0].args.size(), 4u);
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(r.match[0].args[i].kind, PatternArg::Kind::kLiteral);
  EXPECT_EQ(r.rewrite[0].kind, RewriteStmt::Kind::kCall);
  EXPECT_EQ(r.rewrite[0].op, "fold");
  EXPECT_EQ(r.rewrite[0].args.size(), 2u);
}

// `%a, _, %c = op(...)`: one name or `_` per output of a many-output operator.
TEST(RuleParserTest, ParsesManyOutputInsert) {
  auto rules = ParseRules(
      "rule r\n  family f\n  description d\n  match\n    %y = aten::relu(%x)\n  rewrite\n"
      "    %v, _ = aten::sort(%x, 0, False)\n    _, %i = aten::sort(%x)\n"
      "    replace %y with %v\nend\n",
      "t.rules");
  ASSERT_TRUE(rules.ok()) << rules.status();
  const Rule& r = (*rules)[0];
  ASSERT_EQ(r.rewrite.size(), 3u);
  EXPECT_EQ(r.rewrite[0].kind, RewriteStmt::Kind::kInsert);
  EXPECT_EQ(r.rewrite[0].outputs, (std::vector<std::string>{"v", ""}));
  EXPECT_EQ(r.rewrite[1].outputs, (std::vector<std::string>{"", "i"}));
  EXPECT_TRUE(r.rewrite[2].outputs.empty());
}

// `each` and `constants` statements: one node per member, one constant per element.
TEST(RuleParserTest, ParsesEachAndConstants) {
  auto rules = ParseRules(
      "rule r\n  family f\n  description d\n  group\n    %y = aten::relu(%x)\n  key\n"
      "    1\n  rewrite\n    %c... = constants([0, 5])\n"
      "    %j... = each aten::add(%x..., %c..., alpha=1)\n    replace %y... with %j...\nend\n",
      "t.rules");
  ASSERT_TRUE(rules.ok()) << rules.status();
  const Rule& r = (*rules)[0];
  ASSERT_EQ(r.rewrite.size(), 3u);
  EXPECT_EQ(r.rewrite[0].kind, RewriteStmt::Kind::kConstants);
  EXPECT_EQ(r.rewrite[0].output, "c");
  ASSERT_EQ(r.rewrite[0].args.size(), 1u);
  EXPECT_EQ(r.rewrite[1].kind, RewriteStmt::Kind::kEach);
  EXPECT_EQ(r.rewrite[1].op, "aten::add");
  EXPECT_EQ(r.rewrite[1].output, "j");
  EXPECT_EQ(r.rewrite[1].args.size(), 2u);
  ASSERT_EQ(r.rewrite[1].kwargs.size(), 1u);
  EXPECT_EQ(r.rewrite[1].kwargs[0].first, "alpha");
  EXPECT_FALSE(r.any_batch_size);
  auto scan = ParseRules(
      "rule r\n  family f\n  description d\n  group\n    %y = aten::relu(%x)\n  key\n"
      "    1\n  rewrite\n    %n... = each aten::size(%x..., 0)\n"
      "    %s... = scan aten::add(%n...)\n    replace %y... with %x...\nend\n",
      "t.rules");
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_EQ((*scan)[0].rewrite[1].kind, RewriteStmt::Kind::kScan);
  EXPECT_EQ((*scan)[0].rewrite[1].op, "aten::add");
  EXPECT_EQ((*scan)[0].rewrite[1].output, "s");
  auto scan_one = ParseRules(
      "rule r\n  family f\n  description d\n  group\n    %y = aten::relu(%x)\n  key\n"
      "    1\n  rewrite\n    %s = scan aten::add(%x...)\n    replace %y... with %x...\nend\n",
      "t.rules");
  ASSERT_FALSE(scan_one.ok());
  EXPECT_NE(scan_one.status().message().find("t.rules:9:5: scan defines a sequence: write %name..."),
            std::string::npos)
      << scan_one.status();
  auto any = ParseRules(
      "rule r\n  family f\n  description d\n  any_batch_size\n  group\n    %y = aten::relu(%x)\n"
      "  key\n    1\n  rewrite\n    replace %y... with %x...\nend\n",
      "t.rules");
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_TRUE((*any)[0].any_batch_size);
  EXPECT_NE((*any)[0].normalized_text.find("any_batch_size"), std::string::npos);
}

}  // namespace
}  // namespace sentier
