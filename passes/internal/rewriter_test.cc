// rewriter_test.cc — the transactional rewriter: a rewrite that inserts nodes and replaces a
// value commits (FileCheck on the result); one whose statement fails, or whose replacement has
// the wrong type, rolls back and leaves the graph exactly as it was; `each` and `constants`
// statements; `scan` (a running operator along a sequence).
#include "passes/internal/rewriter.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/testing/file_check.h>

#include "passes/internal/matcher.h"
#include "passes/internal/rule_engine_testing.h"

namespace sentier {
namespace internal {
namespace {

using test_util::CompileOne;
using test_util::ParseGraph;
using torch::jit::testing::FileCheck;

constexpr char kGraph[] = R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::relu(%x)
  %y : Tensor = aten::relu(%a)
  %z : Tensor = aten::tanh(%y)
  return (%z)
)IR";

// RuleWithRewrite: relu(relu(x)) with `rewrite` as its rewrite section.
std::string RuleWithRewrite(const std::string& rewrite) {
  return R"(rule relu_twice
  family test
  description relu(relu(x))
  match
    %a = aten::relu(%x)
    %y = aten::relu(%a)
  rewrite
)" + rewrite + "end\n";
}

// RewriteAtY: matches `rule_text` at %y of `g` and runs its rewrite.
ApplyResult RewriteAtY(const std::string& rule_text, const test_util::ParsedGraph& g,
                       std::string* error) {
  auto rule = CompileOne(rule_text);
  EXPECT_TRUE(rule.ok()) << rule.status();
  if (!rule.ok()) return ApplyResult::kError;
  Node* anchor = g.node("y");
  Bindings b;
  EXPECT_TRUE(MatchRule(**rule, anchor, &b));
  EvalContext ctx = MakeContext(**rule, anchor, nullptr, &b, nullptr);
  return Rewrite(**rule, ctx, error);
}

TEST(RewriterTest, InsertAndReplaceCommit) {
  auto g = ParseGraph(kGraph);
  std::string error;
  ApplyResult res = RewriteAtY(RuleWithRewrite("    %c = aten::clamp(%x, 0, None)\n"
                                               "    replace %y with %c\n"),
                               g, &error);
  ASSERT_EQ(res, ApplyResult::kApplied) << error;
  FileCheck()
      .check("aten::clamp(%x")
      ->check("aten::tanh(")
      ->run(*g);
  // The tanh now reads the clamp; the old relu chain has no user left.
  Node* tanh = g.node("z");
  EXPECT_EQ(tanh->input(0)->node()->kind(), c10::Symbol::fromQualString("aten::clamp"));
  EXPECT_FALSE(g.value("y")->hasUses());
}

// ExpectErrorAndRollBack: the rewrite fails with an error containing `message`, and the graph
// is exactly as it was (nodes inserted before the failure are removed again).
void ExpectErrorAndRollBack(const std::string& rewrite, const std::string& message) {
  auto g = ParseGraph(kGraph);
  const std::string before = g->toString();
  std::string error;
  ApplyResult res = RewriteAtY(RuleWithRewrite(rewrite), g, &error);
  EXPECT_EQ(res, ApplyResult::kError);
  EXPECT_NE(error.find(message), std::string::npos) << error;
  EXPECT_EQ(g->toString(), before);
}

TEST(RewriterTest, FailingStatementRollsBack) {
  ExpectErrorAndRollBack("    %c = aten::tanh(%x)\n"
                         "    %d = aten::mul(%c, 1 / 0)\n"
                         "    replace %y with %d\n",
                         "division by zero");
}

TEST(RewriterTest, ReplacementOfAnotherTypeRollsBack) {
  auto g = ParseGraph(kGraph);
  const std::string before = g->toString();
  std::string error;
  // A Tensor cannot be replaced by an int: the commit refuses, nothing changes, no error.
  ApplyResult res = RewriteAtY(RuleWithRewrite("    %n = aten::dim(%x)\n"
                                               "    replace %y with %n\n"),
                               g, &error);
  EXPECT_EQ(res, ApplyResult::kNoMatch);
  EXPECT_TRUE(error.empty()) << error;
  EXPECT_EQ(g->toString(), before);
}

// `constants` inserts one constant per element and `each` one node per member: here the
// relu chain is replaced by x + 2 + 3, the second add reading the first.
TEST(RewriterTest, EachInsertsOneNodePerElement) {
  auto g = ParseGraph(kGraph);
  std::string error;
  ApplyResult res = RewriteAtY(RuleWithRewrite("    %c... = constants([2, 3])\n"
                                               "    %j... = each aten::add(%x, %c...)\n"
                                               "    %s = aten::add(%j...[0], %j...[1])\n"
                                               "    replace %y with %s\n"),
                               g, &error);
  ASSERT_EQ(res, ApplyResult::kApplied) << error;
  FileCheck().check("prim::Constant[value=2]")->run(*g);
  FileCheck().check("prim::Constant[value=3]")->run(*g);
  FileCheck().check_count("aten::add(%x", 2, /*exactly=*/true)->check("aten::tanh(")->run(*g);
  Node* tanh = g.node("z");
  EXPECT_EQ(tanh->input(0)->node()->kind(), c10::Symbol::fromQualString("aten::add"));
}

// `scan` runs an operator along a sequence: out_0 is the first value itself and out_k =
// op(out_k-1, x_k). Over [x, x + 2, x + 3] with aten::mul that is x, x(x + 2) and
// x(x + 2)(x + 3): two products, the second reading the first.
TEST(RewriterTest, ScanChainsOneNodePerLaterElement) {
  auto g = ParseGraph(kGraph);
  std::string error;
  ApplyResult res = RewriteAtY(RuleWithRewrite("    %c... = constants([2, 3])\n"
                                               "    %j... = each aten::add(%x, %c...)\n"
                                               "    %s... = scan aten::mul([%x, %j...])\n"
                                               "    replace %y with %s...[2]\n"),
                               g, &error);
  ASSERT_EQ(res, ApplyResult::kApplied) << error;
  Node* last = g.node("z")->input(0)->node();
  ASSERT_EQ(last->kind(), c10::Symbol::fromQualString("aten::mul"));
  Node* first = last->input(0)->node();
  ASSERT_EQ(first->kind(), c10::Symbol::fromQualString("aten::mul"));
  EXPECT_EQ(first->input(0), g.value("x"));
  EXPECT_EQ(first->input(1)->node()->kind(), c10::Symbol::fromQualString("aten::add"));
  EXPECT_EQ(last->input(1)->node()->kind(), c10::Symbol::fromQualString("aten::add"));
  FileCheck().check_count("aten::mul(", 2, /*exactly=*/true)->run(*g);
}

// A scan over something that is not a value sequence is a defect of the rule: an error, and the
// graph is left as it was.
TEST(RewriterTest, ScanOverANonSequenceFailsAndRollsBack) {
  ExpectErrorAndRollBack("    %c... = constants([2, 3])\n"
                         "    %s... = scan aten::add(1)\n"
                         "    replace %y with %x\n",
                         "needs a non-empty value sequence");
}

// Sequences of different lengths in one `each` are a defect of the rule: an error, and the
// constants inserted before it are removed again.
TEST(RewriterTest, EachOfUnequalSequencesFailsAndRollsBack) {
  ExpectErrorAndRollBack("    %c... = constants([2, 3])\n"
                         "    %d... = constants([1])\n"
                         "    %j... = each aten::add(%c..., %d...)\n"
                         "    replace %y with %x\n",
                         "one non-zero length");
}

// A many-output operator binds one name per output (`_` skips one): aten::sort's values replace
// the relu chain, its indices are not used; the tuple Graph::insert packs them in is dropped.
TEST(RewriterTest, ManyOutputOperatorBindsEachOutput) {
  auto g = ParseGraph(kGraph);
  std::string error;
  ApplyResult res = RewriteAtY(RuleWithRewrite("    %v, _ = aten::sort(%x, 0, False)\n"
                                               "    replace %y with %v\n"),
                               g, &error);
  ASSERT_EQ(res, ApplyResult::kApplied) << error;
  FileCheck().check("aten::sort(%x")->check_not("prim::TupleConstruct")->check("aten::tanh(")->run(*g);
  Node* tanh = g.node("z");
  EXPECT_EQ(tanh->input(0)->node()->kind(), c10::Symbol::fromQualString("aten::sort"));
  EXPECT_EQ(tanh->input(0)->offset(), 0u);
}

// Naming more or fewer outputs than the operator has is an error, and nothing is left behind.
TEST(RewriterTest, ManyOutputCountMismatchFailsAndRollsBack) {
  ExpectErrorAndRollBack("    %v, %i, %k = aten::sort(%x, 0, False)\n"
                         "    replace %y with %v\n",
                         "aten::sort has 2 outputs; the statement names 3");
  ExpectErrorAndRollBack("    %v, %i = aten::tanh(%x)\n"
                         "    replace %y with %v\n",
                         "aten::tanh has 1 output; the statement names 2");
}

// An overload reached only by converting a tensor to a number computes something else: the
// rewrite fails and leaves nothing behind, for a one-output and a many-output operator alike.
TEST(RewriterTest, ImplicitConversionIsRefusedAndRolledBack) {
  ExpectErrorAndRollBack("    %c = aten::add(%x, %x, %x)\n"
                         "    replace %y with %c\n",
                         "aten::add matched only through an implicit aten::ScalarImplicit");
  ExpectErrorAndRollBack("    %v, _ = aten::sort(%x, %x, False)\n"
                         "    replace %y with %v\n",
                         "aten::sort matched only through an implicit aten::IntImplicit");
}

}  // namespace
}  // namespace internal
}  // namespace sentier
