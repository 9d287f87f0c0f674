// corpus_test.cc — every archive of the Python-authored corpus through the whole pipeline.
//
// The corpus (make_corpus.py, MANIFEST.json) holds recommendation models written the way PyTorch
// users write them — ModuleList loops with append, int and list attributes, F.* calls, list, dict
// and Optional inputs, BatchNorm buffers — scripted and traced, saved by torch 1.13 and 2.x. For
// each archive: load it with its sample inputs (conformed to forward's schema), optimize it with
// the shipped rules, save the artifact and load it back; the manifest's expected rules must have
// fired, and the artifact must compute what the original computes — outputs and the gradients of
// every input and parameter, on the samples, on fresh inputs and at twice the batch
// (EquivalenceChecker, CPU). A scripted model and its traced twin must come out within 10% of
// each other's aten-op count per forward.
//
// Archives written by a newer torch than this LibTorch reads are skipped, visibly.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/ir.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "passes/optimizer.h"
#include "runtime/equivalence_checker.h"
#include "runtime/graph_runner.h"
#include "runtime/model_io.h"
#include "runtime/torch_settings.h"

namespace sentier {
namespace {

// The LibTorch switches every Sentier tool runs with (runtime/torch_settings.h).
const bool kTorchSettings = (ApplyTorchSettings(), true);

std::string CorpusDir() {
  for (const char* var : {"TEST_SRCDIR", "RUNFILES_DIR"}) {
    if (const char* v = std::getenv(var)) return absl::StrCat(v, "/sentier/testdata/models");
  }
  return "testdata/models";
}

const nlohmann::json& Manifest() {
  static const nlohmann::json manifest = [] {
    std::ifstream in(CorpusDir() + "/MANIFEST.json");
    return nlohmann::json::parse(in);
  }();
  return manifest;
}

const nlohmann::json* Entry(const std::string& model) {
  for (const nlohmann::json& e : Manifest()["models"]) {
    if (e["name"] == model) return &e;
  }
  return nullptr;
}

struct Archive {
  std::string torch;  // "torch1.13", "torch2.11"
  std::string model;
  std::string kind;   // "scripted", "traced"
  std::string path() const { return absl::StrCat(CorpusDir(), "/", torch, "/", model, "/", kind, ".pt"); }
  std::string inputs() const { return absl::StrCat(CorpusDir(), "/", torch, "/", model, "/inputs.pt"); }
};

std::vector<Archive> AllArchives() {
  std::vector<Archive> out;
  for (const char* torch : {"torch1.13", "torch2.11"}) {
    for (const nlohmann::json& e : Manifest()["models"]) {
      std::string model = e["name"];
      // `archives` names the torch versions that wrote the model's archives (default: both).
      if (e.contains("archives")) {
        const auto& written = e["archives"];
        if (std::find(written.begin(), written.end(), torch) == written.end()) continue;
      }
      out.push_back({torch, model, "scripted"});
      if (e.value("traced", false)) out.push_back({torch, model, "traced"});
    }
  }
  return out;
}

struct Optimized {
  Model model;
  std::vector<c10::IValue> inputs;  // forward's arguments (no self)
  OptimizeReport report;
  int64_t aten_ops_after = -1;
};

// Loads and optimizes one archive; sets *skip when this LibTorch cannot read the archive.
absl::StatusOr<Optimized> LoadAndOptimize(const Archive& a, std::string* skip, bool stacked = false) {
  std::ifstream probe(a.path());
  if (!probe.good()) return absl::NotFoundError(absl::StrCat(a.path(), " is missing"));
  auto model = LoadModel(a.path());
  if (!model.ok()) {
    if (a.torch != "torch1.13") {
      *skip = absl::StrCat(a.torch, " archive not readable by this LibTorch: ", model.status().message());
    }
    return model.status();
  }
  auto inputs = LoadSampleInputsFor(a.inputs(), model->module);
  if (!inputs.ok()) return inputs.status();
  static const std::shared_ptr<const RuleSet> rules = [] {
    auto r = LoadRules({DefaultRulesDir()});
    if (!r.ok()) throw std::runtime_error(std::string(r.status().message()));
    return *r;
  }();
  Optimized o{std::move(*model), std::move(*inputs), {}, -1};
  std::vector<c10::IValue> samples = {o.model.module._ivalue()};
  samples.insert(samples.end(), o.inputs.begin(), o.inputs.end());
  OptimizeOptions opts;
  opts.self = o.model.module._ivalue();
  opts.sample_inputs = &samples;
  opts.stacked_parameters = stacked;
  auto report = OptimizeGraph(o.model.graph, *rules, opts);
  if (!report.ok()) return report.status();
  o.report = *report;
  auto ops = CountAtenOps(o.model.graph, samples);
  if (!ops.ok()) return ops.status();
  o.aten_ops_after = *ops;
  return o;
}

void PrintTo(const Archive& a, std::ostream* os) { *os << a.torch << "/" << a.model << "/" << a.kind; }

class CorpusTest : public ::testing::TestWithParam<Archive> {};

// The rules `expected` names must fire ("a|b": one of them; scripted and traced code spell some
// idioms differently), and no rule may fail or be stopped.
void ExpectRulesFired(const OptimizeReport& report, const nlohmann::json& expected) {
  for (const std::string& want : expected) {
    bool any = false;
    for (absl::string_view rule : absl::StrSplit(want, '|')) {
      auto it = report.stats.applications.find(std::string(rule));
      any = any || (it != report.stats.applications.end() && it->second > 0);
    }
    EXPECT_TRUE(any) << "the manifest expects " << want << " to fire";
  }
  EXPECT_TRUE(report.stats.stopped.empty());
  EXPECT_TRUE(report.stats.errors.empty()) << report.stats.first_error.begin()->second;
}

std::string FiredRules(const OptimizeReport& report) {
  std::vector<std::string> fired;
  for (const auto& [name, n] : report.stats.applications) fired.push_back(absl::StrCat(name, " x", n));
  return absl::StrJoin(fired, ", ");
}

// Saves the optimized archive, loads it back and checks it against the original: outputs and
// the gradients of every input and parameter, on the samples, a random set and twice the batch.
// A manifest entry's `no_batch_x2` says why its inputs cannot be doubled along dim 0 (DLRM's
// stacked [tables, batch] indices): that trial may be skipped there.
void ExpectEquivalentArtifact(const Archive& a, Optimized& o, const std::string& suffix) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string out = absl::StrCat(tmp ? tmp : "/tmp", "/", a.torch, "-", a.model, "-", a.kind, suffix);
  ASSERT_TRUE(SaveModel(o.model, out).ok());
  auto reloaded = LoadModel(out);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  auto original = LoadModel(a.path());
  ASSERT_TRUE(original.ok());
  // The artifact's state is the original's: optimizing runs the model on its samples (shape
  // facts, op counts), and those runs must not train it (BatchNorm's running statistics).
  std::map<std::string, at::Tensor> artifact_buffers;
  for (const auto& b : reloaded->module.named_buffers(/*recurse=*/true)) artifact_buffers[b.name] = b.value;
  for (const auto& b : original->module.named_buffers(/*recurse=*/true)) {
    auto it = artifact_buffers.find(b.name);
    if (it == artifact_buffers.end()) continue;  // batched away (stacked layouts are tested elsewhere)
    EXPECT_TRUE(at::equal(it->second, b.value)) << "buffer " << b.name << " changed while optimizing";
  }
  CheckOptions check;  // CPU, outputs and gradients, samples + 1 random set + batch x2
  check.trials = 2;
  auto r = EquivalenceChecker(check).Check(original->module, reloaded->module, o.inputs);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->equivalent) << r->first_failure;
  bool param_grads = false, batch_x2 = false, random = false;
  for (const CheckFinding& f : r->findings) {
    param_grads |= f.what.rfind("grad of param ", 0) == 0;
    batch_x2 |= f.trial == "batch x2";
    random |= f.trial == "random 1";
  }
  EXPECT_TRUE(param_grads) << "no parameter gradient was compared";
  batch_x2 |= Entry(a.model)->contains("no_batch_x2");
  EXPECT_TRUE(random && batch_x2) << "trials skipped: " << absl::StrJoin(r->skipped_trials, "; ");
}

TEST_P(CorpusTest, OptimizedArtifactIsEquivalentAndExpectedRulesFire) {
  const Archive& a = GetParam();
  std::string skip;
  auto o = LoadAndOptimize(a, &skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_TRUE(o.ok()) << a.path() << ": " << o.status();
  const nlohmann::json* entry = Entry(a.model);
  ASSERT_NE(entry, nullptr);
  SCOPED_TRACE(absl::StrCat(a.path(), ": fired ", FiredRules(o->report)));
  ExpectRulesFired(o->report, (*entry)["expect_rules"]);
  ExpectEquivalentArtifact(a, *o, ".opt.pt");
}

// Embedding lookups in a graph's top block.
int64_t Lookups(const torch::jit::Graph& graph) {
  int64_t n = 0;
  for (const torch::jit::Node* node : graph.nodes()) {
    n += node->kind() == c10::aten::embedding_bag || node->kind() == c10::aten::embedding;
  }
  return n;
}

// Models whose manifest entry has `stacked_expect_rules`, optimized with --param_layout=stacked:
// those rules fire, something is stored stacked, the lookups left are the entry's
// `stacked_lookups` (one per group of tables of one width and pooling), and the artifact is
// equivalent (gradients compared through the stored layout).
class CorpusStackedTest : public ::testing::TestWithParam<Archive> {};

TEST_P(CorpusStackedTest, StackedLayoutFiresExpectedRulesAndStaysEquivalent) {
  const Archive& a = GetParam();
  std::string skip;
  auto o = LoadAndOptimize(a, &skip, /*stacked=*/true);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_TRUE(o.ok()) << a.path() << ": " << o.status();
  SCOPED_TRACE(absl::StrCat(a.path(), " (stacked): fired ", FiredRules(o->report)));
  ExpectRulesFired(o->report, (*Entry(a.model))["stacked_expect_rules"]);
  EXPECT_FALSE(o->report.param_layout.empty());
  if (Entry(a.model)->contains("stacked_lookups")) {
    EXPECT_EQ(Lookups(*o->model.graph), (*Entry(a.model))["stacked_lookups"].get<int64_t>());
  }
  ExpectEquivalentArtifact(a, *o, ".stacked.pt");
}

std::vector<Archive> StackedArchives() {
  std::vector<Archive> out;
  for (const Archive& a : AllArchives()) {
    if (Entry(a.model)->contains("stacked_expect_rules")) out.push_back(a);
  }
  return out;
}

std::string ArchiveName(const ::testing::TestParamInfo<Archive>& info) {
  std::string name = absl::StrCat(info.param.torch, "_", info.param.model, "_", info.param.kind);
  for (char& c : name) {
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Corpus, CorpusTest, ::testing::ValuesIn(AllArchives()), ArchiveName);
INSTANTIATE_TEST_SUITE_P(Corpus, CorpusStackedTest, ::testing::ValuesIn(StackedArchives()), ArchiveName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CorpusStackedTest);

// Scripted and traced twins reach the same rewritten form.
class CorpusTwinsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CorpusTwinsTest, ScriptedAndTracedWithinTenPercent) {
  std::string skip;
  auto s = LoadAndOptimize({"torch1.13", GetParam(), "scripted"}, &skip);
  ASSERT_TRUE(s.ok()) << s.status();
  auto t = LoadAndOptimize({"torch1.13", GetParam(), "traced"}, &skip);
  ASSERT_TRUE(t.ok()) << t.status();
  double lo = std::min(s->aten_ops_after, t->aten_ops_after);
  double hi = std::max(s->aten_ops_after, t->aten_ops_after);
  EXPECT_LE(hi, lo * 1.1) << GetParam() << ": scripted " << s->aten_ops_after << " vs traced "
                          << t->aten_ops_after << " aten ops per forward after optimization";
}

std::vector<std::string> TracedModels() {
  std::vector<std::string> out;
  for (const nlohmann::json& e : Manifest()["models"]) {
    if (e.value("traced", false)) out.push_back(e["name"]);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Corpus, CorpusTwinsTest, ::testing::ValuesIn(TracedModels()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace sentier
