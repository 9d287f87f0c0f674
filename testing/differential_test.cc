// differential_test.cc — randomized differential test of the optimizer on a fixed seed set.
//
// Each seed gives one random graph (testing/random_graph.h); the shipped rule library optimizes
// it, and the optimized graph must compute the same outputs and gradients (also at twice the
// batch size) and print as text that parses back. A mismatch prints the seed, the smallest
// failing graph size and both graphs. The coverage check reports rules that never fire on the
// seed set.
#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "passes/rule_parser.h"
#include "passes/rule_set.h"
#include "runtime/model_io.h"
#include "testing/random_graph.h"
#include "runtime/torch_settings.h"

namespace sentier {
namespace difftest {
namespace {

// The LibTorch switches every Sentier tool runs with (runtime/torch_settings.h).
const bool kTorchSettings = (ApplyTorchSettings(), true);

constexpr uint64_t kFirstSeed = 1;
constexpr int kSeeds = 1500;  // ~35 s in fastbuild; enough for every rule to fire

// Seeds of the fixed set that expose known engine bugs (TESTING.md, "Findings"): reported, not
// failed, so the suite stays green until the engine is fixed; drop a seed once it passes.
// (397, where batch_gelu grouped a slice with a fixed dim-0 size and a batch-following input, is
// fixed: shape() now marks batch-following dims.)
const std::set<uint64_t> kKnownEngineBugs = {};

// Seeds whose optimized graph differs from the original only by gradient rounding in an
// ill-conditioned graph, beyond the checker's allowance (docs/testing.md, seed 18925 of the long
// run is the same case): reported, not failed, while the failure is that gradient (any other
// failure of the seed fails). 449 (with LibTorch 2.11's kernels; 1.13's passed): batch_layernorm
// groups layer_norms over 2 elements, whose gradient is proportional to 1 / |a - b|; at batch x2
// input[5]'s gradient is off by 9.5e-7, 12.5% of its float64 value against the original's 2.2%.
// 66: eliminate_common_tensor_ops makes two equal computations one (checked with the pass turned
// off: the seed then passes); autograd then sums the gradients of their uses before that node's
// backward instead of after it, and in this graph (divisions by exps of the inputs) one order
// overflows to inf where the other stays finite: the same function, another rounding.
const std::map<uint64_t, std::string> kKnownRoundingCases = {
    {66, "FAILED_PRECONDITION: grad of input[6] on samples inputs: NaN or inf where the reference"},
    {449, "FAILED_PRECONDITION: grad of input[5] differs on batch x2 inputs: "},
};

struct FixedRun {
  std::shared_ptr<const RuleSet> rules;
  std::map<std::string, int64_t> fired;  // rule -> graphs where it fired
  int valid = 0;
  int known = 0;
  std::vector<std::string> failures;
};

const FixedRun& FixedSet() {
  static const FixedRun* run = [] {
    auto* r = new FixedRun;
    auto rules = LoadRules({DefaultRulesDir()});
    if (!rules.ok()) {
      ADD_FAILURE() << rules.status();
      return r;
    }
    r->rules = *rules;
    for (uint64_t s = kFirstSeed; s < kFirstSeed + kSeeds; ++s) {
      DiffResult d = RunDifferential(**rules, s, StepsForSeed(s));
      if (!d.valid) continue;
      r->valid++;
      for (const auto& [name, n] : d.applications) {
        if (n > 0) r->fired[name]++;
      }
      if (d.ok()) continue;
      if (kKnownEngineBugs.count(s)) {
        std::cout << "known engine bug (not failed): " << FormatFailure(d) << "\n";
        r->known++;
        continue;
      }
      auto rounding = kKnownRoundingCases.find(s);
      if (rounding != kKnownRoundingCases.end() && absl::StartsWith(d.failure, rounding->second)) {
        std::cout << "known rounding case (not failed): " << FormatFailure(d) << "\n";
        r->known++;
        continue;
      }
      r->failures.push_back(FormatFailure(Minimize(**rules, d)));
    }
    return r;
  }();
  return *run;
}

TEST(DifferentialTest, OptimizedGraphsMatchOriginals) {
  const FixedRun& run = FixedSet();
  ASSERT_NE(run.rules, nullptr);
  EXPECT_GE(run.valid, kSeeds * 9 / 10) << "the generator made too many graphs that do not run";
  for (const std::string& f : run.failures) ADD_FAILURE() << f;
}

TEST(DifferentialTest, EveryRuleFiresOnSomeGeneratedGraph) {
  const FixedRun& run = FixedSet();
  ASSERT_NE(run.rules, nullptr);
  std::vector<std::string> never;
  for (size_t i = 0; i < run.rules->size(); ++i) {
    const std::string& name = run.rules->rule(i).name;
    if (run.fired.count(name) == 0) never.push_back(name);
  }
  std::vector<std::string> counts;
  for (const auto& [name, n] : run.fired) counts.push_back(name + "=" + std::to_string(n));
  std::cout << "rules fired (graphs): " << absl::StrJoin(counts, " ") << "\n";
  EXPECT_TRUE(never.empty()) << "rules that never fired on " << kSeeds
                             << " generated graphs: " << absl::StrJoin(never, ", ");
}

// The harness must catch wrong rules, whatever its allowance for rounding (the checker's
// float64-referenced tolerance): each planted rule below changes values or gradients wherever
// it fires.
TEST(DifferentialTest, PlantedWrongRulesAreCaught) {
  struct Planted {
    const char* name;
    const char* text;
  };
  const Planted planted[] = {
      {"cat_wrong_dim", R"(
rule planted_cat_wrong_dim
  family vertical
  description wrong on purpose: a cat on dim 0 moved to dim 1
  match
    %l = prim::ListConstruct(%a, %b)
    %y = aten::cat(%l, $d)
  where
    $d == 0 and rank(%a) >= 2
  rewrite
    %r = aten::cat([%a, %b], 1)
    replace %y with %r
end
)"},
      {"gelu_as_relu", R"(
rule planted_gelu_as_relu
  family vertical
  description wrong on purpose: gelu is not relu
  match
    %y = aten::gelu(%x, $a)
  rewrite
    %r = aten::relu(%x)
    replace %y with %r
end
)"},
      {"layer_norm_without_bias", R"(
rule planted_layer_norm_without_bias
  family vertical
  description wrong on purpose: the bias of a layer_norm dropped
  match
    %y = aten::layer_norm(%x, $s, %w, %b, $eps, $c)
  where
    not is_none(%b)
  rewrite
    %r = aten::layer_norm(%x, $s, %w, None, $eps, $c)
    replace %y with %r
end
)"},
      // Gradient-only bugs: every value is kept, a weight's or a bias's gradient is not.
      {"detached_weight", R"(
rule planted_detached_weight
  family vertical
  description wrong on purpose: linear(x, w, b) -> linear(x, detach(w), b)
  match
    %y = aten::linear(%x, %w, %b)
  rewrite
    %wd = aten::detach(%w)
    %r = aten::linear(%x, %wd, %b)
    replace %y with %r
end
)"},
      {"halved_bias_gradient", R"(
rule planted_halved_bias_gradient
  family vertical
  description wrong on purpose: linear(x, w, b) -> linear(x, w, detach(b) * 0.5 + b * 0.5)
  match
    %y = aten::linear(%x, %w, %b)
  where
    not is_none(%b)
  rewrite
    %bd = aten::detach(%b)
    %h1 = aten::mul(%bd, 0.5)
    %h2 = aten::mul(%b, 0.5)
    %bb = aten::add(%h1, %h2)
    %r = aten::linear(%x, %w, %bb)
    replace %y with %r
end
)"},
  };
  for (const Planted& p : planted) {
    auto parsed = ParseRules(p.text, std::string(p.name) + ".rules");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    auto rules = RuleSet::Create(*parsed);
    ASSERT_TRUE(rules.ok()) << rules.status();
    int fired = 0, caught = 0;
    for (uint64_t s = 1; s <= 400; ++s) {
      DiffResult d = RunDifferential(**rules, s, StepsForSeed(s));
      if (!d.valid || d.applications.empty()) continue;
      bool any = false;
      for (const auto& [name, n] : d.applications) any = any || n > 0;
      if (!any) continue;
      ++fired;
      if (!d.ok()) ++caught;
    }
    std::cout << p.name << ": fired in " << fired << " graphs, caught in " << caught << "\n";
    EXPECT_GT(fired, 10) << p.name;
    EXPECT_GE(caught, fired / 2) << p.name << ": the harness let a wrong rule pass";
  }
}

}  // namespace
}  // namespace difftest
}  // namespace sentier
