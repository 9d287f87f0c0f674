// sample_inputs_test.cc — forward arguments of every structure: conformed to the schema's static
// types, doubled along the batch with EmbeddingBag offsets continued, and redrawn with the same
// structure, offsets monotone and indices within each table.
#include "passes/sample_inputs.h"

#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/torch.h>

#include "passes/module_state.h"
#include "passes/shape_facts.h"

namespace sentier {
namespace {

const c10::FunctionSchema& Schema() {
  static torch::jit::Module m = [] {
    torch::jit::Module mod("Structured");
    mod.define(R"TS(
def forward(self, xs: List[Tensor], d: Dict[str, Tensor], t: Tuple[Tensor, int], o: Optional[Tensor] = None):
    return xs[0]
)TS");
    return mod;
  }();
  return m.get_method("forward").function().getSchema();
}

c10::IValue GenericList(std::vector<c10::IValue> items) {
  c10::impl::GenericList l(c10::AnyType::get());
  for (auto& i : items) l.push_back(i);
  return l;
}

c10::IValue GenericDict(std::vector<std::pair<std::string, at::Tensor>> items) {
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  for (auto& [k, v] : items) d.insert(k, v);
  return d;
}

TEST(ConformToSchemaTest, RebuildsTypedContainersAndFillsDefaults) {
  std::vector<c10::IValue> raw = {
      GenericList({torch::ones({2, 3}), torch::zeros({2, 3})}),
      GenericDict({{"a", torch::ones({2})}}),
      c10::ivalue::Tuple::create({torch::ones({2}), c10::IValue(int64_t{3})}),
  };
  auto args = ConformToSchema(Schema(), raw);
  ASSERT_TRUE(args.ok()) << args.status();
  ASSERT_EQ(args->size(), 4u);
  EXPECT_EQ((*args)[0].toList().elementType()->kind(), c10::TypeKind::TensorType);  // not List[Any]
  EXPECT_EQ((*args)[1].toGenericDict().valueType()->kind(), c10::TypeKind::TensorType);
  EXPECT_TRUE((*args)[2].isTuple());
  EXPECT_TRUE((*args)[3].isNone());  // the default of the Optional argument
}

TEST(ConformToSchemaTest, ErrorNamesTheArgumentThatDoesNotFit) {
  std::vector<c10::IValue> raw = {GenericList({torch::ones({2}), c10::IValue(int64_t{1})}),
                                  GenericDict({}), c10::ivalue::Tuple::create({torch::ones({1}), c10::IValue(int64_t{1})})};
  auto args = ConformToSchema(Schema(), raw);
  ASSERT_FALSE(args.ok());
  EXPECT_NE(args.status().message().find("argument 'xs'[1]"), std::string::npos) << args.status();
  auto too_many = ConformToSchema(Schema(), std::vector<c10::IValue>(5, torch::ones({1})));
  EXPECT_FALSE(too_many.ok());
}

TEST(DoubleBatchTest, OffsetsContinuePastTheFirstCopyOfTheirIndices) {
  at::Tensor dense = torch::randn({3, 4});
  at::Tensor indices = torch::tensor({7, 1, 4, 2, 9}, torch::kLong);  // bags [7,1], [4], [2,9]
  at::Tensor offsets = torch::tensor({0, 2, 3}, torch::kLong);
  std::vector<c10::IValue> in = {dense, GenericList({indices}), GenericList({offsets})};
  std::vector<c10::IValue> d = DoubleBatch(in);
  EXPECT_EQ(d[0].toTensor().size(0), 6);
  at::Tensor di = d[1].toListRef()[0].toTensor();
  at::Tensor off = d[2].toListRef()[0].toTensor();
  EXPECT_TRUE(at::equal(di, torch::cat({indices, indices})));
  EXPECT_TRUE(at::equal(off, torch::tensor({0, 2, 3, 5, 7, 8}, torch::kLong)));
  // With the last offset included (include_last_offset=True): [0, 2, 3, 5] -> 7 entries.
  std::vector<c10::IValue> last = {indices, torch::tensor({0, 2, 3, 5}, torch::kLong)};
  EXPECT_TRUE(at::equal(DoubleBatch(last)[1].toTensor(),
                        torch::tensor({0, 2, 3, 5, 7, 8, 10}, torch::kLong)));
}

TEST(ShrinkBatchTest, CutsEveryBatchTensorOnlyWhereUnambiguous) {
  at::Tensor dense = torch::randn({100, 4});
  at::Tensor ids = torch::randint(0, 50, {100, 3}, torch::kLong);
  at::Tensor table = torch::randn({7, 4});  // a fixed argument: not cut
  std::vector<c10::IValue> in = {dense, GenericDict({{"ids", ids}}), table};
  auto small = ShrinkBatch(in, 16, {false, false, true});
  ASSERT_TRUE(small.has_value());
  EXPECT_TRUE(at::equal((*small)[0].toTensor(), dense.slice(0, 0, 16)));
  EXPECT_TRUE(at::equal((*small)[1].toGenericDict().at("ids").toTensor(), ids.slice(0, 0, 16)));
  EXPECT_TRUE(at::equal((*small)[2].toTensor(), table));
  // Copies: a run that mutates them leaves the samples alone.
  (*small)[0].toTensor().zero_();
  EXPECT_FALSE(at::equal(dense.slice(0, 0, 16), torch::zeros({16, 4})));

  EXPECT_FALSE(ShrinkBatch(in, 16).has_value());    // table's dim 0 (7) is not the batch
  EXPECT_FALSE(ShrinkBatch(in, 100, {false, false, true}).has_value());  // nothing to cut
  EXPECT_FALSE(ShrinkBatch({dense, torch::tensor(3.0)}, 16).has_value());  // a 0-dim tensor
  // EmbeddingBag offsets: cutting bags needs their indices cut to match; not attempted.
  at::Tensor indices = torch::randint(0, 9, {40}, torch::kLong);
  at::Tensor offsets = torch::arange(0, 40, 2, torch::kLong);
  EXPECT_FALSE(ShrinkBatch({indices, offsets}, 4).has_value());
}

TEST(ShrinkBatchTest, FactsFromTheCutBatchMatchFactsFromTheFullOne) {
  torch::jit::Module m("Towers");
  m.define(R"TS(
def forward(self, x, ids):
    parts = torch.split(x, 4, 1)
    y = torch.cat([torch.relu(p) for p in parts], 0)
    return y.view(-1, 2, 2), ids.float().sum(1)
)TS");
  auto graph = m.get_method("forward").graph();
  std::vector<c10::IValue> full = {m._ivalue(), torch::randn({200, 12}),
                                   torch::randint(0, 5, {200, 3}, torch::kLong)};
  auto small = ShrinkBatch(full, 16);
  ASSERT_TRUE(small.has_value());
  auto a = RecordShapeFacts(graph, full);
  auto b = RecordShapeFacts(graph, *small);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size());
  for (torch::jit::Node* n : graph->nodes()) {
    for (torch::jit::Value* v : n->outputs()) {
      const TensorFact* fa = a->Find(v);
      const TensorFact* fb = b->Find(v);
      ASSERT_EQ(fa == nullptr, fb == nullptr);
      if (fa == nullptr) continue;
      EXPECT_EQ(fa->dynamic, fb->dynamic) << v->debugName();
      for (size_t d = 0; d < fa->sizes.size(); ++d) {
        if (!fa->dynamic[d]) EXPECT_EQ(fa->sizes[d], fb->sizes[d]) << v->debugName() << " dim " << d;
      }
    }
  }
}

TEST(RandomInputsLikeTest, SameStructureOffsetsKeptIndicesInEachTable) {
  at::Tensor ids = torch::stack({torch::arange(0, 8) % 3, torch::arange(0, 8) % 50 + 100}, 1);  // (8, 2)
  at::Tensor indices = torch::tensor({7, 1, 4, 2, 9}, torch::kLong);
  at::Tensor offsets = torch::tensor({0, 2, 3}, torch::kLong);
  std::vector<c10::IValue> in = {torch::randn({8, 4}) * 3 + 10, ids, GenericList({indices}),
                                 GenericList({offsets})};
  at::Generator gen = at::detail::createCPUGenerator(5);
  for (int64_t scale : {1, 2}) {
    std::vector<c10::IValue> r = RandomInputsLike(in, gen, scale);
    ASSERT_EQ(r.size(), 4u);
    EXPECT_EQ(r[0].toTensor().size(0), 8 * scale);
    EXPECT_GT(r[0].toTensor().mean().item<double>(), 5.0);  // drawn from the sample's spread
    at::Tensor rid = r[1].toTensor();
    EXPECT_LE(rid.select(1, 0).max().item<int64_t>(), 2);  // column 0's table: 0..2
    EXPECT_GE(rid.select(1, 1).min().item<int64_t>(), 100);  // column 1's: 100..149
    at::Tensor ri = r[2].toListRef()[0].toTensor();
    EXPECT_GE(ri.min().item<int64_t>(), 1);
    EXPECT_LE(ri.max().item<int64_t>(), 9);
    at::Tensor ro = r[3].toListRef()[0].toTensor();
    EXPECT_TRUE(at::equal(ro, scale == 1 ? offsets : torch::tensor({0, 2, 3, 5, 7, 8}, torch::kLong)));
    EXPECT_TRUE(r[2].isList());
  }
}

// One float tensor, a column per feature: ids stored as floats in the first two columns, dense
// values in the third. The id columns are drawn whole, within their observed ranges; the dense
// column stays normal (not whole).
TEST(RandomInputsLikeTest, WholeFloatColumnsAreDrawnAsIds) {
  at::Tensor ids = torch::stack({torch::arange(0, 16) % 4, torch::arange(0, 16) % 7 + 20}, 1);
  at::Tensor x = torch::cat({ids.to(torch::kFloat), torch::randn({16, 1})}, 1);  // (16, 3)
  at::Generator gen = at::detail::createCPUGenerator(7);
  for (int64_t scale : {1, 2}) {
    at::Tensor r = RandomInputsLike({x}, gen, scale)[0].toTensor();
    ASSERT_EQ(r.size(0), 16 * scale);
    at::Tensor c0 = r.select(1, 0), c1 = r.select(1, 1), c2 = r.select(1, 2);
    EXPECT_TRUE(at::equal(c0, at::floor(c0)));
    EXPECT_GE(c0.min().item<double>(), 0.0);
    EXPECT_LE(c0.max().item<double>(), 3.0);
    EXPECT_GE(c1.min().item<double>(), 20.0);
    EXPECT_LE(c1.max().item<double>(), 26.0);
    EXPECT_FALSE(at::equal(c2, at::floor(c2)));
  }
}

TEST(FlattenTensorsTest, PathsNameEveryTensorInSortedDictOrder) {
  std::vector<c10::IValue> in = {GenericDict({{"b", torch::ones({1})}, {"a", torch::zeros({1})}}),
                                 c10::IValue()};
  NamedTensors flat = FlattenTensors(in);
  ASSERT_EQ(flat.size(), 2u);
  EXPECT_EQ(flat[0].first, "input[0][a]");
  EXPECT_EQ(flat[1].first, "input[0][b]");
}


// Runs on samples are measurements: a forward that writes to its module (in-place buffer updates
// as BatchNorm's running statistics, attribute assignments) must leave it as it was.
TEST(ModuleStateGuardTest, RunsOnSamplesLeaveBuffersAndAttributesAsTheyWere) {
  torch::jit::Module m("Counting");
  m.register_buffer("running", torch::zeros({2}));
  m.register_attribute("steps", c10::IntType::get(), 0);
  m.register_parameter("w", torch::ones({2}), /*is_buffer=*/false);
  m.define(R"TS(
def forward(self, x):
    self.running.add_(x.sum(0))
    self.steps = self.steps + 1
    return x * self.w
)TS");
  auto graph = m.get_method("forward").graph();
  std::vector<c10::IValue> samples = {m._ivalue(), torch::ones({3, 2})};
  auto facts = RecordShapeFacts(graph, samples);
  ASSERT_TRUE(facts.ok()) << facts.status();
  EXPECT_TRUE(m.attr("running").toTensor().equal(torch::zeros({2})));
  EXPECT_EQ(m.attr("steps").toInt(), 0);
  EXPECT_TRUE(m.attr("w").toTensor().equal(torch::ones({2})));

  {
    ModuleStateGuard keep(m._ivalue());
    m.forward({torch::ones({3, 2})});
    // Inside the guard the run's effects are visible (the guard does not stop them) ...
    EXPECT_TRUE(m.attr("running").toTensor().equal(torch::full({2}, 3.0)));
    EXPECT_EQ(m.attr("steps").toInt(), 1);
  }
  // ... and gone after it.
  EXPECT_TRUE(m.attr("running").toTensor().equal(torch::zeros({2})));
  EXPECT_EQ(m.attr("steps").toInt(), 0);
}

}  // namespace
}  // namespace sentier
