// matcher_test.cc — the matcher on small parsed graphs: a pattern binds values and constants
// walking back from the anchor; a near miss (another operator, another literal, the wrong
// anchor) does not match; a foreach block binds per-element names as sequences.
#include "passes/internal/matcher.h"

#include <gtest/gtest.h>

#include "passes/internal/rule_engine_testing.h"

namespace sentier {
namespace internal {
namespace {

using test_util::CompileOne;
using test_util::ParseGraph;

constexpr char kRule[] = R"(rule add_then_relu
  family test
  description relu(add(a, b, 1))
  match
    %s = aten::add(%a, %b, 1)
    %y = aten::relu(%s)
  rewrite
    replace %y with %s
end
)";

constexpr char kGraph[] = R"IR(
graph(%x : Tensor, %z : Tensor):
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %s : Tensor = aten::add(%x, %z, %one)
  %y : Tensor = aten::relu(%s)
  %d : Tensor = aten::sub(%x, %z, %one)
  %e : Tensor = aten::relu(%d)
  %f : Tensor = aten::add(%x, %z, %two)
  %g : Tensor = aten::relu(%f)
  return (%y, %e, %g)
)IR";

TEST(MatcherTest, BindsThePatternAroundTheAnchor) {
  auto rule = CompileOne(kRule);
  ASSERT_TRUE(rule.ok()) << rule.status();
  auto g = ParseGraph(kGraph);
  Bindings b;
  ASSERT_TRUE(MatchRule(**rule, g.node("y"), &b));
  EXPECT_EQ(b.values.at("a"), g->inputs()[0]);
  EXPECT_EQ(b.values.at("b"), g->inputs()[1]);
  EXPECT_EQ(b.values.at("s"), g.value("s"));
  EXPECT_EQ(b.values.at("y"), g.value("y"));
  ASSERT_EQ(b.matched_order.size(), 2u);
  EXPECT_EQ(b.matched_order[0], g.node("y"));  // the anchor first, then backwards
  EXPECT_EQ(b.matched_order[1], g.node("s"));
  EXPECT_EQ(b.matched.at(g.node("s")), 0);
}

TEST(MatcherTest, NearMissesDoNotMatch) {
  auto rule = CompileOne(kRule);
  ASSERT_TRUE(rule.ok()) << rule.status();
  auto g = ParseGraph(kGraph);
  Bindings sub, literal, anchor;
  EXPECT_FALSE(MatchRule(**rule, g.node("e"), &sub));      // aten::sub, not aten::add
  EXPECT_FALSE(MatchRule(**rule, g.node("g"), &literal));  // alpha 2, not the literal 1
  EXPECT_FALSE(MatchRule(**rule, g.node("s"), &anchor));   // add is not an anchor kind
}

// cat(split(x)'s pieces, all of them in order, on the split's dim) == x.
constexpr char kSplitCatRule[] = R"(rule split_cat
  family test
  description cat of all pieces of one split, on the split's dim
  match
    %parts = aten::split(%x, $n, $d)
    %p... = prim::ListUnpack(%parts)
    %l = prim::ListConstruct(%p...)
    %y = aten::cat(%l, $d)
  rewrite
    replace %y with %x
end
)";

TEST(MatcherTest, ConstantCaptureMustAgreeWhereverItIsUsed) {
  auto rule = CompileOne(kSplitCatRule);
  ASSERT_TRUE(rule.ok()) << rule.status();
  auto g = ParseGraph(R"IR(
graph(%x : Tensor):
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %parts : Tensor[] = aten::split(%x, %two, %one)
  %a : Tensor, %b : Tensor = prim::ListUnpack(%parts)
  %l : Tensor[] = prim::ListConstruct(%a, %b)
  %y : Tensor = aten::cat(%l, %one)
  %m : Tensor[] = prim::ListConstruct(%a, %b)
  %w : Tensor = aten::cat(%m, %zero)
  return (%y, %w)
)IR");
  Bindings same, other;
  ASSERT_TRUE(MatchRule(**rule, g.node("y"), &same));
  EXPECT_TRUE(same.consts.at("d").Equal(Datum::Int(1)));
  ASSERT_EQ(same.seqs.at("p").size(), 2u);
  EXPECT_FALSE(MatchRule(**rule, g.node("w"), &other));  // cat on dim 0, split on dim 1
}

// Shapes that fail on node kinds and counts alone (what MatchRule checks before it binds
// anything): a sequence that is not all of its producer's outputs in order, a producer of
// another kind, an input count the line does not take.
TEST(MatcherTest, ShapeMismatchesDoNotMatch) {
  auto rule = CompileOne(kSplitCatRule);
  ASSERT_TRUE(rule.ok()) << rule.status();
  auto g = ParseGraph(R"IR(
graph(%x : Tensor, %z : Tensor):
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %parts : Tensor[] = aten::split(%x, %two, %one)
  %a : Tensor, %b : Tensor = prim::ListUnpack(%parts)
  %l : Tensor[] = prim::ListConstruct(%a, %b)
  %y : Tensor = aten::cat(%l, %one)
  %l1 : Tensor[] = prim::ListConstruct(%a)
  %y1 : Tensor = aten::cat(%l1, %one)
  %lr : Tensor[] = prim::ListConstruct(%b, %a)
  %yr : Tensor = aten::cat(%lr, %one)
  %lz : Tensor[] = prim::ListConstruct(%x, %z)
  %yz : Tensor = aten::cat(%lz, %one)
  %pieces : Tensor[] = aten::chunk(%x, %two, %one)
  %c : Tensor, %d : Tensor = prim::ListUnpack(%pieces)
  %lc : Tensor[] = prim::ListConstruct(%c, %d)
  %yc : Tensor = aten::cat(%lc, %one)
  %le : Tensor[] = prim::ListConstruct()
  %ye : Tensor = aten::cat(%le, %one)
  return (%y, %y1, %yr, %yz, %yc, %ye)
)IR");
  Bindings all, part, reversed, unsplit, chunk, empty;
  EXPECT_TRUE(MatchRule(**rule, g.node("y"), &all));
  EXPECT_FALSE(MatchRule(**rule, g.node("y1"), &part));        // one of the two pieces
  EXPECT_FALSE(MatchRule(**rule, g.node("yr"), &reversed));    // the pieces out of order
  EXPECT_FALSE(MatchRule(**rule, g.node("yz"), &unsplit));     // no ListUnpack behind the list
  EXPECT_FALSE(MatchRule(**rule, g.node("yc"), &chunk));       // aten::chunk, not aten::split
  EXPECT_FALSE(MatchRule(**rule, g.node("ye"), &empty));       // an empty sequence
  EXPECT_TRUE(part.matched_order.empty());  // refused before anything was bound
}

}  // namespace
}  // namespace internal
}  // namespace sentier
