// group_search_test.cc — the group search: relus on the pieces of one unbind (provably equal
// shapes) are found and batched as one group; relus on unequal sections of a split are not
// (the member that cannot be proved equal-shaped is left out, and the rest is too small a
// group), and the graph is unchanged; relus in a chain try a group only as large as their
// overlapping spans allow. FollowsBatch and ProvablySameShape (split pieces, selections) on
// their own.
#include "passes/internal/group_search.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/jit/testing/file_check.h>

#include "passes/internal/rule_engine_testing.h"

namespace sentier {
namespace internal {
namespace {

using test_util::CompileOne;
using test_util::ParseGraph;
using torch::jit::testing::FileCheck;

constexpr char kBatchRelu[] = R"(rule batch_relu
  family test
  min_group 3
  description N relus -> relu(stack) -> unbind
  group
    %y = aten::relu(%x)
  key
    len([%x])
  rewrite
    %S = aten::stack(%x..., 0)
    %R = aten::relu(%S)
    %U = aten::unbind(%R, 0)
    %o... = unpack(%U, len(%y...))
    replace %y... with %o...
end
)";

// Three relus on the pieces of `source` (an unbind or a split), concatenated.
std::string Graph(const std::string& source) {
  return R"IR(
graph(%x : Float(6, 4, strides=[4, 1], requires_grad=0, device=cpu)):
  %zero : int = prim::Constant[value=0]()
  %two : int = prim::Constant[value=2]()
  %three : int = prim::Constant[value=3]()
  %sizes : int[] = prim::ListConstruct(%two, %three, %two)
  %parts : Tensor[] = )IR" + source + R"IR(
  %a : Tensor, %b : Tensor, %c : Tensor = prim::ListUnpack(%parts)
  %ra : Tensor = aten::relu(%a)
  %rb : Tensor = aten::relu(%b)
  %rc : Tensor = aten::relu(%c)
  %l : Tensor[] = prim::ListConstruct(%ra, %rb, %rc)
  %out : Tensor = aten::cat(%l, %zero)
  return (%out)
)IR";
}

struct Reported {
  ApplyResult result;
  size_t members;
};

// RunGroups: the group search for `rule_text` over the relus of `g`; what it reported.
std::vector<Reported> RunGroups(const std::string& rule_text, const test_util::ParsedGraph& g,
                                bool* changed) {
  auto rule = CompileOne(rule_text);
  EXPECT_TRUE(rule.ok()) << rule.status();
  std::vector<Reported> reports;
  if (!rule.ok()) return reports;
  std::vector<Node*> candidates = {g.node("ra"), g.node("rb"), g.node("rc")};
  *changed = ApplyGroupRule(candidates, **rule, /*facts=*/nullptr, LegalityCheck(),
                            [&](ApplyResult res, size_t members, const std::string& error) {
                              EXPECT_TRUE(error.empty()) << error;
                              reports.push_back({res, members});
                            });
  return reports;
}

TEST(GroupSearchTest, RelusOnUnbindPiecesAreOneGroup) {
  auto g = ParseGraph(Graph("aten::unbind(%x, %zero)"));
  bool changed = false;
  std::vector<Reported> reports = RunGroups(kBatchRelu, g, &changed);
  EXPECT_TRUE(changed);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].result, ApplyResult::kApplied);
  EXPECT_EQ(reports[0].members, 3u);
  FileCheck()
      .check("aten::stack(")
      ->check("aten::relu(")
      ->check("aten::unbind(")
      ->check("prim::ListUnpack(")
      ->check("aten::cat(")
      ->run(*g);
  for (const char* name : {"ra", "rb", "rc"}) {
    EXPECT_FALSE(g.value(name)->hasUses()) << name;
  }
}

TEST(GroupSearchTest, RelusOnUnequalSplitSectionsAreNotAGroup) {
  auto g = ParseGraph(Graph("aten::split_with_sizes(%x, %sizes, %zero)"));
  const std::string before = g->toString();
  bool changed = true;
  std::vector<Reported> reports = RunGroups(kBatchRelu, g, &changed);
  EXPECT_FALSE(changed);
  // One bucket of three was tried; the section of 3 rows is left out and two are too few.
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].result, ApplyResult::kNoMatch);
  EXPECT_EQ(g->toString(), before);
}

// Relus in a chain, each reading the previous one: a member's span (from its input's definition
// to its output's first use) overlaps only its neighbours', so a group of three never fits, while
// a group of two does (and is then refused: the second member reads the first one's output).
constexpr char kChain[] = R"IR(
graph(%x : Float(6, 4, strides=[4, 1], requires_grad=0, device=cpu)):
  %ra : Tensor = aten::relu(%x)
  %rb : Tensor = aten::relu(%ra)
  %rc : Tensor = aten::relu(%rb)
  %out : Tensor = aten::neg(%rc)
  return (%out)
)IR";

TEST(GroupSearchTest, ChainedRelusTryNoGroupOfThree) {
  auto g = ParseGraph(kChain);
  const std::string before = g->toString();
  bool changed = true;
  std::vector<Reported> reports = RunGroups(kBatchRelu, g, &changed);
  EXPECT_FALSE(changed);
  EXPECT_TRUE(reports.empty());
  EXPECT_EQ(g->toString(), before);
}

TEST(GroupSearchTest, ChainedRelusTryAGroupOfTwo) {
  std::string rule = kBatchRelu;
  rule.replace(rule.find("min_group 3"), 11, "min_group 2");
  auto g = ParseGraph(kChain);
  const std::string before = g->toString();
  bool changed = true;
  std::vector<Reported> reports = RunGroups(rule, g, &changed);
  EXPECT_FALSE(changed);
  // {ra, rb} fits (rb's input is defined before ra's first use, rb itself); rc starts a group of
  // its own. The rewrite of {ra, rb} cannot place the stacked relu before rb.
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].members, 2u);
  EXPECT_NE(reports[0].result, ApplyResult::kApplied);
  EXPECT_EQ(g->toString(), before);
}

TEST(GroupSearchTest, MatchGroupMemberComputesTheKey) {
  auto rule = CompileOne(kBatchRelu);
  ASSERT_TRUE(rule.ok()) << rule.status();
  auto g = ParseGraph(Graph("aten::unbind(%x, %zero)"));
  GroupMember m;
  ASSERT_TRUE(MatchGroupMember(**rule, g.node("rb"), nullptr, &m));
  EXPECT_EQ(m.key, "1");
  EXPECT_EQ(m.bindings.values.at("x"), g.value("b"));
  EXPECT_EQ(m.first_output_use, g.node("l"));
  EXPECT_FALSE(MatchGroupMember(**rule, g.node("out"), nullptr, &m));
}

TEST(GroupSearchTest, ProvablySameShapeSeesEqualPiecesOnly) {
  auto g = ParseGraph(Graph("aten::split_with_sizes(%x, %sizes, %zero)"));
  Node* unpack = g.node("a");
  Value* a = unpack->outputs()[0];  // 2 rows
  Value* b = unpack->outputs()[1];  // 3 rows
  Value* c = unpack->outputs()[2];  // 2 rows
  EXPECT_TRUE(ProvablySameShape(a, c, nullptr));
  EXPECT_FALSE(ProvablySameShape(a, b, nullptr));
  EXPECT_TRUE(ProvablySameShape(g.value("ra"), g.value("rc"), nullptr));
  EXPECT_FALSE(ProvablySameShape(g.value("ra"), g.value("rb"), nullptr));
  // Without shape facts every computed tensor may follow the batch; constants never do.
  EXPECT_TRUE(FollowsBatch(a, nullptr));
  EXPECT_FALSE(FollowsBatch(g.value("zero"), nullptr));
}

// Selections on one dim drop that dim whatever the index: `x[:, 0]` and `x[:, 2]` are
// equal-shaped for every batch; a selection on another dim, or of another tensor, is not.
TEST(GroupSearchTest, ProvablySameShapeSeesSelectionsOnOneDim) {
  auto g = ParseGraph(R"IR(
graph(%x : Float(6, 4), %z : Float(6, 4)):
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %s0 : Tensor = aten::select(%x, %one, %zero)
  %s2 : Tensor = aten::select(%x, %one, %two)
  %r0 : Tensor = aten::select(%x, %zero, %one)
  %t0 : Tensor = aten::select(%z, %one, %zero)
  return (%s0, %s2, %r0, %t0)
)IR");
  EXPECT_TRUE(ProvablySameShape(g.value("s0"), g.value("s2"), nullptr));
  EXPECT_FALSE(ProvablySameShape(g.value("s0"), g.value("r0"), nullptr));
  EXPECT_FALSE(ProvablySameShape(g.value("s0"), g.value("t0"), nullptr));
}

// `sparse[:, i]` in a scripted loop is a select of a full slice, one slice per member: slices of
// one tensor with equal constant bounds are equal-shaped; other bounds are not.
TEST(GroupSearchTest, ProvablySameShapeSeesEqualSlices) {
  auto g = ParseGraph(R"IR(
graph(%x : Float(6, 4)):
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %end : int = prim::Constant[value=9223372036854775807]()
  %a : Tensor = aten::slice(%x, %zero, %zero, %end, %one)
  %b : Tensor = aten::slice(%x, %zero, %zero, %end, %one)
  %c : Tensor = aten::slice(%x, %zero, %two, %end, %one)
  %sa : Tensor = aten::select(%a, %one, %zero)
  %sb : Tensor = aten::select(%b, %one, %one)
  return (%sa, %sb, %c)
)IR");
  EXPECT_TRUE(ProvablySameShape(g.value("a"), g.value("b"), nullptr));
  EXPECT_TRUE(ProvablySameShape(g.value("sa"), g.value("sb"), nullptr));
  EXPECT_FALSE(ProvablySameShape(g.value("a"), g.value("c"), nullptr));
}

// `X[:, k:k+1]` for each feature column of one [B, n] tensor: slices of equal extent on a dim the
// facts show static are equal-shaped, whatever their bounds; on the batch dim, or past the dim's
// size, or of other extents, they are not.
TEST(GroupSearchTest, ProvablySameShapeSeesEqualExtentSlicesOnAStaticDim) {
  auto g = ParseGraph(R"IR(
graph(%x : Float(6, 4)):
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %three : int = prim::Constant[value=3]()
  %five : int = prim::Constant[value=5]()
  %a : Tensor = aten::slice(%x, %one, %zero, %one, %one)
  %b : Tensor = aten::slice(%x, %one, %two, %three, %one)
  %c : Tensor = aten::slice(%x, %one, %one, %three, %one)
  %r0 : Tensor = aten::slice(%x, %zero, %zero, %one, %one)
  %r1 : Tensor = aten::slice(%x, %zero, %two, %three, %one)
  %p : Tensor = aten::slice(%x, %one, %three, %five, %one)
  %q : Tensor = aten::slice(%x, %one, %zero, %two, %one)
  return (%a, %b, %c, %r0, %r1, %p, %q)
)IR");
  ShapeFacts facts;
  TensorFact f;
  f.sizes = {6, 4};
  f.dynamic = {true, false};
  f.sizes_at_double_batch = {12, 4};
  facts.Set(g.value("x"), f);
  EXPECT_TRUE(ProvablySameShape(g.value("a"), g.value("b"), &facts));
  EXPECT_FALSE(ProvablySameShape(g.value("a"), g.value("c"), &facts));    // 1 column vs 2
  EXPECT_FALSE(ProvablySameShape(g.value("r0"), g.value("r1"), &facts));  // the batch dim
  EXPECT_FALSE(ProvablySameShape(g.value("p"), g.value("q"), &facts));    // 3:5 past 4 columns
  EXPECT_FALSE(ProvablySameShape(g.value("a"), g.value("b"), nullptr));   // no facts, no proof
}

// Reads of a dict input at constant keys (a ModuleDict loop's `ids[name]`), each right before
// its member's op, can move up: they do not narrow the member's span, so the members overlap.
// A read of a dict the graph uses otherwise too (here `len`; a write would be the danger) cannot.
TEST(GroupSearchTest, ReadsOfAnInputDictAtConstantKeysCanMove) {
  auto rule = CompileOne(kBatchRelu);
  ASSERT_TRUE(rule.ok()) << rule.status();
  auto g = ParseGraph(R"IR(
graph(%d : Dict(str, Tensor), %w : Dict(str, Tensor)):
  %ka : str = prim::Constant[value="a"]()
  %kb : str = prim::Constant[value="b"]()
  %a : Tensor = aten::__getitem__(%d, %ka)
  %ra : Tensor = aten::relu(%a)
  %sa : Tensor = aten::neg(%ra)
  %b : Tensor = aten::__getitem__(%d, %kb)
  %rb : Tensor = aten::relu(%b)
  %c : Tensor = aten::__getitem__(%w, %ka)
  %rc : Tensor = aten::relu(%c)
  %n : int = aten::len(%w)
  return (%sa, %rb, %rc, %n)
)IR");
  GroupMember m;
  ASSERT_TRUE(MatchGroupMember(**rule, g.node("rb"), nullptr, &m));
  EXPECT_EQ(m.last_input_def, nullptr);  // %b can move to the block's start
  ASSERT_TRUE(MatchGroupMember(**rule, g.node("rc"), nullptr, &m));
  EXPECT_EQ(m.last_input_def, g.node("c"));  // %w has another use: its read stays
}

// Per-feature inputs (`xs[i]` of a list input) have batch sizes of their own; a cat along dim 1
// that every one reaches through ops keeping dim 0 proves them equal for every input the graph
// accepts. A cat along dim 0, a join only some reach, a path through a transpose, a list that
// is mutated before the join, a join inside a branch, or unequal other dims prove nothing.
TensorFact BatchFact(int64_t batch, int64_t width) {
  TensorFact f;
  f.sizes = {batch, width};
  f.dynamic = {true, false};
  f.sizes_at_double_batch = {2 * batch, width};
  return f;
}

TEST(GroupSearchTest, ProvablySameShapeSeesInputsJoinedOnDimZero) {
  auto g = ParseGraph(R"IR(
graph(%xs : Tensor[], %w : Float(16, 8), %flag : bool):
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %three : int = prim::Constant[value=3]()
  %four : int = prim::Constant[value=4]()
  %five : int = prim::Constant[value=5]()
  %six : int = prim::Constant[value=6]()
  %half : float = prim::Constant[value=0.5]()
  %none : NoneType = prim::Constant()
  %a : Tensor = aten::__getitem__(%xs, %zero)
  %b : Tensor = aten::__getitem__(%xs, %one)
  %c : Tensor = aten::__getitem__(%xs, %two)
  %d : Tensor = aten::__getitem__(%xs, %three)
  %e : Tensor = aten::__getitem__(%xs, %four)
  %f : Tensor = aten::__getitem__(%xs, %five)
  %h : Tensor = aten::__getitem__(%xs, %six)
  %la : Tensor = aten::linear(%a, %w, %none)
  %ra : Tensor = aten::relu(%la)
  %mb : Tensor = aten::mul(%b, %half)
  %lb : Tensor = aten::linear(%mb, %w, %none)
  %rb : Tensor = aten::tanh(%lb)
  %tc : Tensor = aten::t(%c)
  %l1 : Tensor[] = prim::ListConstruct(%ra, %rb, %tc)
  %y1 : Tensor = aten::cat(%l1, %one)
  %l0 : Tensor[] = prim::ListConstruct(%a, %d)
  %y0 : Tensor = aten::cat(%l0, %zero)
  %le : Tensor[] = prim::ListConstruct(%a, %e)
  %x : Tensor = aten::__getitem__(%le, %one)
  %ye : Tensor = aten::cat(%le, %one)
  %yf : Tensor = prim::If(%flag)
    block0():
      %lf : Tensor[] = prim::ListConstruct(%a, %f)
      %zf : Tensor = aten::cat(%lf, %one)
      -> (%zf)
    block1():
      -> (%a)
  %lh : Tensor[] = prim::ListConstruct(%a, %h)
  %yh : Tensor = aten::stack(%lh, %one)
  return (%y1, %y0, %ye, %x, %yf, %yh)
)IR");
  ShapeFacts facts;
  for (const char* v : {"a", "b", "c", "d", "e", "f", "h"}) facts.Set(g.value(v), BatchFact(4, 8));
  EXPECT_TRUE(ProvablySameShape(g.value("a"), g.value("b"), &facts));   // via linear, mul, tanh
  EXPECT_TRUE(ProvablySameShape(g.value("b"), g.value("a"), &facts));
  EXPECT_TRUE(ProvablySameShape(g.value("a"), g.value("h"), &facts));   // stack: any dim
  EXPECT_FALSE(ProvablySameShape(g.value("a"), g.value("c"), &facts));  // transposed on the way
  EXPECT_FALSE(ProvablySameShape(g.value("a"), g.value("d"), &facts));  // joined along dim 0
  EXPECT_FALSE(ProvablySameShape(g.value("a"), g.value("e"), &facts));  // list read otherwise
  EXPECT_FALSE(ProvablySameShape(g.value("a"), g.value("f"), &facts));  // join in a branch
  EXPECT_FALSE(ProvablySameShape(g.value("a"), g.value("b"), nullptr));  // no facts, no ranks
  facts.Set(g.value("b"), BatchFact(4, 6));
  EXPECT_FALSE(ProvablySameShape(g.value("a"), g.value("b"), &facts));  // other dims differ
}

// Traced code records `x * 0.5` as a mul by a one-element tensor constant: the product keeps x's
// shape, so the join still proves the inputs equal. A constant of more elements (it could
// broadcast x to another shape) proves nothing.
TEST(GroupSearchTest, AMulByAOneElementTensorConstantKeepsTheShape) {
  for (bool one_element : {true, false}) {
    auto g = ParseGraph(R"IR(
graph(%xs : Tensor[], %w : Float(16, 8)):
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %half : float = prim::Constant[value=0.5]()
  %none : NoneType = prim::Constant()
  %a : Tensor = aten::__getitem__(%xs, %zero)
  %b : Tensor = aten::__getitem__(%xs, %one)
  %la : Tensor = aten::linear(%a, %w, %none)
  %mb : Tensor = aten::mul(%b, %half)
  %lb : Tensor = aten::linear(%mb, %w, %none)
  %l1 : Tensor[] = prim::ListConstruct(%la, %lb)
  %y1 : Tensor = aten::cat(%l1, %one)
  return (%y1)
)IR");
    Node* mul = g.node("mb");
    torch::jit::Value* c = nullptr;
    {
      torch::jit::WithInsertPoint guard(mul);
      c = g->insertConstant(one_element ? at::ones({1}) : at::ones({3, 1, 8}));
    }
    mul->replaceInput(1, c);
    ShapeFacts facts;
    for (const char* v : {"a", "b"}) facts.Set(g.value(v), BatchFact(4, 8));
    EXPECT_EQ(ProvablySameShape(g.value("a"), g.value("b"), &facts), one_element);
  }
}

}  // namespace
}  // namespace internal
}  // namespace sentier
