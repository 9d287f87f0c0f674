// rules_test.cc — golden IR tests for the rule library, FileCheck-style and numeric.
//
// Each testdata/rules/*.ir file holds one graph with complete input types, plus directives:
//   # RULES: <RE2>         only rules whose name matches run (default: the whole library)
//   # FIRES: <rule>        the rule must fire at least once
//   # NOT-FIRES: <rule>    the rule must not fire (negative case)
//   # LAYOUT: stacked      rules see --param_layout=stacked, and the %param_* inputs as parameters
//                          a stored stack can hold (storable_parameters()); nothing is stored:
//                          the stacks stay in the graph, which the numeric check runs
//   # CHECK...: ...        FileCheck lines, run on the optimized graph
// Inputs named %param_* are parameters passed as inputs: they do not follow the batch size;
// %param_buffer_* are buffers (a batch norm's running statistics): no gradient is taken of them.
// Every file is also a numeric test: EquivalenceChecker::CheckGraphs runs the original and the
// optimized graph on the same random inputs (and at twice the batch size, when the original
// accepts it); outputs and gradients of every floating input must agree with the checker's
// float64-referenced tolerance, the judgement sentier_check and sentierd use.
#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/testing/file_check.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "passes/optimizer.h"
#include "passes/sample_inputs.h"
#include "runtime/equivalence_checker.h"
#include "runtime/graph_runner.h"
#include "runtime/model_io.h"
#include "runtime/torch_settings.h"

namespace sentier {
namespace {

// The LibTorch switches every Sentier tool runs with (runtime/torch_settings.h).
const bool kTorchSettings = (ApplyTorchSettings(), true);

std::string DataDir() {
  if (const char* src = std::getenv("TEST_SRCDIR")) return absl::StrCat(src, "/sentier/testdata/rules");
  return "testdata/rules";
}

std::vector<std::string> TestFiles() {
  std::vector<std::string> out;
  DIR* dir = ::opendir(DataDir().c_str());
  if (dir == nullptr) return out;
  while (struct dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (absl::EndsWith(name, ".ir")) out.push_back(name);
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

std::shared_ptr<const RuleSet> Library() {
  static std::shared_ptr<const RuleSet> rules = [] {
    auto r = LoadRules({DefaultRulesDir()});
    if (!r.ok()) {
      ADD_FAILURE() << r.status();
      return std::shared_ptr<const RuleSet>();
    }
    return *r;
  }();
  return rules;
}

struct Case {
  std::string text;
  std::string enable;
  std::vector<std::string> fires, not_fires;
  bool stacked = false;
};

Case ReadCase(const std::string& file) {
  Case c;
  auto text = ReadFile(absl::StrCat(DataDir(), "/", file));
  EXPECT_TRUE(text.ok()) << text.status();
  c.text = text.ok() ? *text : "";
  for (absl::string_view line : absl::StrSplit(c.text, '\n')) {
    line = absl::StripLeadingAsciiWhitespace(line);
    if (absl::ConsumePrefix(&line, "# RULES:")) c.enable = std::string(absl::StripAsciiWhitespace(line));
    if (absl::ConsumePrefix(&line, "# FIRES:")) c.fires.emplace_back(absl::StripAsciiWhitespace(line));
    if (absl::ConsumePrefix(&line, "# LAYOUT:")) {
      std::string layout(absl::StripAsciiWhitespace(line));
      EXPECT_TRUE(layout == "stacked" || layout == "original") << file << ": LAYOUT " << layout;
      c.stacked = layout == "stacked";
    }
    if (absl::ConsumePrefix(&line, "# NOT-FIRES:")) {
      c.not_fires.emplace_back(absl::StripAsciiWhitespace(line));
    }
  }
  return c;
}

struct Outcome {
  std::shared_ptr<torch::jit::Graph> original, optimized;
  OptimizeReport report;
  std::vector<c10::IValue> inputs;
};

Outcome Optimize(const std::string& file, const Case& c) {
  Outcome o;
  auto model = LoadModel(absl::StrCat(DataDir(), "/", file));
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return o;
  o.original = model->graph->copy();
  o.optimized = model->graph;
  auto inputs = RandomInputsFor(*o.original, /*seed=*/1, /*batch_scale=*/1);
  EXPECT_TRUE(inputs.ok()) << inputs.status();
  if (!inputs.ok()) return o;
  o.inputs = *inputs;
  auto rules = Library()->Filter(c.enable, "");
  EXPECT_TRUE(rules.ok()) << rules.status();
  OptimizeOptions opts;
  opts.sample_inputs = &o.inputs;
  opts.fixed_inputs = ParamInputs(*o.original);
  if (c.stacked) {
    opts.stacked_parameters = true;
    opts.storable_parameter = [](const torch::jit::Value* v) {
      return v->node()->kind() == c10::prim::Param && absl::StartsWith(v->debugName(), "param_");
    };
  }
  auto report = OptimizeGraph(o.optimized, **rules, opts);
  EXPECT_TRUE(report.ok()) << report.status();
  if (report.ok()) o.report = *report;
  return o;
}

class RuleGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RuleGoldenTest, RewritesAndKeepsNumbers) {
  ASSERT_NE(Library(), nullptr);
  const std::string file = GetParam();
  Case c = ReadCase(file);
  Outcome o = Optimize(file, c);
  ASSERT_NE(o.optimized, nullptr);
  SCOPED_TRACE(absl::StrCat(file, "\noptimized:\n", o.optimized->toString()));
  for (const std::string& r : c.fires) {
    EXPECT_GT(o.report.stats.applications[r], 0) << "rule " << r << " did not fire";
  }
  for (const std::string& r : c.not_fires) {
    EXPECT_EQ(o.report.stats.applications[r], 0) << "rule " << r << " fired";
  }
  if (absl::StrContains(c.text, "# CHECK")) {
    try {
      torch::jit::testing::FileCheck().run(c.text, *o.optimized);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "FileCheck failed: " << e.what();
    }
  }
  // Numbers: the project's one checker (outputs and the gradients of every floating input,
  // against a float64 run of the original) at the sample batch size, on fresh inputs, and at
  // twice the batch wherever the original accepts it.
  CheckOptions check;
  check.trials = 2;
  check.fixed_inputs = ParamInputs(*o.original);
  check.buffer_inputs = BufferInputs(*o.original);
  auto r = EquivalenceChecker(check).CheckGraphs(o.original, o.optimized, o.inputs);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->equivalent) << r->first_failure;
  if (RunGraph(o.original, DoubleBatch(o.inputs, check.fixed_inputs)).ok()) {
    EXPECT_TRUE(r->skipped_trials.empty()) << absl::StrJoin(r->skipped_trials, "; ");
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, RuleGoldenTest, ::testing::ValuesIn(TestFiles()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param.substr(0, info.param.size() - 3);
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

// Every shipped rule has a golden file where it fires and one where it must not.
TEST(RuleLibraryTest, EveryRuleHasPositiveAndNegativeGoldenTests) {
  ASSERT_NE(Library(), nullptr);
  std::set<std::string> fired, negative;
  for (const std::string& file : TestFiles()) {
    Case c = ReadCase(file);
    Outcome o = Optimize(file, c);
    for (const auto& [name, n] : o.report.stats.applications) {
      if (n > 0 && std::find(c.fires.begin(), c.fires.end(), name) != c.fires.end()) {
        fired.insert(name);
      }
    }
    for (const std::string& r : c.not_fires) {
      if (o.report.stats.applications[r] == 0) negative.insert(r);
    }
  }
  for (size_t i = 0; i < Library()->size(); ++i) {
    const std::string& name = Library()->rule(i).name;
    EXPECT_TRUE(fired.count(name)) << "no golden test where rule " << name << " fires";
    EXPECT_TRUE(negative.count(name)) << "no negative golden test for rule " << name;
  }
}

TEST(RuleLibraryTest, ShipsAtLeastTwelveVerticalRules) {
  ASSERT_NE(Library(), nullptr);
  int vertical = 0;
  for (size_t i = 0; i < Library()->size(); ++i) vertical += Library()->rule(i).family == "vertical";
  EXPECT_GE(vertical, 12);
}

// Subsets by exact names (the gate's selections): names are never patterns, order is kept.
TEST(RuleLibraryTest, SubsetsByNameKeepLoadOrder) {
  const RuleSet& all = *Library();
  ASSERT_GE(all.size(), 3u);
  std::string first = all.rule(0).name, third = all.rule(2).name;
  auto without = all.Without({first, third, "no_such_rule"});
  ASSERT_EQ(without->size(), all.size() - 2);
  for (size_t i = 0, j = 0; i < all.size(); ++i) {
    if (i == 0 || i == 2) continue;
    EXPECT_EQ(without->rule(j++).name, all.rule(i).name);
  }
  EXPECT_EQ(all.Without({"batch_.*", ".*"})->size(), all.size());  // not regexes
  EXPECT_EQ(all.Without({})->size(), all.size());
  EXPECT_EQ(all.Only({})->size(), 0u);
  auto only = all.Only({third, first});
  ASSERT_EQ(only->size(), 2u);
  EXPECT_EQ(only->rule(0).name, first);
  EXPECT_EQ(only->rule(1).name, third);
}

}  // namespace
}  // namespace sentier
