// canonicalize_test.cc — each canonicalization pass on the idiom it exists for (FileCheck on the
// result), that it leaves alone what it must not touch, and that the pipeline computes what the
// input computed. Runs against LibTorch 2.11 (Bazel's default, and the CMake build on the GPU
// machine) and builds against Debian's 1.13 (SENTIER_TORCH_DIR=/usr), where "the same behaviour
// in both" was checked.
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/csrc/jit/testing/file_check.h>
#include <torch/torch.h>

#include "passes/canonicalize/passes.h"
#include "passes/canonicalize/pipeline.h"
#include "passes/shape_facts.h"
#include "passes/unfused_large_cats.h"

namespace sentier {
namespace {

using torch::jit::testing::FileCheck;

std::shared_ptr<torch::jit::Graph> Parse(const std::string& ir) {
  auto g = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, g.get());
  return g;
}

std::vector<c10::IValue> RunGraphOn(const std::shared_ptr<torch::jit::Graph>& g, std::vector<c10::IValue> stack) {
  torch::jit::Code code(g, "test");
  torch::jit::InterpreterState(code).run(stack);
  return stack;
}

// A module written the way scripted models are: an int, a list and a bool attribute, a method
// that assigns one attribute, a ModuleList-like loop, appends, and a counter.
torch::jit::Module Towers() {
  torch::jit::Module m("Towers");
  m.register_attribute("d", c10::IntType::get(), int64_t{4});
  m.register_attribute("sizes", c10::ListType::ofInts(), c10::IValue(std::vector<int64_t>{4, 4}));
  m.register_attribute("scale", c10::FloatType::get(), 1.0);
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("w", torch::randn({4, 4}), false);
  m.define(R"TS(
def forward(self, x):
    parts = torch.split(x, self.d, 1)
    sized = torch.split(x, self.sizes, 1)
    outs: List[Tensor] = []
    i = 0
    for k in range(len(self.sizes)):
        outs.append(torch.relu(torch.linear(parts[i], self.w)) + sized[k] * self.scale)
        i += 1
    if self.training:
        return torch.cat(outs, 1)
    return torch.cat(outs, 0)

def set_scale(self, s: float):
    self.scale = s
)TS");
  return m;
}

std::shared_ptr<torch::jit::Graph> InlinedForward(const torch::jit::Module& m) {
  auto g = m.get_method("forward").graph()->copy();
  torch::jit::Inline(*g);
  return g;
}

TEST(FoldModuleAttributesTest, FoldsConfigurationNotStateTrainingOrAssigned) {
  torch::jit::Module m = Towers();
  auto g = InlinedForward(m);
  PassCounters counters;
  EXPECT_TRUE(FoldModuleAttributes(g, m._ivalue(), &counters));
  EliminateDeadNodes(g, nullptr);
  FileCheck()
      .check_not("prim::GetAttr[name=\"d\"]")
      ->check_not("prim::GetAttr[name=\"sizes\"]")
      ->run(*g);
  // Parameters stay module state; `training` flips with train()/eval(); `scale` is assigned by
  // set_scale: none of them is folded.
  std::string text = g->toString();
  EXPECT_NE(text.find("prim::GetAttr[name=\"w\"]"), std::string::npos) << text;
  EXPECT_NE(text.find("prim::GetAttr[name=\"training\"]"), std::string::npos) << text;
  EXPECT_NE(text.find("prim::GetAttr[name=\"scale\"]"), std::string::npos) << text;
  EXPECT_EQ(counters["fold_module_attributes.attributes"], 3);  // d, sizes (twice)
  EXPECT_FALSE(FoldModuleAttributes(g, m._ivalue(), &counters)) << "not a fixpoint";
}

// Column ranges as a list of (start, end) tuples (`self.sparse_cols[i]` in a feature loop, the
// way CTR libraries keep where each feature sits in one input tensor): tuples are immutable, so
// the list folds like a list of ints, and each slice gets constant bounds.
TEST(FoldModuleAttributesTest, ListOfTuplesIsFolded) {
  torch::jit::Module m("Columns");
  auto tuple_type = c10::TupleType::create({c10::IntType::get(), c10::IntType::get()});
  c10::impl::GenericList cols(tuple_type);
  cols.push_back(c10::ivalue::Tuple::create({int64_t{0}, int64_t{1}}));
  cols.push_back(c10::ivalue::Tuple::create({int64_t{1}, int64_t{3}}));
  m.register_attribute("cols", c10::ListType::create(tuple_type), cols);
  m.define(R"TS(
def forward(self, x):
    a, b = self.cols[1]
    return x[:, a:b]
)TS");
  auto g = InlinedForward(m);
  PassCounters counters;
  EXPECT_TRUE(FoldModuleAttributes(g, m._ivalue(), &counters));
  EliminateDeadNodes(g, nullptr);
  FileCheck().check_not("prim::GetAttr[name=\"cols\"]")->run(*g);
  EXPECT_EQ(counters["fold_module_attributes.attributes"], 1);
}

// A parameter declared None (`nn.Linear(..., bias=False)` registers `bias` so) can hold nothing
// else: its read becomes the None constant, as in a traced graph; a tensor parameter stays.
TEST(FoldModuleAttributesTest, ParameterDeclaredNoneIsFolded) {
  torch::jit::Module m("BiasFree");
  m.register_parameter("weight", torch::randn({3, 4}), false);
  m.register_attribute("bias", c10::NoneType::get(), c10::IValue(), /*is_param=*/true);
  m.define(R"TS(
def forward(self, x):
    return torch.linear(x, self.weight, self.bias)
)TS");
  auto g = InlinedForward(m);
  EXPECT_TRUE(FoldModuleAttributes(g, m._ivalue(), nullptr));
  EliminateDeadNodes(g, nullptr);
  FileCheck()
      .check("prim::GetAttr[name=\"weight\"]")
      ->check_not("prim::GetAttr[name=\"bias\"]")
      ->run(*g);
  torch::jit::Node* linear = nullptr;
  for (torch::jit::Node* n : g->nodes()) {
    if (n->kind() == c10::aten::linear) linear = n;
  }
  ASSERT_NE(linear, nullptr);
  EXPECT_EQ(linear->input(2)->type()->kind(), c10::TypeKind::NoneType);
  EXPECT_EQ(linear->input(2)->node()->kind(), c10::prim::Constant);
}

// A floating parameter's dtype compared with an integral dtype (F.embedding_bag's
// `weight.dtype == torch.long`) folds to false (`!=`: true): no module conversion makes a
// floating tensor integral; its dim() folds to its rank. Comparisons with a floating dtype, integer buffers and an assigned
// parameter's dtype stay, and the parameter itself stays module state. (C++-defined methods
// spell dtypes as their codes: 4 long, 3 int32, 7 float64, 11 bool.)
TEST(FoldModuleAttributesTest, FloatingStateIsNeverIntegral) {
  torch::jit::Module m("Table");
  m.register_parameter("weight", torch::randn({5, 3}), false);
  m.register_parameter("other", torch::randn({5, 3}), false);
  m.register_buffer("ids", torch::zeros({3}, torch::kLong));
  m.define(R"TS(
def forward(self, x):
    a = self.weight.dtype == 4
    b = 3 != self.weight.dtype
    c = self.weight.dtype == 7
    d = self.ids.dtype == 4
    e = self.other.dtype == 11
    f = self.weight.dim()
    return (a, b, c, d, e, f, self.weight + x)

def swap(self):
    self.other = self.weight
)TS");
  auto g = InlinedForward(m);
  PassCounters counters;
  EXPECT_TRUE(FoldModuleAttributes(g, m._ivalue(), &counters));
  EXPECT_EQ(counters["fold_module_attributes.dtype_checks"], 2);
  EXPECT_FALSE(FoldModuleAttributes(g, m._ivalue(), &counters)) << "not a fixpoint";
  EliminateDeadNodes(g, nullptr);
  auto out = RunGraphOn(g, {m._ivalue(), torch::ones({5, 3})});
  auto t = out[0].toTuple()->elements();
  EXPECT_FALSE(t[0].toBool());
  EXPECT_TRUE(t[1].toBool());
  EXPECT_FALSE(t[2].toBool());
  EXPECT_TRUE(t[3].toBool());
  EXPECT_FALSE(t[4].toBool());
  EXPECT_EQ(t[5].toInt(), 2);
  EXPECT_EQ(counters["fold_module_attributes.ranks"], 1);
  // a, b and f are constants now: three dtype reads remain (c, d, e), no aten::dim, and the
  // parameter.
  FileCheck().check_count("prim::dtype", 3, /*exactly=*/true)->check_not("aten::dim")->run(*g);
  FileCheck().check("prim::GetAttr[name=\"weight\"]")->run(*g);
}

TEST(FoldModuleAttributesTest, NoModuleObjectNoChange) {
  torch::jit::Module m = Towers();
  auto g = InlinedForward(m);
  EXPECT_FALSE(FoldModuleAttributes(g, c10::IValue(), nullptr));
}

TEST(CanonicalizeTest, ScriptedLoopBecomesStraightLineAndComputesTheSame) {
  torch::jit::Module m = Towers();
  auto g = InlinedForward(m);
  auto original = g->copy();
  CanonicalizeOptions options;
  options.self = m._ivalue();
  std::vector<std::string> seen;
  options.after_pass = [&](const std::string& pass, const torch::jit::Graph&) { seen.push_back(pass); };
  PassCounters counters;
  EXPECT_TRUE(Canonicalize(g, options, &counters));
  FileCheck()
      .check_not("prim::Loop")
      ->check_not("aten::append")
      ->check_not("aten::len")
      ->check_count("aten::linear", 2, /*exactly=*/true)
      ->run(*g);
  EXPECT_GT(counters["unroll_loops.loops"], 0);
  EXPECT_GT(counters["remove_list_mutation"], 0);
  EXPECT_GT(counters["fold_module_attributes"], 0);
  EXPECT_FALSE(seen.empty());
  for (const std::string& pass : seen) {
    const auto& names = CanonicalPassNames();
    EXPECT_NE(std::find(names.begin(), names.end(), pass), names.end()) << pass;
  }
  // Same outputs, in training and eval mode (the `training` branch was kept).
  at::Tensor x = torch::randn({5, 8});
  for (bool training : {true, false}) {
    m.train(training);
    at::Tensor want = RunGraphOn(original, {m._ivalue(), x})[0].toTensor();
    at::Tensor got = RunGraphOn(g, {m._ivalue(), x})[0].toTensor();
    EXPECT_TRUE(at::allclose(want, got)) << "training=" << training;
  }
  EXPECT_FALSE(Canonicalize(g, options, nullptr)) << "a second run must change nothing";
}

// F.embedding_bag's argument checks, reduced: a 2-D input must come without offsets (here a
// Tensor, so `is not None` holds and that branch always raises); a 1-D input needs offsets,
// refined from Optional. After the pipeline the checks are guards without outputs and the values
// that reach the add are the inputs themselves, in the outer block; the numbers, and the errors
// for a 2-D or 3-D input, are as before.
TEST(UnwrapRaisingBranchesTest, ArgumentChecksBecomeGuards) {
  torch::jit::Module m("Bags");
  m.define(R"TS(
def checked(self, x: Tensor, o: Optional[Tensor]):
    if x.dim() == 2:
        assert o is None, "a 2-D input takes no offsets"
        return x.flatten(), x
    else:
        assert x.dim() == 1, "1-D or 2-D input"
        assert o is not None, "a 1-D input needs offsets"
        return x, o

def forward(self, x, o):
    a, b = self.checked(x, o)
    return a + 2 * b
)TS");
  auto g = InlinedForward(m);
  auto original = g->copy();
  CanonicalizeOptions options;
  options.self = m._ivalue();
  PassCounters counters;
  EXPECT_TRUE(Canonicalize(g, options, &counters));
  EXPECT_GT(counters["unwrap_raising_branches.guards"], 0);
  EXPECT_GT(counters["unwrap_raising_branches.none_checks"], 0);
  FileCheck().check_not("aten::__is")->check_not("prim::unchecked_cast")->check("aten::add(%x")->run(*g);
  for (torch::jit::Node* n : g->nodes()) {
    if (n->kind() == c10::prim::If) EXPECT_TRUE(n->outputs().empty()) << *n;
  }
  at::Tensor x = torch::randn({6}), o = torch::randn({6});
  at::Tensor want = RunGraphOn(original, {m._ivalue(), x, o})[0].toTensor();
  EXPECT_TRUE(at::allclose(want, RunGraphOn(g, {m._ivalue(), x, o})[0].toTensor()));
  for (const auto& graph : {original, g}) {
    EXPECT_THROW(RunGraphOn(graph, {m._ivalue(), torch::randn({2, 3}), o}), std::exception);
    EXPECT_THROW(RunGraphOn(graph, {m._ivalue(), torch::randn({2, 3, 4}), o}), std::exception);
  }
  EXPECT_FALSE(Canonicalize(g, options, nullptr)) << "a second run must change nothing";
}

// The same checks with shape facts recorded on a 1-D input: its rank folds, and with it every
// check and its message — no prim::If, RaiseException or format is left, and the numbers are
// those of the original on inputs of the samples' rank. Without facts the guards stay.
TEST(FoldKnownRanksTest, RankChecksOfRecordedInputsFold) {
  torch::jit::Module m("Bags");
  m.define(R"TS(
def checked(self, x: Tensor, o: Optional[Tensor]):
    if x.dim() == 2:
        assert o is None, "a 2-D input takes no offsets"
        x = x.flatten()
    else:
        assert x.dim() == 1, "1-D or 2-D input: " + str(x.dim())
        assert o is not None, "a 1-D input needs offsets"
    return x * 2

def forward(self, x, o):
    return self.checked(x, o)
)TS");
  auto g = InlinedForward(m);
  auto original = g->copy();
  CanonicalizeOptions options;
  options.self = m._ivalue();
  Canonicalize(g, options, nullptr);
  FileCheck().check("prim::RaiseException")->run(*g);
  at::Tensor x = torch::randn({6}), o = torch::randn({6});
  absl::StatusOr<ShapeFacts> facts = RecordShapeFacts(g, {m._ivalue(), x, o});
  ASSERT_TRUE(facts.ok()) << facts.status();
  options.facts = &*facts;
  PassCounters counters;
  EXPECT_TRUE(Canonicalize(g, options, &counters));
  EXPECT_GT(counters["fold_known_ranks.dims"], 0);
  FileCheck().check_not("aten::dim")->check_not("prim::If")->check_not("prim::RaiseException")
      ->check_not("aten::format")->check("aten::mul(%x")->run(*g);
  at::Tensor y = torch::randn({9}), p = torch::randn({9});
  EXPECT_TRUE(at::equal(RunGraphOn(original, {m._ivalue(), y, p})[0].toTensor(),
                        RunGraphOn(g, {m._ivalue(), y, p})[0].toTensor()));
  EXPECT_FALSE(FoldKnownRanks(g, &*facts, nullptr)) << "a second run must change nothing";
}

// The same join of lookups made twice (a model that joins its field embeddings for two heads):
// in a graph that writes nothing, the second stack, concatenation and lookup read the first's,
// and the numbers stay. With a writer anywhere in the graph nothing is merged.
TEST(EliminateCommonTensorOpsTest, RepeatedLookupIsMadeOnce) {
  const std::string body = R"IR(
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %neg : int = prim::Constant[value=-1]()
  %f : bool = prim::Constant[value=0]()
  %ids : Tensor[] = prim::ListConstruct(%a, %b)
  %s1 : Tensor = aten::stack(%ids, %one)
  %ws1 : Tensor[] = prim::ListConstruct(%w0, %w1)
  %W1 : Tensor = aten::cat(%ws1, %zero)
  %e1 : Tensor = aten::embedding(%W1, %s1, %neg, %f, %f)
  %ids2 : Tensor[] = prim::ListConstruct(%a, %b)
  %s2 : Tensor = aten::stack(%ids2, %one)
  %ws2 : Tensor[] = prim::ListConstruct(%w0, %w1)
  %W2 : Tensor = aten::cat(%ws2, %zero)
  %e2 : Tensor = aten::embedding(%W2, %s2, %neg, %f, %f)
)IR";
  auto g = Parse("graph(%a : Tensor, %b : Tensor, %w0 : Tensor, %w1 : Tensor):" + body +
                 "  %y : Tensor = aten::mul(%e1, %e2)\n  return (%y)\n");
  auto original = g->copy();
  PassCounters counters;
  EXPECT_TRUE(EliminateCommonTensorOps(g, &counters));
  EliminateDeadNodes(g, nullptr);
  EXPECT_EQ(counters["eliminate_common_tensor_ops.merged"], 5);
  FileCheck().check_count("aten::stack", 1, /*exactly=*/true)->check_count("aten::embedding", 1, true)
      ->check("aten::mul(")->check_not("%e2")->run(*g);
  at::Tensor a = torch::randint(0, 3, {4}), b = torch::randint(0, 3, {4});
  at::Tensor w0 = torch::randn({3, 2}), w1 = torch::randn({3, 2});
  EXPECT_TRUE(at::equal(RunGraphOn(original, {a, b, w0, w1})[0].toTensor(),
                        RunGraphOn(g, {a, b, w0, w1})[0].toTensor()));
  EXPECT_FALSE(EliminateCommonTensorOps(g, nullptr)) << "a second run must change nothing";

  auto written = Parse("graph(%a : Tensor, %b : Tensor, %w0 : Tensor, %w1 : Tensor):" + body +
                       "  %z : Tensor = aten::add_(%e1, %e1, %one)\n"
                       "  %y : Tensor = aten::mul(%z, %e2)\n  return (%y)\n");
  EXPECT_FALSE(EliminateCommonTensorOps(written, nullptr)) << "e1 is written: e2 must stay its own";
  FileCheck().check_count("aten::embedding", 2, true)->run(*written);
}

TEST(PropagateConstantsTest, IfOnConstantBecomesItsBranch) {
  auto g = Parse(R"IR(
graph(%x : Tensor):
  %c : bool = prim::Constant[value=0]()
  %y : Tensor = prim::If(%c)
    block0():
      %a : Tensor = aten::relu_(%x)
      -> (%a)
    block1():
      %b : Tensor = aten::relu(%x)
      -> (%b)
  return (%y)
)IR");
  EXPECT_TRUE(PropagateConstants(g, nullptr));
  FileCheck().check_not("prim::If")->check("aten::relu(")->check_not("aten::relu_")->run(*g);
}

TEST(RemoveListMutationsTest, AppendsBecomeOneListConstruct) {
  auto g = Parse(R"IR(
graph(%a : Tensor, %b : Tensor):
  %d : int = prim::Constant[value=0]()
  %l : Tensor[] = prim::ListConstruct()
  %1 : Tensor[] = aten::append(%l, %a)
  %2 : Tensor[] = aten::append(%l, %b)
  %y : Tensor = aten::cat(%l, %d)
  return (%y)
)IR");
  EXPECT_TRUE(RemoveListMutations(g, nullptr));
  EliminateDeadNodes(g, nullptr);
  FileCheck().check_not("aten::append")->check("prim::ListConstruct(%a, %b)")->run(*g);
}

TEST(FoldListReadsTest, ConstantListReadsAndLiteralsFold) {
  auto g = Parse(R"IR(
graph(%x : Tensor):
  %k : int = prim::Constant[value=1]()
  %sizes : int[] = prim::Constant[value=[3, 5]]()
  %s : int = aten::__getitem__(%sizes, %k)
  %n : int = aten::len(%sizes)
  %four : int = prim::Constant[value=4]()
  %lit : int[] = prim::ListConstruct(%four, %four)
  %v : Tensor = aten::view(%x, %lit)
  %r : Tensor = aten::mul(%v, %s)
  %q : Tensor = aten::mul(%r, %n)
  return (%q)
)IR");
  PassCounters counters;
  EXPECT_TRUE(FoldListReads(g, &counters));
  EliminateDeadNodes(g, nullptr);
  FileCheck()
      .check_not("aten::__getitem__")
      ->check_not("aten::len")
      ->check_not("prim::ListConstruct")
      ->check("aten::view")
      ->run(*g);
  EXPECT_EQ(counters["fold_list_reads.constant_lists"], 2);
  EXPECT_EQ(counters["fold_list_reads.constant_list_literals"], 1);
}

TEST(FoldListReadsTest, WrittenListIsNotFolded) {
  auto g = Parse(R"IR(
graph(%x : Tensor):
  %k : int = prim::Constant[value=1]()
  %four : int = prim::Constant[value=4]()
  %lit : int[] = prim::ListConstruct(%four, %four)
  %1 : int[] = aten::append(%lit, %k)
  %v : Tensor = aten::view(%x, %lit)
  return (%v)
)IR");
  FoldListReads(g, nullptr);
  FileCheck().check("prim::ListConstruct")->check("aten::append")->run(*g);
}

// In-place writes to elements of a list built by a comprehension (`outs[0].add_(1.0)`): folded,
// the read is the element itself. The canonical graph must keep the writes through LibTorch's
// dead code elimination, which LowerSimpleTuples runs and torch::jit::load runs when it compiles
// a saved archive's code: saved, loaded back and run, the module computes what the original
// computes. `ret`: what forward returns — the cat alone, a tuple with it (lower_tuples runs), or
// a tuple with a cat of the list before the writes too (the list is read before and after).
torch::jit::Module MutatedListElements(const std::string& ret) {
  torch::jit::Module m("MutatedListElements");
  m.define(R"TS(
def forward(self, x, y):
    a = torch.split(x, 2, 1)
    b = torch.split(y, 2, 1)
    outs = [a[i] + b[i] for i in range(3)]
    first = torch.cat(outs, 1)
    outs[0].add_(1.0)
    outs[2].mul_(2.0)
    return )TS" + ret + "\n");
  return m;
}

TEST(FoldListReadsTest, WritesToFoldedListElementsSurviveSaveAndLoad) {
  for (std::string ret : {"torch.cat(outs, 1)", "(x, torch.cat(outs, 1))", "(first, torch.cat(outs, 1))"}) {
    SCOPED_TRACE("return " + ret);
    torch::jit::Module m = MutatedListElements(ret);
    at::Tensor x = torch::randn({3, 6}), y = torch::randn({3, 6});
    c10::IValue want = m.forward({x, y});
    auto g = m.get_method("forward").graph();  // edited in place, as the pipeline does
    torch::jit::Inline(*g);
    CanonicalizeOptions options;
    options.self = m._ivalue();
    PassCounters counters;
    EXPECT_TRUE(Canonicalize(g, options, &counters));
    FileCheck().check_not("aten::__getitem__(%outs")->check("aten::add_")->check("aten::mul_")->run(*g);
    EXPECT_EQ(counters["fold_list_reads.lists_after_element_writes"], 1) << *g;
    // LibTorch's dead code elimination keeps the writes.
    auto swept = g->copy();
    torch::jit::EliminateDeadCode(swept);
    FileCheck().check("aten::add_")->check("aten::mul_")->run(*swept);
    // Saved and loaded back, the module computes what the original computed.
    std::stringstream archive;
    m.save(archive);
    torch::jit::Module loaded = torch::jit::load(archive);
    c10::IValue got = loaded.forward({x, y});
    std::vector<c10::IValue> wants = want.isTuple() ? want.toTupleRef().elements().vec() : std::vector<c10::IValue>{want};
    std::vector<c10::IValue> gots = got.isTuple() ? got.toTupleRef().elements().vec() : std::vector<c10::IValue>{got};
    ASSERT_EQ(gots.size(), wants.size());
    for (size_t i = 0; i < wants.size(); ++i) {
      EXPECT_TRUE(at::allclose(wants[i].toTensor(), gots[i].toTensor()))
          << "output " << i << ", graph:\n" << *loaded.get_method("forward").graph();
    }
    EXPECT_FALSE(Canonicalize(g, options, nullptr)) << "a second run must change nothing";
  }
}

// `for p, q in zip(a, b)` loops min([len(a), len(b)]) times: once both lengths are folded, the
// minimum of the constant list is the trip count.
TEST(FoldListReadsTest, MinAndMaxOfConstantListsFold) {
  auto g = Parse(R"IR(
graph(%x : Tensor):
  %three : int = prim::Constant[value=3]()
  %five : int = prim::Constant[value=5]()
  %lens : int[] = prim::ListConstruct(%five, %three)
  %lo : int = prim::min(%lens)
  %hi : int = prim::max(%lens)
  %a : Tensor = aten::mul(%x, %lo)
  %b : Tensor = aten::mul(%a, %hi)
  %pair : int = prim::min(%three, %five)
  %c : Tensor = aten::mul(%b, %pair)
  return (%c)
)IR");
  PassCounters counters;
  EXPECT_TRUE(FoldListReads(g, &counters));
  EliminateDeadNodes(g, nullptr);
  // The list forms fold; min(int, int) is constant propagation's.
  FileCheck()
      .check_count("prim::min", 1, /*exactly=*/true)
      ->check_not("prim::max")
      ->run(*g);
  EXPECT_EQ(counters["fold_list_reads.constant_lists"], 2);
  at::Tensor x = torch::randn({2, 3});
  for (torch::jit::Node* n : g->nodes()) {
    if (n->kind() == c10::aten::mul && n->input(1)->node()->kind() == c10::prim::Constant) {
      int64_t k = torch::jit::constant_as<int64_t>(n->input(1)).value();
      EXPECT_TRUE(k == 3 || k == 5) << k;
    }
  }
}

// A comprehension over a split's pieces, two slices of the list it builds, and a `zip` loop over
// them (`xs = [t for t in torch.split(x, 4, 1)]; a = xs[:2]; b = xs[2:]`, then one add per
// pair): the pipeline leaves one add per pair of pieces, no loop, and the same numbers.
TEST(CanonicalizeTest, ZipOverSlicesOfAComprehensionUnrolls) {
  torch::jit::Module m("Pairs");
  m.define(R"TS(
def forward(self, x):
    xs = [t for t in torch.split(x, 4, 1)]
    a = xs[:2]
    b = xs[2:]
    outs: List[Tensor] = []
    for p, q in zip(a, b):
        outs.append(torch.add(p, q))
    return torch.cat(outs, 1)
)TS");
  auto g = InlinedForward(m);
  g->inputs()[1]->setType(c10::TensorType::createContiguous(at::kFloat, at::kCPU, {3, 16}));
  auto original = g->copy();
  CanonicalizeOptions options;
  options.self = m._ivalue();
  PassCounters counters;
  EXPECT_TRUE(Canonicalize(g, options, &counters));
  FileCheck()
      .check_not("prim::Loop")
      ->check_not("prim::min")
      ->check_count("aten::add", 2, /*exactly=*/true)
      ->check("aten::cat")
      ->run(*g);
  at::Tensor x = torch::randn({3, 16});
  EXPECT_TRUE(at::equal(RunGraphOn(original, {m._ivalue(), x})[0].toTensor(),
                        RunGraphOn(g, {m._ivalue(), x})[0].toTensor()));
  EXPECT_FALSE(Canonicalize(g, options, nullptr)) << "a second run must change nothing";
}

// Splits of the pieces of a split, made by unrolling `for p in torch.split(x, 8, 1): for q in
// torch.split(p, 4, 1): outs.append(q)`: the unrolled pieces have no sizes of their own, but
// each is a section of a split with constant sections, so their splits are normalized and the
// inner loops unrolled too; `items.extend(torch.split(p, 2, 1))` becomes one append per piece.
TEST(NormalizeSplitFamilyTest, SplitsOfUnrolledPiecesAreNormalized) {
  torch::jit::Module m("Nested");
  m.define(R"TS(
def forward(self, x):
    outs: List[Tensor] = []
    for p in torch.split(x, 8, 1):
        for q in torch.split(p, 4, -1):
            outs.append(torch.relu(q))
    items: List[Tensor] = []
    for p in torch.split(x, 8, 1):
        items.extend(torch.split(p, 2, 1))
    return torch.cat(outs, 1) + torch.cat([torch.relu(t) for t in items], 1)
)TS");
  for (bool typed : {true, false}) {
    auto g = InlinedForward(m);
    if (typed) g->inputs()[1]->setType(c10::TensorType::createContiguous(at::kFloat, at::kCPU, {3, 16}));
    auto original = g->copy();
    CanonicalizeOptions options;
    options.self = m._ivalue();
    Canonicalize(g, options, nullptr);
    if (!typed) {
      // Without the outer split's sizes nothing is known about its pieces: the loops stay.
      FileCheck().check("prim::Loop")->run(*g);
      continue;
    }
    FileCheck().check_not("prim::Loop")->check_not("aten::split(")->check_not("aten::extend")->run(*g);
    FileCheck().check_count("aten::split_with_sizes", 6, /*exactly=*/true)->run(*g);
    FileCheck().check_count("aten::relu", 12, /*exactly=*/true)->run(*g);
    at::Tensor x = torch::randn({3, 16});
    EXPECT_TRUE(at::equal(RunGraphOn(original, {m._ivalue(), x})[0].toTensor(),
                          RunGraphOn(g, {m._ivalue(), x})[0].toTensor()));
  }
}

// Slices of a split's list of pieces (`torch.cat(pieces[0:3], 1)`, scripted) are lists of
// those pieces: the cats read the pieces themselves, as in the traced twin.
TEST(NormalizeSplitFamilyTest, SlicesOfAListOfPiecesBecomeThosePieces) {
  torch::jit::Module m("Runs");
  m.define(R"TS(
def forward(self, x):
    pieces = torch.split(x, 4, 1)
    return torch.cat(pieces[0:3], 1) + torch.cat(pieces[-3:], 1) * torch.cat(pieces[::2], 1)
)TS");
  auto g = InlinedForward(m);
  g->inputs()[1]->setType(c10::TensorType::createContiguous(at::kFloat, at::kCPU, {3, 24}));
  auto original = g->copy();
  CanonicalizeOptions options;
  options.self = m._ivalue();
  PassCounters counters;
  EXPECT_TRUE(Canonicalize(g, options, &counters));
  FileCheck().check_not("Tensor[] = aten::slice")->check("prim::ListUnpack")->run(*g);
  FileCheck().check_count("aten::cat", 3, /*exactly=*/true)->run(*g);
  at::Tensor x = torch::randn({3, 24});
  EXPECT_TRUE(at::equal(RunGraphOn(original, {m._ivalue(), x})[0].toTensor(),
                        RunGraphOn(g, {m._ivalue(), x})[0].toTensor()));
  EXPECT_FALSE(Canonicalize(g, options, nullptr)) << "a second run must change nothing";
}

// `out = lin(x0); out += lin(x1); out += lin(x2)`: the accumulator is fresh memory that
// nothing else reads, so its in-place updates become out-of-place adds (the facts give both
// operands one dtype). A tensor also read elsewhere, a view, an operand of another dtype and a
// graph without facts keep their in-place updates.
// list(torch.split(...)) and list concatenation (`[other] + list(pieces) + [a, b]`, scripted
// Optimus shapes) are new lists of known pieces: the cat reads the pieces, as in the traced twin;
// a list(...) of a list that is written later stays a copy.
TEST(NormalizeSplitFamilyTest, CopiesAndConcatenationsOfPieceListsBecomeThePieces) {
  torch::jit::Module m("Copies");
  m.define(R"TS(
def forward(self, x):
    items = list(torch.split(x, 1, dim=1))
    squeezed = [torch.squeeze(s, 1) for s in items]
    pieces = torch.split(x * 2.0, [2, 2], 1)
    other = pieces[0] * 1.5
    joined = [other] + list(pieces) + list([pieces[1], pieces[0]])
    kept = [x, x]
    copy = list(kept)
    kept.append(x * 3.0)
    return (torch.stack(squeezed).sum(0) + torch.cat(joined, 1).sum(1, keepdim=True) +
            torch.cat(copy, 1).sum(1, keepdim=True) - torch.cat(kept, 1).sum(1, keepdim=True))
)TS");
  auto g = InlinedForward(m);
  g->inputs()[1]->setType(c10::TensorType::createContiguous(at::kFloat, at::kCPU, {3, 4}));
  auto original = g->copy();
  CanonicalizeOptions options;
  options.self = m._ivalue();
  EXPECT_TRUE(Canonicalize(g, options, nullptr));
  FileCheck().check_not("prim::Loop")->check_not("Tensor[] = aten::add")->run(*g);
  FileCheck().check_count("aten::list", 1, /*exactly=*/true)->check("aten::append")->run(*g);
  FileCheck().check_count("aten::squeeze", 4, /*exactly=*/true)->run(*g);
  at::Tensor x = torch::randn({3, 4});
  EXPECT_TRUE(at::equal(RunGraphOn(original, {m._ivalue(), x})[0].toTensor(),
                        RunGraphOn(g, {m._ivalue(), x})[0].toTensor()));
}

TEST(OutOfPlaceUpdatesTest, FreshAccumulatorUpdatedOutOfPlace) {
  const char* ir = R"IR(
graph(%x0 : Tensor, %x1 : Tensor, %x2 : Tensor, %w : Tensor, %d : Tensor):
  %none : NoneType = prim::Constant()
  %one : int = prim::Constant[value=1]()
  %zero : int = prim::Constant[value=0]()
  %a : Tensor = aten::linear(%x0, %w, %none)
  %b : Tensor = aten::linear(%x1, %w, %none)
  %s : Tensor = aten::add_(%a, %b, %one)
  %c : Tensor = aten::linear(%x2, %w, %none)
  %t : Tensor = aten::add_(%s, %c, %one)
  %e : Tensor = aten::linear(%x0, %w, %none)
  %f : Tensor = aten::mul_(%e, %c)
  %g : Tensor = aten::relu(%e)
  %v : Tensor = aten::select(%f, %zero, %zero)
  %r : Tensor = aten::select(%b, %zero, %zero)
  %h : Tensor = aten::add_(%v, %r, %one)
  %k : Tensor = aten::linear(%x1, %w, %none)
  %m : Tensor = aten::add_(%k, %d, %one)
  return (%t, %g, %h, %m)
)IR";
  auto g = Parse(ir);
  ShapeFacts facts;
  for (torch::jit::Node* n : g->nodes()) {
    for (torch::jit::Value* v : n->outputs()) {
      if (v->type()->kind() != c10::TypeKind::TensorType) continue;
      TensorFact f;
      f.sizes = {2, 3};
      f.dynamic = {true, false};
      facts.Set(v, f);
    }
  }
  for (torch::jit::Value* v : g->inputs()) {
    TensorFact f;
    f.sizes = {2, 3};
    f.dynamic = {true, false};
    f.dtype = v->debugName() == "d" ? c10::ScalarType::Double : c10::ScalarType::Float;
    facts.Set(v, f);
  }
  auto original = g->copy();
  PassCounters counters;
  EXPECT_FALSE(OutOfPlaceUpdates(g, nullptr, nullptr)) << "nothing without facts";
  EXPECT_TRUE(OutOfPlaceUpdates(g, &facts, &counters));
  EXPECT_EQ(counters["out_of_place_updates.updates"], 2);
  // The accumulator's two updates; %e is read by the relu too, %v is a view, %d a double.
  FileCheck()
      .check_count("aten::add(", 2, /*exactly=*/true)
      ->check("aten::mul_(")
      ->check_count("aten::add_(", 2, /*exactly=*/true)
      ->run(*g);
  at::Tensor w = torch::randn({3, 3});
  std::vector<c10::IValue> in = {torch::randn({2, 3}), torch::randn({2, 3}), torch::randn({2, 3}), w,
                                 torch::randn({2, 3})};
  auto want = RunGraphOn(original, in);
  auto got = RunGraphOn(g, in);
  ASSERT_EQ(want.size(), got.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(at::allclose(want[k].toTensor(), got[k].toTensor())) << k;
  EXPECT_FALSE(OutOfPlaceUpdates(g, &facts, nullptr)) << "a second run must change nothing";
}

// Two reads of `inputs[0]` (a List[Tensor] input nothing writes) are one tensor object: merged.
// Reads of a list that is appended to are not.
TEST(EliminateCommonReadsTest, ReadsOfAnUnwrittenListAtOneIndexMerge) {
  auto g = Parse(R"IR(
graph(%xs : Tensor[], %ys : Tensor[], %y : Tensor):
  %zero : int = prim::Constant[value=0]()
  %a : Tensor = aten::__getitem__(%xs, %zero)
  %b : Tensor = aten::__getitem__(%xs, %zero)
  %c : Tensor = aten::add(%a, %b, %zero)
  %d : Tensor = aten::__getitem__(%ys, %zero)
  %1 : Tensor[] = aten::append(%ys, %y)
  %e : Tensor = aten::__getitem__(%ys, %zero)
  return (%c, %d, %e)
)IR");
  PassCounters counters;
  EXPECT_TRUE(EliminateCommonReads(g, &counters));
  FileCheck()
      .check_count("aten::__getitem__(%xs", 1, /*exactly=*/true)
      ->run(*g);
  FileCheck().check_count("aten::__getitem__(%ys", 2, /*exactly=*/true)->run(*g);
}

TEST(FoldScalarTensorsTest, TracedSizeArithmeticBecomesIntArithmetic) {
  auto g = Parse(R"IR(
graph(%x : Tensor):
  %zero : int = prim::Constant[value=0]()
  %four : int = prim::Constant[value=4]()
  %n : int = aten::size(%x, %zero)
  %t : Tensor = prim::NumToTensor(%n)
  %m : Tensor = aten::mul(%t, %four)
  %i : int = aten::Int(%m)
  %l : int[] = prim::ListConstruct(%i)
  %y : Tensor = aten::reshape(%x, %l)
  return (%y)
)IR");
  PassCounters counters;
  EXPECT_TRUE(FoldScalarTensors(g, &counters));
  EliminateDeadNodes(g, nullptr);
  FileCheck().check_not("aten::Int")->check_not("prim::NumToTensor")->check("int = aten::mul")->run(*g);
  at::Tensor x = torch::randn({3, 4});
  EXPECT_TRUE(at::equal(RunGraphOn(g, {x})[0].toTensor(), x.reshape({12})));
}

TEST(FoldScalarTensorsTest, TruncatingDivisionOfUnknownSignIsKept) {
  auto g = Parse(R"IR(
graph(%a : int):
  %three : int = prim::Constant[value=3]()
  %t : Tensor = prim::NumToTensor(%a)
  %m : Tensor = aten::div(%t, %three)
  %i : int = aten::Int(%m)
  return (%i)
)IR");
  EXPECT_FALSE(FoldScalarTensors(g, nullptr));  // -7 / 3: trunc -2, floor -3
}

TEST(UnrollKnownLoopsTest, ConstantTripCountUnrolledWhileLoopKept) {
  auto g = Parse(R"IR(
graph(%x : Tensor):
  %n : int = prim::Constant[value=3]()
  %t : bool = prim::Constant[value=1]()
  %y : Tensor = prim::Loop(%n, %t, %x)
    block0(%i : int, %acc : Tensor):
      %r : Tensor = aten::relu(%acc)
      -> (%t, %r)
  return (%y)
)IR");
  PassCounters counters;
  EXPECT_TRUE(UnrollKnownLoops(g, &counters));
  FileCheck().check_not("prim::Loop")->check_count("aten::relu", 3, true)->run(*g);
  EXPECT_EQ(counters["unroll_loops.loops"], 1);
}

// A cat of more than kMaxFusedCatInputs tensors reads its list through aten::list, which the
// TensorExpr fuser does not take (it fuses only a cat of a ListConstruct used once); a smaller cat,
// and a cat whose list has another use, are left as they are. The values are the same.
TEST(KeepLargeCatsUnfusedTest, ACatOfManyTensorsReadsACopyOfItsList) {
  std::string ir = "graph(%x : Tensor):\n  %one : int = prim::Constant[value=1]()\n";
  std::string big = "  %big : Tensor[] = prim::ListConstruct(";
  for (int i = 0; i < 12; ++i) {
    ir += "  %r" + std::to_string(i) + " : Tensor = aten::relu(%x)\n";
    big += (i ? ", %r" : "%r") + std::to_string(i);
  }
  ir += big + ")\n";
  ir += "  %small : Tensor[] = prim::ListConstruct(%r0, %r1, %r2)\n";
  ir += "  %a : Tensor = aten::cat(%big, %one)\n  %b : Tensor = aten::cat(%small, %one)\n";
  ir += "  return (%a, %b)\n";
  auto g = Parse(ir);
  std::vector<c10::IValue> before = RunGraphOn(g, {torch::randn({2, 3})});
  int64_t cats = 0;
  ASSERT_TRUE(KeepLargeCatsUnfused(g, &cats));
  EXPECT_EQ(cats, 1);
  FileCheck().check_count("aten::list(", 1, true)->run(*g);
  std::vector<size_t> listed, direct;  // list sizes of the cats through aten::list, and not
  for (torch::jit::Node* n : g->nodes()) {
    if (n->kind() != c10::aten::cat) continue;
    torch::jit::Node* def = n->input(0)->node();
    if (def->kind() == c10::aten::list) {
      listed.push_back(def->input(0)->node()->inputs().size());
    } else {
      direct.push_back(def->inputs().size());
    }
  }
  EXPECT_EQ(listed, std::vector<size_t>{12});
  EXPECT_EQ(direct, std::vector<size_t>{3});
  EXPECT_FALSE(KeepLargeCatsUnfused(g));  // the copied list is no longer the fuser's
  auto g2 = Parse(ir);
  std::vector<c10::IValue> input = {torch::randn({2, 3})};
  std::vector<c10::IValue> expected = RunGraphOn(g2, input);
  KeepLargeCatsUnfused(g2);
  std::vector<c10::IValue> got = RunGraphOn(g2, input);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got[0].toTensor().equal(expected[0].toTensor()));
  EXPECT_TRUE(got[1].toTensor().equal(expected[1].toTensor()));
  EXPECT_EQ(before.size(), 2u);
  // A threshold above the list's size leaves the big cat too.
  EXPECT_FALSE(KeepLargeCatsUnfused(Parse(ir), nullptr, 12));
}

}  // namespace
}  // namespace sentier

namespace sentier {
namespace {

// torch.export's dtype guard before a cast goes; the cast and what it computes stay.
TEST(DropExportGuardsTest, TheGuardBeforeACastGoesTheCastStays) {
  auto g = Parse(R"IR(
graph(%x : Tensor):
  %dtype : int = prim::Constant[value=6]()
  %none : NoneType = prim::Constant()
  %f : bool = prim::Constant[value=0]()
  %y : Tensor = aten::to(%x, %dtype, %f, %f, %none)
  return (%y))IR");
  // The parser reads no node without results: the guard is made here, before the cast.
  torch::jit::Node* cast = g->outputs()[0]->node();
  torch::jit::Value* none = cast->input(4);
  torch::jit::Node* guard = g->create(c10::Symbol::fromQualString("aten::_assert_tensor_metadata"),
                                      {g->inputs()[0], none, none, cast->input(1), none, none}, 0);
  guard->insertBefore(cast);
  ASSERT_NE(guard->maybeSchema(), nullptr);
  PassCounters counters;
  EXPECT_TRUE(DropExportGuards(g, &counters));
  FileCheck().check_not("_assert_tensor_metadata")->check("aten::to")->run(*g);
  EXPECT_EQ(counters["drop_export_guards.guards"], 1);
  at::Tensor x = at::randn({3}, at::kDouble);  // the guard would have refused a double
  EXPECT_TRUE(at::equal(RunGraphOn(g, {x})[0].toTensor(), x.to(at::kFloat)));
  EXPECT_FALSE(DropExportGuards(g, &counters));
}

}  // namespace
}  // namespace sentier
