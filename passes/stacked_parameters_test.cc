// stacked_parameters_test.cc — batched parameters stored batched, on the Python-authored towers
// model (testdata/models, scripted and traced): the stacks leave the graph, the member modules
// leave the module, the artifact computes what the original computes (outputs and every
// original parameter's gradient, through the layout), checkpoints are interchangeable both ways
// and strict, and training with element-wise optimizers (SGD with momentum and weight decay,
// Adam, AdamW) gives the original model's parameters, compared through original_state_dict().
#include "passes/stacked_parameters.h"

#include <cstdlib>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/testing/file_check.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "passes/member_gradient_layout.h"
#include "passes/optimizer.h"
#include "runtime/equivalence_checker.h"
#include "runtime/model_io.h"
#include "runtime/torch_settings.h"

namespace sentier {
namespace {

const bool kTorchSettings = (ApplyTorchSettings(), true);

std::string Corpus(const std::string& rel) {
  const char* src = std::getenv("TEST_SRCDIR");
  return absl::StrCat(src ? src : ".", src ? "/sentier/" : "", "testdata/models/torch1.13/", rel);
}

std::string Tmp(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return absl::StrCat(t ? t : "/tmp", "/", name);
}

// OptionsWithSamples: optimizer options whose shape facts come from running `self` on `inputs`;
// `samples` (self, then the inputs) must outlive the options.
OptimizeOptions OptionsWithSamples(const c10::IValue& self, const std::vector<c10::IValue>& inputs, bool stacked,
                                   std::vector<c10::IValue>* samples) {
  *samples = {self};
  samples->insert(samples->end(), inputs.begin(), inputs.end());
  OptimizeOptions opts;
  opts.self = self;
  opts.sample_inputs = samples;
  opts.stacked_parameters = stacked;
  return opts;
}

struct Stacked {
  std::string path;
  ParamLayout layout;
  std::vector<c10::IValue> inputs;
  PassCounters counters;  // the optimizer's per-pass counters
};

// Optimizes a corpus archive (towers by default; stacked parameters, or the original layout) and
// saves it.
Stacked MakeStacked(const std::string& kind, bool stacked = true, const std::string& corpus_model = "towers") {
  Stacked s;
  auto model = LoadModel(Corpus(corpus_model + "/" + kind + ".pt"));
  EXPECT_TRUE(model.ok()) << model.status();
  auto inputs = LoadSampleInputsFor(Corpus(corpus_model + "/inputs.pt"), model->module);
  EXPECT_TRUE(inputs.ok()) << inputs.status();
  s.inputs = *inputs;
  auto rules = LoadRules({DefaultRulesDir()});
  EXPECT_TRUE(rules.ok()) << rules.status();
  std::vector<c10::IValue> samples;
  OptimizeOptions opts = OptionsWithSamples(model->module._ivalue(), s.inputs, stacked, &samples);
  auto report = OptimizeGraph(model->graph, **rules, opts);
  EXPECT_TRUE(report.ok()) << report.status();
  if (!report.ok()) return s;
  s.layout = report->param_layout;
  s.counters = report->canonicalize;
  s.path = Tmp(corpus_model + "." + kind + (stacked ? ".stacked.pt" : ".original_layout.pt"));
  EXPECT_TRUE(SaveModel(*model, s.path).ok());
  return s;
}

class StackedParametersTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StackedParametersTest, StacksLeaveTheGraphAndTheArtifactIsEquivalent) {
  Stacked s = MakeStacked(GetParam());
  ASSERT_FALSE(s.path.empty());
  // Six stored parameters (two linears' weights and biases, the layer_norms' affine), 64 members each.
  ASSERT_EQ(s.layout.stacked.size(), 6u);
  for (const StackedParameter& p : s.layout.stacked) EXPECT_EQ(p.members.size(), 64u) << p.name;
  EXPECT_EQ(s.layout.stacked[0].name, "l1.stacked_weight");
  EXPECT_EQ(s.layout.stacked[0].members[3], "l1.3.weight");
  torch::jit::Module artifact = torch::jit::load(s.path);
  torch::jit::Module original = torch::jit::load(Corpus("towers/" + GetParam() + ".pt"));
  int64_t params = 0;
  for (const auto& p : artifact.named_parameters()) {
    (void)p;
    ++params;
  }
  EXPECT_EQ(params, 6);  // 384 before
  // No stack of parameters is left in the forward.
  for (const torch::jit::Node* n : artifact.get_method("forward").graph()->nodes()) {
    if (n->kind() != c10::aten::stack) continue;
    for (const torch::jit::Value* v : n->input(0)->node()->inputs()) {
      EXPECT_NE(v->node()->kind(), c10::prim::GetAttr) << "a stack of parameters remains";
    }
  }
  auto layout = ReadParamLayout(artifact);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->ToJson(), s.layout.ToJson());
  CheckOptions check;
  check.trials = 2;
  auto r = EquivalenceChecker(check).Check(original, artifact, s.inputs);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->equivalent) << r->first_failure;
  int64_t param_grads = 0;
  for (const CheckFinding& f : r->findings) param_grads += f.trial == "samples" && f.what.rfind("grad of param l1.", 0) == 0;
  EXPECT_EQ(param_grads, 128);  // l1.<i>.weight and .bias, by their original names
}

TEST_P(StackedParametersTest, CheckpointsAreInterchangeableAndStrict) {
  Stacked s = MakeStacked(GetParam());
  ASSERT_FALSE(s.path.empty());
  torch::jit::Module artifact = torch::jit::load(s.path);
  torch::jit::Module original = torch::jit::load(Corpus("towers/" + GetParam() + ".pt"));
  c10::Dict<std::string, at::Tensor> want;
  for (const auto& p : original.named_parameters()) want.insert(p.name, p.value);
  for (const auto& b : original.named_buffers()) want.insert(b.name, b.value);
  auto got = artifact.run_method("original_state_dict").toGenericDict();
  ASSERT_EQ(got.size(), want.size());
  for (const auto& kv : want) {
    ASSERT_TRUE(got.contains(kv.key())) << kv.key();
    EXPECT_TRUE(at::equal(got.at(kv.key()).toTensor(), kv.value())) << kv.key();
  }
  // Loading a changed checkpoint moves the stored parameters, and the views follow them.
  c10::Dict<std::string, at::Tensor> changed;
  for (const auto& kv : want) changed.insert(kv.key(), kv.value() + 1.0);
  artifact.run_method("load_original_state_dict", changed);
  auto after = artifact.run_method("original_state_dict").toGenericDict();
  EXPECT_TRUE(at::equal(after.at("l1.5.weight").toTensor(), want.at("l1.5.weight") + 1.0));
  EXPECT_TRUE(at::equal(artifact.attr("l1").toModule().attr("stacked_weight").toTensor()[5],
                        want.at("l1.5.weight") + 1.0));
  // Strict: a missing key, a wrong shape and an unexpected key are errors naming the key.
  auto expect_error = [&](c10::Dict<std::string, at::Tensor> sd, const std::string& needle) {
    try {
      artifact.run_method("load_original_state_dict", sd);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  c10::Dict<std::string, at::Tensor> missing = want.copy();
  missing.erase("l2.7.bias");
  expect_error(missing, "missing key l2.7.bias");
  c10::Dict<std::string, at::Tensor> shape = want.copy();
  shape.insert_or_assign("ln.1.weight", at::zeros({3}));
  expect_error(shape, "key ln.1.weight has the wrong shape");
  c10::Dict<std::string, at::Tensor> extra = want.copy();
  extra.insert("l9.0.weight", at::zeros({1}));
  expect_error(extra, "unexpected key l9.0.weight");
}

// Trains the original and the artifact from the same state with the same optimizer; every
// original parameter must end where the original's did.
void TrainAndCompare(const Stacked& s, const std::string& kind,
                     const std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)>& make,
                     const std::string& what, const std::string& corpus_model = "towers") {
  torch::jit::Module original = torch::jit::load(Corpus(corpus_model + "/" + kind + ".pt"));
  torch::jit::Module artifact = torch::jit::load(s.path);
  auto params = [](torch::jit::Module& m) {
    std::vector<at::Tensor> out;
    for (at::Tensor p : m.parameters()) {
      p.requires_grad_(true);
      out.push_back(p);
    }
    return out;
  };
  auto opt_o = make(params(original));
  auto opt_a = make(params(artifact));
  for (int step = 0; step < 5; ++step) {
    for (auto [m, opt] : {std::make_pair(&original, opt_o.get()), std::make_pair(&artifact, opt_a.get())}) {
      opt->zero_grad();
      at::Tensor out = m->forward(s.inputs).toTensor();
      (out * out).mean().backward();
      opt->step();
    }
  }
  auto got = artifact.run_method("original_state_dict").toGenericDict();
  double worst = 0.0;
  for (const auto& p : original.named_parameters()) {
    at::Tensor a = got.at(p.name).toTensor();
    worst = std::max(worst, (a - p.value).abs().max().item<double>());
  }
  EXPECT_LT(worst, 1e-5) << what;
}

TEST_P(StackedParametersTest, ElementWiseOptimizersTrainTheSameParameters) {
  Stacked s = MakeStacked(GetParam());
  ASSERT_FALSE(s.path.empty());
  TrainAndCompare(s, GetParam(), [](std::vector<at::Tensor> p) {
    return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
  }, "SGD, momentum 0.9, weight decay 1e-3");
  TrainAndCompare(s, GetParam(), [](std::vector<at::Tensor> p) {
    return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(0.01));
  }, "Adam");
  TrainAndCompare(s, GetParam(), [](std::vector<at::Tensor> p) {
    return std::make_unique<torch::optim::AdamW>(p, torch::optim::AdamWOptions(0.01).weight_decay(0.01));
  }, "AdamW");
}

int64_t CountKind(const torch::jit::Module& m, const char* kind) {
  int64_t n = 0;
  for (const torch::jit::Node* node : m.get_method("forward").graph()->nodes()) {
    n += node->kind() == c10::Symbol::fromQualString(kind);
  }
  return n;
}

// Two experts' BatchNorms in training mode on the two halves of one input (a batched layer's
// pieces): batched_batch_norms makes them one batch norm. In the original layout the joined
// running statistics are copied back into each member's buffers (2 x 2 copies) and the step
// counters keep their own adds; in the stacked layout the statistics and the counters are stored
// joined (three buffers), the copies back go, and every buffer still compares equal to the
// original's under its original name.
torch::jit::Module TwoTrainingBatchNorms() {
  auto norm = [](const std::string& name) {
    torch::jit::Module m(name);
    m.register_parameter("weight", torch::rand({3}) + 0.5, false);
    m.register_parameter("bias", torch::randn({3}), false);
    m.register_buffer("running_mean", torch::randn({3}));
    m.register_buffer("running_var", torch::rand({3}) + 0.5);
    m.register_buffer("num_batches_tracked", torch::tensor(int64_t{5}));
    m.define(R"(
      def forward(self, x):
          self.num_batches_tracked.add_(1)
          return torch.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var,
                                  True, 0.1, 1e-5, False)
    )");
    return m;
  };
  torch::jit::Module root("Experts");
  root.register_module("n0", norm("Norm0"));
  root.register_module("n1", norm("Norm1"));
  root.define(R"(
    def forward(self, x):
        a, b = torch.split(x, [3, 3], 1)
        return torch.relu(torch.cat([self.n0.forward(a), self.n1.forward(b)], 1))
  )");
  return root;
}

TEST(BatchedBatchNormsTest, JoinedStatisticsAreCopiedBackOrStoredJoined) {
  auto rules = LoadRules({DefaultRulesDir()});
  ASSERT_TRUE(rules.ok()) << rules.status();
  torch::manual_seed(3);
  const torch::jit::Module original = TwoTrainingBatchNorms();
  std::vector<c10::IValue> inputs = {torch::randn({8, 6})};
  for (bool stacked : {false, true}) {
    SCOPED_TRACE(stacked ? "stacked" : "original");
    const std::string source = Tmp("two_batch_norms.pt");
    original.save(source);
    auto model = LoadModel(source);
    ASSERT_TRUE(model.ok()) << model.status();
    std::vector<c10::IValue> samples;
    OptimizeOptions opts = OptionsWithSamples(model->module._ivalue(), inputs, stacked, &samples);
    auto report = OptimizeGraph(model->graph, **rules, opts);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->canonicalize["batched_batch_norms.members"], 2);
    const std::string path = Tmp(stacked ? "two_batch_norms.stacked.pt" : "two_batch_norms.original_layout.pt");
    ASSERT_TRUE(SaveModel(*model, path).ok());
    torch::jit::Module artifact = torch::jit::load(path);
    EXPECT_EQ(CountKind(artifact, "aten::batch_norm"), 1);
    EXPECT_EQ(CountKind(artifact, "aten::copy_"), stacked ? 0 : 4);
    EXPECT_EQ(CountKind(artifact, "aten::add_"), stacked ? 1 : 2);
    int64_t stored_buffers = 0;
    for (const auto& nb : artifact.named_buffers()) {
      for (const StackedParameter& p : report->param_layout.stacked) stored_buffers += nb.name == p.name;
    }
    EXPECT_EQ(stored_buffers, stacked ? 3 : 0);
    CheckOptions check;
    check.trials = 2;
    auto r = EquivalenceChecker(check).Check(original, artifact, inputs);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->equivalent) << r->first_failure;
    int64_t buffers = 0;
    for (const CheckFinding& f : r->findings) buffers += f.trial == "samples" && f.what.rfind("buffer n", 0) == 0;
    EXPECT_EQ(buffers, 6);  // n0 and n1's running_mean, running_var, num_batches_tracked
  }
}

// DLRM's tables as its reference code builds them (EmbeddingBag(sparse=True)). In the original
// layout the 8 lookups stay apart (the concatenation's backward cannot split a sparse gradient)
// and each table keeps its sparse gradient.
TEST(SparseTablesTest, OriginalLayoutKeepsTheLookupsApart) {
  for (const std::string kind : {"scripted", "traced"}) {
    SCOPED_TRACE(kind);
    Stacked s = MakeStacked(kind, /*stacked=*/false, "dlrm_sparse");
    ASSERT_FALSE(s.path.empty());
    torch::jit::Module artifact = torch::jit::load(s.path);
    EXPECT_EQ(CountKind(artifact, "aten::embedding_bag"), 8);
    at::Tensor table = artifact.attr("emb_l").toModule().attr("3").toModule().attr("weight").toTensor();
    table.requires_grad_(true);
    artifact.forward(s.inputs).toTensor().sum().backward();
    ASSERT_TRUE(table.grad().defined());
    EXPECT_TRUE(table.grad().is_sparse());
  }
}

// With stacked parameters the 8 tables become one stored table read by one lookup
// (batch_embedding_bag_stored_tables), its gradient one sparse tensor, equal row for row to the
// original tables' gradients; the artifact checks equivalent (gradients densified) and
// original_state_dict() gives every table back.
TEST(SparseTablesTest, StackedLayoutStoresOneTableWithOneSparseGradient) {
  for (const std::string kind : {"scripted", "traced"}) {
    SCOPED_TRACE(kind);
    Stacked s = MakeStacked(kind, /*stacked=*/true, "dlrm_sparse");
    ASSERT_FALSE(s.path.empty());
    ASSERT_EQ(s.layout.stacked.size(), 1u);
    const StackedParameter& stored = s.layout.stacked[0];
    EXPECT_EQ(stored.op, "cat");
    EXPECT_EQ(stored.members.size(), 8u);
    torch::jit::Module original = torch::jit::load(Corpus("dlrm_sparse/" + kind + ".pt"));
    torch::jit::Module artifact = torch::jit::load(s.path);
    EXPECT_EQ(CountKind(artifact, "aten::embedding_bag"), 1);
    EXPECT_EQ(CountKind(artifact, "aten::hstack"), 1);  // the members' indices and offsets, joined
    EXPECT_EQ(CountKind(artifact, "aten::cat"), 2);     // the model's own two
    CheckOptions check;
    check.trials = 2;
    auto r = EquivalenceChecker(check).Check(original, artifact, s.inputs);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->equivalent) << r->first_failure;

    at::Tensor table;
    for (const auto& p : artifact.named_parameters()) {
      if (p.name == stored.name) table = p.value;
    }
    ASSERT_TRUE(table.defined()) << stored.name;
    table.requires_grad_(true);
    artifact.forward(s.inputs).toTensor().sum().backward();
    ASSERT_TRUE(table.grad().defined());
    EXPECT_TRUE(table.grad().is_sparse());
    std::vector<at::Tensor> grads;
    for (const auto& p : original.named_parameters()) p.value.requires_grad_(true);
    original.forward(s.inputs).toTensor().sum().backward();
    for (const std::string& member : stored.members) {
      for (const auto& p : original.named_parameters()) {
        if (p.name == member) grads.push_back(p.value.grad().to_dense());
      }
    }
    ASSERT_EQ(grads.size(), 8u);
    EXPECT_TRUE(at::allclose(table.grad().to_dense(), at::cat(grads, 0), 1e-6, 1e-6));
    auto sd = artifact.run_method("original_state_dict").toGenericDict();
    for (const auto& p : original.named_parameters()) {
      ASSERT_TRUE(sd.contains(p.name)) << p.name;
      EXPECT_TRUE(at::equal(sd.at(p.name).toTensor(), p.value)) << p.name;
    }
  }
}

// The reference DLRM calls a helper method over its tables (apply_emb): once the tables move into
// the stored one, that method is removed (it would read modules that are gone), the layout says
// so, and the artifact loads and keeps forward, original_state_dict and its other methods.
TEST(SparseTablesTest, HelperMethodsOverMovedTablesAreRemoved) {
  Stacked s = MakeStacked("scripted", /*stacked=*/true, "dlrm_criteo");
  ASSERT_EQ(s.layout.stacked.size(), 1u);
  EXPECT_EQ(s.layout.removed_methods, std::vector<std::string>{"apply_emb"});
  torch::jit::Module artifact = torch::jit::load(s.path);
  EXPECT_FALSE(artifact.find_method("apply_emb").has_value());
  EXPECT_TRUE(artifact.find_method("interact_features").has_value());
  EXPECT_TRUE(artifact.find_method("original_state_dict").has_value());
  EXPECT_EQ(CountKind(artifact, "aten::embedding_bag"), 1);
  auto layout = ReadParamLayout(artifact);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->removed_methods, std::vector<std::string>{"apply_emb"});
}

// A sparse table in a module with a tensor of its own cannot leave whole, so the stored-table
// rule leaves it apart. Forced to batch it anyway (a predicate that calls every table storable),
// the optimizer refuses to produce the artifact rather than one whose table gets no gradient.
TEST(SparseTablesTest, ASparseTableThatCannotBeStoredStaysApart) {
  auto bag = [](const std::string& name, bool extra) {
    torch::jit::Module m(name);
    m.register_parameter("weight", torch::randn({5, 3}), false);
    if (extra) m.register_parameter("scale", torch::ones({1}), false);
    m.define(R"(
      def forward(self, i, o):
          return torch.embedding_bag(self.weight, i, o, False, 0, True, None, False, None)[0]
    )");
    return m;
  };
  auto make = [&] {
    torch::jit::Module root("Root");
    root.register_module("a", bag("TableWithScale", true));
    root.register_module("b", bag("Table", false));
    root.define(R"(
      def forward(self, i0, o0, i1, o1):
          return torch.cat([self.a.forward(i0, o0), self.b.forward(i1, o1)], 1)
    )");
    return root;
  };
  std::vector<c10::IValue> inputs = {torch::tensor({0, 4, 2}), torch::tensor({0, 1}),
                                     torch::tensor({1, 3, 3}), torch::tensor({0, 2})};
  auto rules = LoadRules({DefaultRulesDir()});
  ASSERT_TRUE(rules.ok()) << rules.status();
  for (bool forced : {false, true}) {
    SCOPED_TRACE(forced ? "every table called storable" : "default");
    torch::jit::Module root = make();
    std::shared_ptr<torch::jit::Graph> graph = root.get_method("forward").graph()->copy();
    std::vector<c10::IValue> samples;
    OptimizeOptions opts = OptionsWithSamples(root._ivalue(), inputs, /*stacked=*/true, &samples);
    if (forced) opts.storable_parameter = [](const torch::jit::Value*) { return true; };
    auto report = OptimizeGraph(graph, **rules, opts);
    if (!forced) {
      ASSERT_TRUE(report.ok()) << report.status();
      EXPECT_EQ(report->stats.applications["batch_embedding_bag_stored_tables"], 0);
      int64_t lookups = 0;
      for (const torch::jit::Node* n : graph->nodes()) lookups += n->kind() == c10::aten::embedding_bag;
      EXPECT_EQ(lookups, 2);
    } else {
      ASSERT_FALSE(report.ok());
      EXPECT_NE(std::string(report.status().message()).find("sparse gradient"), std::string::npos)
          << report.status();
    }
  }
}

// Optimizers a sparse table trains with, as PyTorch (or FBGEMM) define them, for the ones LibTorch
// lacks. Each updates only the rows a sparse gradient touches (every element of a dense one).
// Per-row state is what makes an optimizer exact on a stored table: a row of the stored table is
// a row of exactly one original table.
class RowOptimizer : public torch::optim::Optimizer {
 public:
  explicit RowOptimizer(std::vector<at::Tensor> params)
      : Optimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                  std::make_unique<torch::optim::SGDOptions>(0.0)) {}
  at::Tensor step(LossClosure closure = nullptr) override {
    torch::NoGradGuard no_grad;
    for (at::Tensor& p : param_groups()[0].params()) {
      if (!p.grad().defined()) continue;
      at::Tensor g = p.grad();
      at::Tensor rows, values;
      if (g.is_sparse()) {
        g = g.coalesce();
        rows = g.indices()[0];
        values = g.values();
      } else {
        rows = at::arange(p.size(0), p.options().dtype(at::kLong));
        values = g;
      }
      Update(p, rows, values);
    }
    return at::Tensor();
  }
  // The state of `p` (rows along dim 0) that a comparison of two models reads.
  virtual at::Tensor State(const at::Tensor& p) = 0;

 protected:
  virtual void Update(at::Tensor& p, const at::Tensor& rows, const at::Tensor& values) = 0;
  at::Tensor& Slot(std::map<const void*, at::Tensor>& slots, const at::Tensor& p, at::IntArrayRef shape) {
    auto it = slots.find(p.unsafeGetTensorImpl());
    if (it == slots.end()) it = slots.emplace(p.unsafeGetTensorImpl(), at::zeros(shape, p.options())).first;
    return it->second;
  }
};

// torch.optim.SparseAdam: Adam on the touched rows (their moments; bias correction by the
// parameter's own step count).
class SparseAdamReference : public RowOptimizer {
 public:
  SparseAdamReference(std::vector<at::Tensor> params, double lr) : RowOptimizer(std::move(params)), lr_(lr) {}
  at::Tensor State(const at::Tensor& p) override { return Slot(v_, p, p.sizes()); }

 protected:
  void Update(at::Tensor& p, const at::Tensor& rows, const at::Tensor& g) override {
    at::Tensor& m = Slot(m_, p, p.sizes());
    at::Tensor& v = Slot(v_, p, p.sizes());
    int64_t t = ++steps_[p.unsafeGetTensorImpl()];
    at::Tensor mr = m.index_select(0, rows) * kBeta1 + g * (1 - kBeta1);
    at::Tensor vr = v.index_select(0, rows) * kBeta2 + g * g * (1 - kBeta2);
    m.index_copy_(0, rows, mr);
    v.index_copy_(0, rows, vr);
    double step = lr_ * std::sqrt(1 - std::pow(kBeta2, t)) / (1 - std::pow(kBeta1, t));
    p.index_add_(0, rows, -step * mr / (vr.sqrt() + 1e-8));
  }

 private:
  static constexpr double kBeta1 = 0.9, kBeta2 = 0.999;
  double lr_;
  std::map<const void*, at::Tensor> m_, v_;
  std::map<const void*, int64_t> steps_;
};

// Row-wise Adagrad (FBGEMM's EXACT_ROWWISE_ADAGRAD, the usual optimizer of table-batched
// embeddings): one accumulator per row, the mean of the row's squared gradient.
class RowWiseAdagradReference : public RowOptimizer {
 public:
  RowWiseAdagradReference(std::vector<at::Tensor> params, double lr) : RowOptimizer(std::move(params)), lr_(lr) {}
  at::Tensor State(const at::Tensor& p) override { return Slot(sum_, p, {p.size(0)}); }

 protected:
  void Update(at::Tensor& p, const at::Tensor& rows, const at::Tensor& g) override {
    at::Tensor& sum = Slot(sum_, p, {p.size(0)});
    at::Tensor g2 = p.dim() > 1 ? (g * g).flatten(1).mean(1) : g * g;
    sum.index_add_(0, rows, g2);
    at::Tensor denom = sum.index_select(0, rows).sqrt() + 1e-8;
    for (int64_t d = 1; d < p.dim(); ++d) denom = denom.unsqueeze(-1);
    p.index_add_(0, rows, -lr_ * g / denom);
  }

 private:
  double lr_;
  std::map<const void*, at::Tensor> sum_;
};

// LibTorch keys an optimizer's per-parameter state by the parameter's TensorImpl: as a string in
// 1.13, as the pointer in 2.x.
using OptimizerStateKey =
    std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;
template <typename Key>
Key StateKey(const at::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;
    s << p.unsafeGetTensorImpl();
    return s.str();
  } else {
    return p.unsafeGetTensorImpl();
  }
}

// A model's parameters, trainable.
std::vector<at::Tensor> Trainable(torch::jit::Module& m) {
  std::vector<at::Tensor> out;
  for (at::Tensor p : m.parameters()) {
    p.requires_grad_(true);
    out.push_back(p);
  }
  return out;
}

// The optimizer state of one parameter, as a tensor with the parameter's rows along dim 0.
using StateReader = std::function<at::Tensor(torch::optim::Optimizer&, const at::Tensor& p)>;

// Trains the original DLRM (8 sparse tables) and the stored-table artifact from the same state
// with the same optimizer for 5 steps: the losses must agree at every step, and afterwards every
// table (through original_state_dict()) and its optimizer state (the stored table's state, cut
// at each member's rows) must be the original's.
// Tensors (also inside lists and tuples) moved to `device`.
c10::IValue OnDevice(const c10::IValue& v, const c10::Device& device) {
  if (v.isTensor()) return v.toTensor().to(device);
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList().vec()) out.push_back(t.to(device));
    return out;
  }
  if (v.isTuple()) {
    std::vector<c10::IValue> items;
    for (const c10::IValue& e : v.toTupleRef().elements()) items.push_back(OnDevice(e, device));
    return c10::ivalue::Tuple::create(std::move(items));
  }
  return v;
}

void TrainTablesAndCompare(const Stacked& s, const std::string& kind,
                           const std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)>& make,
                           const StateReader& state, const std::string& what,
                           const c10::Device& device = c10::Device(c10::kCPU)) {
  SCOPED_TRACE(what + " on " + device.str());
  torch::jit::Module original = torch::jit::load(Corpus("dlrm_sparse/" + kind + ".pt"));
  torch::jit::Module artifact = torch::jit::load(s.path);
  original.to(device);
  artifact.to(device);
  std::vector<c10::IValue> inputs;
  for (const c10::IValue& v : s.inputs) inputs.push_back(OnDevice(v, device));
  auto opt_o = make(Trainable(original));
  auto opt_a = make(Trainable(artifact));
  for (int step = 0; step < 5; ++step) {
    double loss[2];
    int k = 0;
    for (auto [m, opt] : {std::make_pair(&original, opt_o.get()), std::make_pair(&artifact, opt_a.get())}) {
      opt->zero_grad();
      at::Tensor out = m->forward(inputs).toTensor();
      at::Tensor l = (out * out).mean();
      l.backward();
      opt->step();
      loss[k++] = l.item<double>();
    }
    EXPECT_NEAR(loss[0], loss[1], 1e-6 * std::max(1.0, std::abs(loss[0]))) << "step " << step;
  }
  auto got = artifact.run_method("original_state_dict").toGenericDict();
  double worst = 0.0;
  for (const auto& p : original.named_parameters()) {
    worst = std::max(worst, (got.at(p.name).toTensor() - p.value).abs().max().item<double>());
  }
  EXPECT_LT(worst, 1e-5) << "parameters";
  const StackedParameter& stored = s.layout.stacked[0];
  at::Tensor table;
  for (const auto& p : artifact.named_parameters()) {
    if (p.name == stored.name) table = p.value;
  }
  at::Tensor stored_state = state(*opt_a, table);
  ASSERT_TRUE(stored_state.defined());
  if (stored_state.is_sparse()) stored_state = stored_state.to_dense();
  int64_t row = 0;
  for (size_t i = 0; i < stored.members.size(); ++i) {
    at::Tensor member;
    for (const auto& p : original.named_parameters()) {
      if (p.name == stored.members[i]) member = p.value;
    }
    at::Tensor want = state(*opt_o, member);
    ASSERT_TRUE(want.defined()) << stored.members[i];
    at::Tensor got_state = stored_state.narrow(0, row, stored.sizes[i]);
    if (want.is_sparse()) want = want.to_dense();
    EXPECT_TRUE(at::allclose(got_state, want, 1e-5, 1e-7)) << stored.members[i];
    row += stored.sizes[i];
  }
}

// SGD (with momentum), Adagrad, SparseAdam and row-wise Adagrad train the stored table exactly as
// they train the separate tables: their state is per element or per row.
// On the CPU, and on CUDA where there is one (the GPU ctest).
TEST(SparseTablesTest, OptimizersTrainTheStoredTableAsTheSeparateTables) {
  std::vector<c10::Device> devices = {c10::Device(c10::kCPU)};
  if (torch::cuda::is_available()) devices.emplace_back(c10::kCUDA, 0);
  for (const c10::Device& device : devices)
  for (const std::string kind : {"scripted", "traced"}) {
    SCOPED_TRACE(kind);
    Stacked s = MakeStacked(kind, /*stacked=*/true, "dlrm_sparse");
    ASSERT_EQ(s.layout.stacked.size(), 1u);
    TrainTablesAndCompare(
        s, kind,
        [](std::vector<at::Tensor> p) {
          return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.05).momentum(0.9));
        },
        [&](torch::optim::Optimizer& o, const at::Tensor& p) {
          auto& st = static_cast<torch::optim::SGDParamState&>(*o.state().at(StateKey<OptimizerStateKey>(p)));
          return st.momentum_buffer();
        },
        "SGD, momentum 0.9", device);
    TrainTablesAndCompare(
        s, kind,
        [](std::vector<at::Tensor> p) {
          return std::make_unique<torch::optim::Adagrad>(p, torch::optim::AdagradOptions(0.05));
        },
        [&](torch::optim::Optimizer& o, const at::Tensor& p) {
          return static_cast<torch::optim::AdagradParamState&>(*o.state().at(StateKey<OptimizerStateKey>(p))).sum();
        },
        "Adagrad", device);
    const StateReader reference_state = [](torch::optim::Optimizer& o, const at::Tensor& p) {
      return static_cast<RowOptimizer&>(o).State(p);
    };
    TrainTablesAndCompare(
        s, kind, [](std::vector<at::Tensor> p) { return std::make_unique<SparseAdamReference>(p, 0.01); },
        reference_state, "SparseAdam", device);
    TrainTablesAndCompare(
        s, kind, [](std::vector<at::Tensor> p) { return std::make_unique<RowWiseAdagradReference>(p, 0.05); },
        reference_state, "row-wise Adagrad", device);
  }
}

// Members inside the containers users write, on the corpus: mmoe's experts are
// nn.Sequential(Linear, ReLU) (the Sequential's forward reads its entries, so each expert leaves
// its ModuleList whole); highway's gates and hidden layers sit in two ModuleLists of one shared
// TorchScript class (both lose the same entries); PLE's CGC layers read their experts from
// helper methods (run_experts), so each layer goes whole.
struct ContainerCase {
  std::string model;
  size_t stored;                  // stored parameters
  std::string member;             // one original name that moves into them
  std::string holder;             // the stored parameter that holds it
  std::vector<std::string> gone;  // submodules of the root that go whole
  std::vector<std::string> emptied;  // submodules of the root left without children
};

class ContainerMembersTest : public ::testing::TestWithParam<std::tuple<ContainerCase, std::string>> {};

TEST_P(ContainerMembersTest, MembersLeaveTheirContainersAndTheArtifactTrainsLikeTheOriginal) {
  const auto& [c, kind] = GetParam();
  Stacked s = MakeStacked(kind, /*stacked=*/true, c.model);
  ASSERT_FALSE(s.path.empty());
  ASSERT_EQ(s.layout.stacked.size(), c.stored);
  std::string holder;  // the stored parameter holding c.member
  for (const StackedParameter& p : s.layout.stacked) {
    if (std::find(p.members.begin(), p.members.end(), c.member) != p.members.end()) holder = p.name;
  }
  EXPECT_EQ(holder, c.holder) << c.member;
  torch::jit::Module original = torch::jit::load(Corpus(c.model + "/" + kind + ".pt"));
  torch::jit::Module artifact = torch::jit::load(s.path);  // its methods compile again on load
  for (const std::string& g : c.gone) {
    EXPECT_TRUE(original.hasattr(g)) << g;
    EXPECT_FALSE(artifact.hasattr(g)) << g << " is still there";
  }
  for (const std::string& e : c.emptied) {
    ASSERT_TRUE(artifact.hasattr(e)) << e;
    EXPECT_EQ(artifact.attr(e).toModule().children().size(), 0u) << e << " still has children";
  }
  for (const auto& p : artifact.named_parameters()) EXPECT_NE(p.name, c.member);
  CheckOptions check;
  check.trials = 2;
  auto r = EquivalenceChecker(check).Check(original, artifact, s.inputs);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->equivalent) << r->first_failure;
  auto got = artifact.run_method("original_state_dict").toGenericDict();
  int64_t count = 0;
  for (const auto& p : original.named_parameters()) {
    ++count;
    ASSERT_TRUE(got.contains(p.name)) << p.name;
    EXPECT_TRUE(at::equal(got.at(p.name).toTensor(), p.value)) << p.name;
  }
  EXPECT_EQ(static_cast<int64_t>(got.size()), count + static_cast<int64_t>(original.named_buffers().size()));
  TrainAndCompare(s, kind, [](std::vector<at::Tensor> p) {
    return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
  }, "SGD, momentum 0.9, weight decay 1e-3", c.model);
}

INSTANTIATE_TEST_SUITE_P(
    Corpus, ContainerMembersTest,
    ::testing::Combine(
        ::testing::Values(ContainerCase{"mmoe", 2, "experts.3.0.weight", "concatenated_experts_0_0_to_gates_1_weight",
                                        {}, {"experts"}},
                          ContainerCase{"highway", 40, "lins.7.bias", "concatenated_gates_7_lins_7_bias", {},
                                        {"gates", "lins"}},
                          ContainerCase{"ple", 8, "level1.task1_experts.1.0.weight",
                                        "concatenated_level1_task1_experts_0_0_to_level1_gate_shared_weight",
                                        {"level1", "level2"}, {}}),
        ::testing::Values("scripted", "traced")),
    [](const ::testing::TestParamInfo<std::tuple<ContainerCase, std::string>>& info) {
      return std::get<0>(info.param).model + "_" + std::get<1>(info.param);
    });

TEST(ContainerMembersTest, HighwayContainersShareOneClass) {
  torch::jit::Module original = torch::jit::load(Corpus("highway/scripted.pt"));
  EXPECT_EQ(original.attr("gates").toModule().type(), original.attr("lins").toModule().type());
}

// A module of its own class `Leaf` in `cu`, with one parameter `w` of 3 elements.
torch::jit::Module Leaf(const std::shared_ptr<torch::jit::CompilationUnit>& cu) {
  torch::jit::Module m("__torch__.Leaf", cu, /*shouldMangle=*/true);
  m.register_parameter("w", torch::randn({3}).set_requires_grad(true), false);
  return m;
}

// Two objects of one class, `p` and `q`, each holding modules `a` and `b` with a parameter `w`.
// With `both`, the forward concatenates p's and q's `a.w` and `b.w` (each instance loses a and
// b); otherwise it concatenates only p's, and q's are read by a mul: p would lose attributes of
// the shared class that q still has, so nothing moves.
torch::jit::Module SharedClassModel(bool both) {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  torch::jit::Module p("__torch__.Pair", cu, /*shouldMangle=*/true);
  p.register_module("a", Leaf(cu));
  p.register_module("b", Leaf(cu));
  auto q_obj = c10::ivalue::Object::create(c10::StrongTypePtr(cu, p.type()), p.type()->numAttributes());
  for (size_t i = 0; i < p.type()->numAttributes(); ++i) q_obj->setSlot(i, p._ivalue()->getSlot(i));
  torch::jit::Module q(q_obj);
  q._ivalue()->setAttr("a", Leaf(cu)._ivalue());
  q._ivalue()->setAttr("b", Leaf(cu)._ivalue());
  torch::jit::Module root("__torch__.Root", cu, /*shouldMangle=*/true);
  root.register_module("p", p);
  root.register_module("q", q);
  root.define(both ? R"(
    def forward(self, x):
        return torch.cat([self.p.a.w, self.p.b.w, self.q.a.w, self.q.b.w], 0) * x
  )" : R"(
    def forward(self, x):
        return torch.cat([torch.cat([self.p.a.w, self.p.b.w], 0), self.q.a.w * self.q.b.w], 0) * x
  )");
  return root;
}

TEST(ContainerMembersTest, SharedClassLosesAttributesOnlyWhenEveryInstanceDoes) {
  for (bool both : {true, false}) {
    SCOPED_TRACE(both ? "every instance stacked" : "one instance stacked");
    torch::jit::Module m = SharedClassModel(both);
    ASSERT_EQ(m.attr("p").toModule().type(), m.attr("q").toModule().type());
    at::Tensor x = torch::randn({both ? 12 : 9});
    at::Tensor before = m.forward({x}).toTensor();
    at::Tensor q_b_w = m.attr("q").toModule().attr("b").toModule().attr("w").toTensor().clone();
    std::shared_ptr<torch::jit::Graph> graph = m.get_method("forward").graph();
    auto layout = StoreStackedParameters(m, graph);
    ASSERT_TRUE(layout.ok()) << layout.status();
    EXPECT_EQ(layout->stacked.size(), both ? 1u : 0u);
    EXPECT_EQ(m.attr("p").toModule().hasattr("a"), !both);
    EXPECT_EQ(m.attr("q").toModule().hasattr("b"), !both);
    // The artifact saves and loads (where the shared class lost a and b, it lost them once, for
    // both instances) and computes what the model computed. (The module that ran before keeps
    // its executor's plan of the old graph, so the saved artifact is what runs.)
    const std::string path = Tmp(both ? "shared_class_both.pt" : "shared_class_one.pt");
    m.save(path);
    torch::jit::Module loaded = torch::jit::load(path);
    EXPECT_TRUE(at::equal(loaded.forward({x}).toTensor(), before));
    if (both) {
      auto sd = loaded.run_method("original_state_dict").toGenericDict();
      EXPECT_EQ(sd.size(), 4u);
      EXPECT_TRUE(sd.contains("q.b.w"));
      EXPECT_TRUE(at::equal(sd.at("q.b.w").toTensor(), q_b_w));
    }
  }
}

// Two blocks whose class's forward reads both of their children `a` and `b`; the root's forward
// concatenates only the `a`s. An `a` cannot leave its block (the block's forward reads it), and
// the block cannot go either (its `b` stays where it is), so nothing moves.
TEST(ContainerMembersTest, AMemberWhoseContainerKeepsOtherStateStays) {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  torch::jit::Module root("__torch__.Root", cu, /*shouldMangle=*/true);
  for (const char* name : {"s0", "s1"}) {
    torch::jit::Module block("__torch__.Block", cu, /*shouldMangle=*/true);
    block.register_module("a", Leaf(cu));
    block.register_module("b", Leaf(cu));
    block.define(R"(
      def forward(self, x):
          return self.a.w * x + self.b.w
    )");
    root.register_module(name, block);
  }
  root.define(R"(
    def forward(self, x):
        return torch.cat([self.s0.a.w, self.s1.a.w], 0) * x + torch.cat([self.s0.b.w, self.s1.b.w * 2.0], 0)
  )");
  at::Tensor x = torch::randn({6});
  at::Tensor before = root.forward({x}).toTensor();
  std::shared_ptr<torch::jit::Graph> graph = root.get_method("forward").graph();
  auto layout = StoreStackedParameters(root, graph);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->stacked.size(), 0u);
  EXPECT_TRUE(root.attr("s0").toModule().hasattr("a"));
  const std::string path = Tmp("block_keeps_state.pt");
  root.save(path);
  EXPECT_TRUE(at::equal(torch::jit::load(path).forward({x}).toTensor(), before));
}

// The original layout: a stack of parameters read transposed gets a flat view after it, so each
// member's gradient is a contiguous slice of one buffer (AccumulateGrad keeps it, no copy).
torch::jit::Module TwoMemberLinear() {
  torch::jit::Module m("TwoMemberLinear");
  m.register_parameter("w0", torch::randn({4, 3}).set_requires_grad(true), false);
  m.register_parameter("w1", torch::randn({4, 3}).set_requires_grad(true), false);
  m.register_parameter("b", torch::randn({2, 1, 4}).set_requires_grad(true), false);
  m.define(R"(
    def forward(self, x):
        S = torch.stack([self.w0, self.w1], 0)
        return torch.baddbmm(self.b, x, S.transpose(1, 2))
  )");
  return m;
}

TEST(MemberGradientLayoutTest, FlatViewAfterStackOfParametersReadTransposed) {
  torch::jit::Module m = TwoMemberLinear();
  std::shared_ptr<torch::jit::Graph> g = m.get_method("forward").graph();
  int64_t stacks = 0;
  ASSERT_TRUE(ContiguousMemberGradients(g, &stacks));
  EXPECT_EQ(stacks, 1);
  torch::jit::testing::FileCheck()
      .check("aten::stack(")
      ->check("aten::flatten(")
      ->check("aten::size(")
      ->check("aten::view(")
      ->check("aten::transpose(")
      ->check("aten::baddbmm(")
      ->run(*g);
  for (const torch::jit::Node* n : g->nodes()) {
    if (n->kind() != c10::aten::transpose) continue;
    const torch::jit::Node* view = n->input(0)->node();  // the transpose reads the flat view ...
    ASSERT_EQ(view->kind(), c10::aten::view);
    const torch::jit::Node* flat = view->input(0)->node();  // ... of the stack
    ASSERT_EQ(flat->kind(), c10::aten::flatten);
    EXPECT_EQ(flat->input(0)->node()->kind(), c10::aten::stack);
    EXPECT_EQ(view->input(1)->node()->input(0), flat->input(0));  // sized as the stack
  }
  // Nothing else to do the second time; a stack of non-attributes or one read as it is is left.
  EXPECT_FALSE(ContiguousMemberGradients(g));
  auto other = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(R"IR(
graph(%a : Tensor, %b : Tensor, %x : Tensor):
  %z : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %two : int = prim::Constant[value=2]()
  %l : Tensor[] = prim::ListConstruct(%a, %b)
  %S : Tensor = aten::stack(%l, %z)
  %T : Tensor = aten::transpose(%S, %one, %two)
  %y : Tensor = aten::bmm(%x, %T)
  return (%y))IR", other.get());
  EXPECT_FALSE(ContiguousMemberGradients(other));
}

TEST(MemberGradientLayoutTest, SameValuesAndGradientsOneBufferForTheMembers) {
  torch::manual_seed(0);
  torch::jit::Module reference = TwoMemberLinear();
  torch::manual_seed(0);
  torch::jit::Module rewired = TwoMemberLinear();  // the same values, its own graph
  ASSERT_TRUE(ContiguousMemberGradients(rewired.get_method("forward").graph()));
  torch::Tensor x = torch::randn({2, 5, 3});
  auto run = [&](torch::jit::Module& m) {
    for (auto p : m.parameters()) p.mutable_grad() = torch::Tensor();
    torch::Tensor y = m.forward({x}).toTensor();
    y.pow(2).sum().backward();
    return y;
  };
  for (int step = 0; step < 3; ++step) {  // the executor optimizes after its first runs
    torch::Tensor want = run(reference), got = run(rewired);
    EXPECT_TRUE(torch::equal(want, got));
    for (const char* name : {"w0", "w1", "b"}) {
      EXPECT_TRUE(torch::allclose(reference.attr(name).toTensor().grad(),
                                  rewired.attr(name).toTensor().grad(), 1e-6, 1e-6)) << name;
    }
    const torch::Tensor g0 = rewired.attr("w0").toTensor().grad();
    const torch::Tensor g1 = rewired.attr("w1").toTensor().grad();
    EXPECT_TRUE(g0.is_contiguous());
    // One buffer: the members' gradients are slices of it (no copy per member) ...
    EXPECT_EQ(g0.storage().data_ptr().get(), g1.storage().data_ptr().get()) << "step " << step;
    // ... where without the view each member's transposed slice was copied on its own.
    EXPECT_NE(reference.attr("w0").toTensor().grad().storage().data_ptr().get(),
              reference.attr("w1").toTensor().grad().storage().data_ptr().get());
  }
}

TEST(MemberGradientLayoutTest, CorpusTowersOriginalLayout) {
  for (const std::string kind : {"scripted", "traced"}) {
    Stacked s = MakeStacked(kind, /*stacked=*/false);
    ASSERT_FALSE(s.path.empty());
    // The two batched linears' weight stacks (the biases' stacks are not read transposed).
    EXPECT_EQ(s.counters["member_gradient_layout.stacks"], 2) << kind;
    torch::jit::Module artifact = torch::jit::load(s.path);
    torch::jit::Module original = torch::jit::load(Corpus("towers/" + kind + ".pt"));
    CheckOptions check;
    check.trials = 2;
    auto r = EquivalenceChecker(check).Check(original, artifact, s.inputs);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->equivalent) << r->first_failure;
    artifact.forward(s.inputs).toTensor().sum().backward();
    at::Tensor g0 = artifact.attr("l1").toModule().attr("0").toModule().attr("weight").toTensor().grad();
    at::Tensor g1 = artifact.attr("l1").toModule().attr("1").toModule().attr("weight").toTensor().grad();
    ASSERT_TRUE(g0.defined() && g1.defined());
    EXPECT_EQ(g0.storage().data_ptr().get(), g1.storage().data_ptr().get()) << kind;
  }
}

INSTANTIATE_TEST_SUITE_P(Towers, StackedParametersTest, ::testing::Values("scripted", "traced"));

}  // namespace
}  // namespace sentier
