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
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <ATen/ATen.h>
#include <torch/csrc/jit/ir/ir.h>

#include "absl/strings/str_cat.h"
#include "passes/optimizer.h"
#include "runtime/torch_settings.h"
#include "testdata/models/corpus_harness.h"

namespace sentier {
namespace {

using corpus::Archive;
using corpus::ExpectRulesFired;
using corpus::FiredRules;
using corpus::LoadAndOptimize;
using corpus::Optimized;

// The LibTorch switches every Sentier tool runs with (runtime/torch_settings.h).
const bool kTorchSettings = (ApplyTorchSettings(), true);

const std::string& CorpusDir() {
  static const std::string dir = corpus::RunfilesPath("testdata/models");
  return dir;
}

const nlohmann::json& Manifest() { return corpus::ManifestOf(CorpusDir()); }
const nlohmann::json* Entry(const std::string& model) { return corpus::EntryOf(CorpusDir(), model); }
std::vector<Archive> AllArchives() { return corpus::ArchivesOf(CorpusDir()); }

class CorpusTest : public ::testing::TestWithParam<Archive> {};

// A manifest entry's `no_batch_x2` says why its inputs cannot be doubled along dim 0 (DLRM's
// stacked [tables, batch] indices): that trial may be skipped there.
void ExpectEquivalent(const Archive& a, Optimized& o, const std::string& suffix) {
  corpus::ExpectEquivalentArtifact(a, o, suffix, Entry(a.model)->contains("no_batch_x2"));
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
  ExpectRulesFired(o->report, corpus::ExpectedRules(*entry, (*entry)["expect_rules"], a));
  ExpectEquivalent(a, *o, ".opt.pt");
}

// Embedding lookups in a graph's top block.
int64_t Lookups(const torch::jit::Graph& graph) {
  int64_t n = 0;
  for (const torch::jit::Node* node : graph.nodes()) {
    n += node->kind() == c10::aten::embedding_bag || node->kind() == c10::aten::embedding;
  }
  return n;
}

// The stored tensors of `layout` that are buffers of `module` (a joined batch norm's running
// statistics and step counters).
int64_t StoredBuffers(const torch::jit::Module& module, const ParamLayout& layout) {
  std::set<std::string> buffers;
  for (const auto& nb : module.named_buffers()) buffers.insert(nb.name);
  int64_t n = 0;
  for (const StackedParameter& p : layout.stacked) n += buffers.count(p.name);
  return n;
}

// Models whose manifest entry has `stacked_expect_rules`, optimized with --param_layout=stacked:
// those rules fire, something is stored stacked, the lookups left are the entry's
// `stacked_lookups` (one per width and pooling, a width's sum and weighted groups in one), the
// stored buffers the entry's `stacked_buffers` (not for exported programs, whose batch norms stay
// per member), and the artifact is equivalent (gradients compared through the stored layout).
class CorpusStackedTest : public ::testing::TestWithParam<Archive> {};

TEST_P(CorpusStackedTest, StackedLayoutFiresExpectedRulesAndStaysEquivalent) {
  const Archive& a = GetParam();
  std::string skip;
  auto o = LoadAndOptimize(a, &skip, /*stacked=*/true);
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_TRUE(o.ok()) << a.path() << ": " << o.status();
  SCOPED_TRACE(absl::StrCat(a.path(), " (stacked): fired ", FiredRules(o->report)));
  ExpectRulesFired(o->report, corpus::ExpectedRules(*Entry(a.model), (*Entry(a.model))["stacked_expect_rules"], a));
  EXPECT_FALSE(o->report.param_layout.empty());
  if (Entry(a.model)->contains("stacked_lookups")) {
    EXPECT_EQ(Lookups(*o->model.graph), (*Entry(a.model))["stacked_lookups"].get<int64_t>());
  }
  if (Entry(a.model)->contains("stacked_buffers") && !a.exported()) {
    EXPECT_EQ(StoredBuffers(o->model.module, o->report.param_layout),
              (*Entry(a.model))["stacked_buffers"].get<int64_t>());
  }
  ExpectEquivalent(a, *o, ".stacked.pt");
}

std::vector<Archive> StackedArchives() {
  std::vector<Archive> out;
  for (const Archive& a : AllArchives()) {
    if (Entry(a.model)->contains("stacked_expect_rules")) out.push_back(a);
  }
  return out;
}

std::string ArchiveName(const ::testing::TestParamInfo<Archive>& info) {
  return corpus::ArchiveName(info.param);
}

INSTANTIATE_TEST_SUITE_P(Corpus, CorpusTest, ::testing::ValuesIn(AllArchives()), ArchiveName);
INSTANTIATE_TEST_SUITE_P(Corpus, CorpusStackedTest, ::testing::ValuesIn(StackedArchives()), ArchiveName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CorpusStackedTest);

// Scripted and traced twins reach the same rewritten form.
class CorpusTwinsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CorpusTwinsTest, ScriptedAndTracedWithinTenPercent) {
  std::string skip;
  auto s = LoadAndOptimize({CorpusDir(), "torch1.13", GetParam(), "scripted"}, &skip);
  ASSERT_TRUE(s.ok()) << s.status();
  auto t = LoadAndOptimize({CorpusDir(), "torch1.13", GetParam(), "traced"}, &skip);
  ASSERT_TRUE(t.ok()) << t.status();
  double lo = std::min(s->aten_ops_after, t->aten_ops_after);
  double hi = std::max(s->aten_ops_after, t->aten_ops_after);
  EXPECT_LE(hi, lo * 1.1) << GetParam() << ": scripted " << s->aten_ops_after << " vs traced "
                          << t->aten_ops_after << " aten ops per forward after optimization";
}

// Models with both a scripted and a traced archive (a model that does not script has no twin).
std::vector<std::string> TracedModels() {
  std::vector<std::string> out;
  for (const nlohmann::json& e : Manifest()["models"]) {
    if (e.value("traced", false) && e.value("scripted", true)) out.push_back(e["name"]);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Corpus, CorpusTwinsTest, ::testing::ValuesIn(TracedModels()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace sentier
