// datum_test.cc — the values of the rule language: equality across ints and floats, printing
// (group keys compare it), conversion to IValues, and reading constants out of a graph.
#include "passes/internal/datum.h"

#include <gtest/gtest.h>

#include "passes/internal/rule_engine_testing.h"

namespace sentier {
namespace internal {
namespace {

using test_util::ParseGraph;

TEST(DatumTest, EqualComparesNumbersByValueAndListsElementwise) {
  EXPECT_TRUE(Datum::Int(2).Equal(Datum::Float(2.0)));
  EXPECT_FALSE(Datum::Int(2).Equal(Datum::Float(2.5)));
  EXPECT_FALSE(Datum::Int(1).Equal(Datum::Bool(true)));
  EXPECT_FALSE(Datum::Str("1").Equal(Datum::Int(1)));
  EXPECT_TRUE(Datum().Equal(Datum()));
  EXPECT_TRUE(Datum::List({Datum::Int(1), Datum::Int(2)})
                  .Equal(Datum::List({Datum::Int(1), Datum::Float(2.0)})));
  EXPECT_FALSE(Datum::List({Datum::Int(1)}).Equal(Datum::List({Datum::Int(1), Datum::Int(1)})));
}

TEST(DatumTest, DebugStringKeepsFullPrecision) {
  EXPECT_EQ(Datum::List({Datum::Int(3), Datum::Bool(false), Datum()}).DebugString(),
            "[3, false, None]");
  EXPECT_EQ(Datum::Str("a").DebugString(), "\"a\"");
  EXPECT_NE(Datum::Float(0.1).DebugString(), Datum::Float(0.1000000001).DebugString());
}

TEST(DatumTest, ToIValueBuildsTypedListsAndRejectsMixedOnes) {
  absl::StatusOr<c10::IValue> ints = Datum::List({Datum::Int(1), Datum::Int(2)}).ToIValue();
  ASSERT_TRUE(ints.ok()) << ints.status();
  ASSERT_TRUE(ints->isIntList());
  EXPECT_EQ(ints->toIntVector(), (std::vector<int64_t>{1, 2}));
  absl::StatusOr<c10::IValue> floats = Datum::List({Datum::Int(1), Datum::Float(0.5)}).ToIValue();
  ASSERT_TRUE(floats.ok()) << floats.status();
  EXPECT_TRUE(floats->isDoubleList());
  EXPECT_FALSE(Datum::List({Datum::Int(1), Datum::Str("x")}).ToIValue().ok());
  EXPECT_FALSE(Datum::Val(nullptr).ToIValue().ok());
}

TEST(DatumTest, FromConstantReadsConstantsAndListLiteralsOnly) {
  auto g = ParseGraph(R"IR(
graph(%x : Tensor):
  %three : int = prim::Constant[value=3]()
  %half : float = prim::Constant[value=0.5]()
  %sizes : int[] = prim::ListConstruct(%three, %three)
  %mixed : Tensor[] = prim::ListConstruct(%x, %x)
  %y : Tensor = aten::mul(%x, %half)
  return (%y, %sizes, %mixed)
)IR");
  c10::optional<Datum> three = DatumFromConstant(g.value("three"));
  ASSERT_TRUE(three.has_value());
  EXPECT_EQ(three->kind, Datum::Kind::kInt);
  EXPECT_EQ(three->i, 3);
  EXPECT_EQ(three->value, g.value("three"));
  c10::optional<Datum> half = DatumFromConstant(g.value("half"));
  ASSERT_TRUE(half.has_value());
  EXPECT_EQ(half->kind, Datum::Kind::kFloat);
  c10::optional<Datum> sizes = DatumFromConstant(g.value("sizes"));
  ASSERT_TRUE(sizes.has_value());
  EXPECT_TRUE(sizes->Equal(Datum::List({Datum::Int(3), Datum::Int(3)})));
  EXPECT_FALSE(DatumFromConstant(g.value("mixed")).has_value());
  EXPECT_FALSE(DatumFromConstant(g.value("y")).has_value());
  EXPECT_FALSE(DatumFromConstant(g->inputs()[0]).has_value());
}

}  // namespace
}  // namespace internal
}  // namespace sentier
