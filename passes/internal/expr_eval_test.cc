// expr_eval_test.cc — expression evaluation over Datum values: arithmetic (floor division as in
// TorchScript), comparisons, short-circuit logic, lists, indexing, captures and function calls;
// errors name the expression's location; `where` lines hold only when every one is true.
#include "passes/internal/expr_eval.h"

#include <gtest/gtest.h>

#include "passes/internal/rule_engine_testing.h"
#include "passes/rule_parser.h"

namespace sentier {
namespace internal {
namespace {

// EvalIn: a `where`-line expression, as if on line `line` of expr.rules, evaluated in `ctx`.
absl::StatusOr<Datum> EvalIn(const std::string& text, EvalContext& ctx, int line = 1) {
  absl::StatusOr<ExprPtr> e = ParseExpression(text, "expr.rules", line);
  if (!e.ok()) return e.status();
  return Eval(**e, ctx);
}

using test_util::ParseGraph;

class ExprEvalTest : public ::testing::Test {
 protected:
  ExprEvalTest() {
    graph_ = ParseGraph(R"IR(
graph(%x : Tensor, %z : Tensor):
  return (%x)
)IR");
    bindings_.consts["k"] = Datum::Int(4);
    bindings_.consts["ks"] = Datum::List({Datum::Int(5), Datum::Int(6)});
    bindings_.values["x"] = graph_->inputs()[0];
    bindings_.seqs["xs"] = {graph_->inputs()[0], graph_->inputs()[1]};
    ctx_.graph = graph_.graph.get();
    ctx_.bindings = &bindings_;
  }

  absl::StatusOr<Datum> EvalText(const std::string& text) { return EvalIn(text, ctx_, 7); }

  test_util::ParsedGraph graph_;
  Bindings bindings_;
  EvalContext ctx_;
};

TEST_F(ExprEvalTest, Arithmetic) {
  auto sum = EvalText("1 + 2 * 3");
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_TRUE(sum->Equal(Datum::Int(7)));
  EXPECT_EQ(sum->kind, Datum::Kind::kInt);
  auto floor = EvalText("7 / -2");
  ASSERT_TRUE(floor.ok()) << floor.status();
  EXPECT_EQ(floor->i, -4);  // floor division, as in TorchScript
  auto mod = EvalText("(0 - 7) % 3");
  ASSERT_TRUE(mod.ok()) << mod.status();
  EXPECT_EQ(mod->i, 2);
  auto mixed = EvalText("1 + 0.5");
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_EQ(mixed->kind, Datum::Kind::kFloat);
  EXPECT_DOUBLE_EQ(mixed->f, 1.5);
}

TEST_F(ExprEvalTest, CapturesListsIndexingAndFunctions) {
  auto k = EvalText("$k * 2 >= 8 and not ($k == 5)");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_TRUE(k->Equal(Datum::Bool(true)));
  auto last = EvalText("$ks[-1]");
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->i, 6);
  auto joined = EvalText("[1] + $ks");
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_TRUE(joined->Equal(Datum::List({Datum::Int(1), Datum::Int(5), Datum::Int(6)})));
  auto values = EvalText("[%x, %xs...]");
  ASSERT_TRUE(values.ok()) << values.status();
  ASSERT_EQ(values->kind, Datum::Kind::kValueSeq);
  EXPECT_EQ(values->values.size(), 3u);
  auto second = EvalText("%xs...[1]");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->value, graph_->inputs()[1]);
  auto layout = EvalText("param_layout()");
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->s, "original");
  ctx_.env.stacked_parameters = true;
  EXPECT_EQ(EvalText("param_layout() == \"stacked\"")->b, true);
  EXPECT_EQ(EvalText("storable_parameters(%xs...)")->b, false);  // no predicate: none is
  ctx_.env.storable_parameter = [this](const torch::jit::Value* v) { return v == graph_->inputs()[1]; };
  EXPECT_EQ(EvalText("storable_parameters([%xs...[1]])")->b, true);
  EXPECT_EQ(EvalText("storable_parameters(%xs...)")->b, false);  // every value must be
  ctx_.env.stacked_parameters = false;
  EXPECT_EQ(EvalText("storable_parameters([%xs...[1]])")->b, false);  // the original layout
  ctx_.env.storable_parameter = nullptr;
  auto offsets = EvalText("offsets([5, 7, 6])");
  ASSERT_TRUE(offsets.ok()) << offsets.status();
  EXPECT_TRUE(offsets->Equal(Datum::List({Datum::Int(0), Datum::Int(5), Datum::Int(12)})));
  auto len = EvalText("len(%xs...) + len($ks)");
  ASSERT_TRUE(len.ok()) << len.status();
  EXPECT_EQ(len->i, 4);
}

// kind() names the producing node (here a graph input's param node); index() finds an element.
TEST_F(ExprEvalTest, KindAndIndex) {
  auto kind = EvalText("kind(%x)");
  ASSERT_TRUE(kind.ok()) << kind.status();
  EXPECT_EQ(kind->s, "prim::Param");
  auto at = EvalText("index([\"aten::sum\", \"aten::mean\"], \"aten::mean\")");
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_EQ(at->i, 1);
  EXPECT_EQ(EvalText("index($ks, 6)")->i, 1);
  auto missing = EvalText("index($ks, 7)");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("no element is equal"), std::string::npos)
      << missing.status();
}

// unused() holds for values without a use by a live node: a value returned is used; one read
// only by a node whose own output goes nowhere (dead, swept between rounds) is not.
TEST(ExprEvalUnusedTest, CountsOnlyLiveUsers) {
  test_util::ParsedGraph g = ParseGraph(R"IR(
graph(%x : Tensor, %z : Tensor, %u : Tensor):
  %d : Tensor = aten::relu(%z)
  return (%x)
)IR");
  Bindings b;
  b.values["x"] = g->inputs()[0];
  b.values["z"] = g->inputs()[1];
  b.values["u"] = g->inputs()[2];
  b.seqs["zu"] = {g->inputs()[1], g->inputs()[2]};
  b.seqs["xu"] = {g->inputs()[0], g->inputs()[2]};
  EvalContext ctx;
  ctx.graph = g.graph.get();
  ctx.bindings = &b;
  auto eval = [&](const std::string& text) {
    absl::StatusOr<Datum> d = EvalIn(text, ctx);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() && d->kind == Datum::Kind::kBool && d->b;
  };
  EXPECT_FALSE(eval("unused(%x)"));
  EXPECT_TRUE(eval("unused(%u)"));
  EXPECT_TRUE(eval("unused(%z)"));  // its one user, relu, is dead
  EXPECT_TRUE(eval("unused(%zu...)"));
  EXPECT_FALSE(eval("unused(%xu...)"));
  EXPECT_FALSE(eval("single_use(%z)"));
}

// The functions a rule over a sum of terms uses: addends() walks the single-use tensor adds of
// the sum's block to its terms, in order; an add whose result is read twice is a term itself.
// inputs_of() and producers_are() read the terms' nodes, all_tensors() and dtypes() their
// inputs, may_rewrite() asks the legality check the driver hands the context.
TEST(ExprEvalSumTest, AddendsAndTheirProducers) {
  test_util::ParsedGraph g = ParseGraph(R"IR(
graph(%x0 : Float(2, 3), %x1 : Float(2, 3), %x2 : Float(2, 3), %w : Float(4, 3), %b : Float(4)):
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %none : NoneType = prim::Constant()
  %l0 : Tensor = aten::linear(%x0, %w, %b)
  %l1 : Tensor = aten::linear(%x1, %w, %b)
  %l2 : Tensor = aten::linear(%x2, %w, %none)
  %s1 : Tensor = aten::add(%l0, %l1, %one)
  %s2 : Tensor = aten::add(%s1, %l2, %one)
  %t : Tensor = aten::relu(%s1)
  %u : Tensor = aten::add(%l0, %l1, %two)
  return (%s2, %t, %u)
)IR");
  Bindings b;
  b.values["s2"] = g.value("s2");
  b.values["s1"] = g.value("s1");
  b.values["u"] = g.value("u");
  EvalContext ctx;
  ctx.graph = g.graph.get();
  ctx.bindings = &b;
  auto eval = [&](const std::string& text) { return EvalIn(text, ctx); };
  // %s1 is also read by the relu: a term of %s2, not expanded.
  auto terms = eval("addends(%s2)");
  ASSERT_TRUE(terms.ok()) << terms.status();
  ASSERT_EQ(terms->kind, Datum::Kind::kValueSeq);
  EXPECT_EQ(terms->values, (std::vector<Value*>{g.value("s1"), g.value("l2")}));
  auto inner = eval("addends(%s1)");
  ASSERT_TRUE(inner.ok()) << inner.status();
  EXPECT_EQ(inner->values, (std::vector<Value*>{g.value("l0"), g.value("l1")}));
  EXPECT_FALSE(eval("addends(%u)").ok()) << "alpha 2 is not a sum";
  EXPECT_TRUE(eval("producers_are(addends(%s1), \"aten::linear\")")->b);
  EXPECT_FALSE(eval("producers_are(addends(%s2), \"aten::linear\")")->b);
  auto xs = eval("inputs_of(addends(%s1), 0)");
  ASSERT_TRUE(xs.ok()) << xs.status();
  EXPECT_EQ(xs->values, (std::vector<Value*>{g.value("x0"), g.value("x1")}));
  EXPECT_FALSE(eval("inputs_of(addends(%s1), 3)").ok());
  EXPECT_TRUE(eval("all_tensors(inputs_of(addends(%s1), 2))")->b);
  b.seqs["ls"] = {g.value("l0"), g.value("l2")};
  EXPECT_FALSE(eval("all_tensors(inputs_of(%ls..., 2))")->b);
  auto dtypes = eval("dtypes(inputs_of(addends(%s1), 1))");
  ASSERT_TRUE(dtypes.ok()) << dtypes.status();
  EXPECT_TRUE(dtypes->Equal(Datum::List({Datum::Str("Float"), Datum::Str("Float")})));
  EXPECT_TRUE(eval("may_rewrite(addends(%s1))")->b) << "no legality check given";
  std::vector<Node*> asked;
  ctx.legal = [&](const std::vector<Node*>& nodes) {
    asked = nodes;
    return false;
  };
  EXPECT_FALSE(eval("may_rewrite(addends(%s1))")->b);
  EXPECT_EQ(asked, (std::vector<Node*>{g.node("l0"), g.node("l1")}));
  EXPECT_FALSE(eval("may_rewrite(inputs_of(addends(%s1), 0))")->b) << "graph inputs have no node to rewrite";
  b.values["two"] = g.value("two");
  EXPECT_EQ(eval("number(%two)")->i, 2);
  EXPECT_FALSE(eval("number(%s1)").ok()) << "not a constant";
}

TEST_F(ExprEvalTest, ErrorsNameTheExpression) {
  auto zero = EvalText("1 / 0");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("expr.rules:7:"), std::string::npos) << zero.status();
  EXPECT_NE(zero.status().message().find("division by zero"), std::string::npos);
  auto unbound = EvalText("$nope + 1");
  ASSERT_FALSE(unbound.ok());
  EXPECT_NE(unbound.status().message().find("$nope is not bound"), std::string::npos);
  auto range = EvalText("$ks[2]");
  ASSERT_FALSE(range.ok());
  EXPECT_NE(range.status().message().find("index out of range"), std::string::npos);
  EXPECT_FALSE(EvalText("1 and true").ok());
  // `or` does not evaluate its right side once the left one holds.
  auto shortcut = EvalText("true or (1 / 0 == 1)");
  ASSERT_TRUE(shortcut.ok()) << shortcut.status();
  EXPECT_TRUE(shortcut->b);
}

std::vector<ExprPtr> ParseAll(const std::vector<std::string>& texts) {
  std::vector<ExprPtr> out;
  for (const std::string& t : texts) out.push_back(*ParseExpression(t, "expr.rules", 1));
  return out;
}

TEST_F(ExprEvalTest, EvalAllKeepsOrderAndStopsAtAnError) {
  auto both = EvalAll(ParseAll({"$k", "$k + 1"}), ctx_);
  ASSERT_TRUE(both.ok()) << both.status();
  ASSERT_EQ(both->size(), 2u);
  EXPECT_EQ((*both)[0].i, 4);
  EXPECT_EQ((*both)[1].i, 5);
  auto failed = EvalAll(ParseAll({"$k", "$nope"}), ctx_);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("$nope is not bound"), std::string::npos);
}

TEST_F(ExprEvalTest, ConstraintsHoldOnlyWhenAllAreTrue) {
  EXPECT_TRUE(ConstraintsHold(ParseAll({"$k == 4", "len(%xs...) == 2"}), ctx_));
  EXPECT_TRUE(ConstraintsHold({}, ctx_));
  EXPECT_FALSE(ConstraintsHold(ParseAll({"$k == 4", "$k > 4"}), ctx_));
  EXPECT_FALSE(ConstraintsHold(ParseAll({"$k + 1"}), ctx_));     // not a boolean
  EXPECT_FALSE(ConstraintsHold(ParseAll({"$nope == 1"}), ctx_));  // cannot be evaluated
}

}  // namespace
}  // namespace internal
}  // namespace sentier
