// rule_set.cc — RuleSet, the public face of compiled rules: compiling a file's parsed rules in
// load order (each through the rule compiler, internal/rule_compiler.h; duplicate names are an
// error), subsets by regex or by exact names, the fingerprint over the rules' normalized text,
// and the description of the language's functions and builtins.
#include "passes/rule_set.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "passes/digest.h"
#include "passes/internal/compiled_rule.h"
#include "passes/internal/rule_compiler.h"
#include "passes/internal/rule_eval.h"
#include "re2/re2.h"

namespace sentier {

absl::StatusOr<std::shared_ptr<const RuleSet>> RuleSet::Create(std::vector<Rule> rules) {
  std::shared_ptr<RuleSet> set(new RuleSet());
  absl::flat_hash_map<std::string, SourceLoc> seen;
  for (Rule& r : rules) {
    auto [it, inserted] = seen.emplace(r.name, r.loc);
    if (!inserted) {
      return internal::LocError(r.loc, absl::StrCat("duplicate rule name '", r.name, "' (first defined at ",
                                          it->second.ToString(), ")"));
    }
    auto cr = internal::CompileRule(std::move(r));
    if (!cr.ok()) return cr.status();
    set->rules_.push_back(std::move(*cr));
  }
  return std::shared_ptr<const RuleSet>(set);
}

absl::StatusOr<std::shared_ptr<const RuleSet>> RuleSet::Filter(const std::string& enable,
                                                               const std::string& disable) const {
  std::unique_ptr<RE2> en, dis;
  if (!enable.empty()) {
    en = std::make_unique<RE2>(enable);
    if (!en->ok()) return absl::InvalidArgumentError(absl::StrCat("bad --enable regex: ", en->error()));
  }
  if (!disable.empty()) {
    dis = std::make_unique<RE2>(disable);
    if (!dis->ok()) {
      return absl::InvalidArgumentError(absl::StrCat("bad --disable regex: ", dis->error()));
    }
  }
  std::shared_ptr<RuleSet> out(new RuleSet());
  for (const auto& r : rules_) {
    if (en && !RE2::FullMatch(r->ast.name, *en)) continue;
    if (dis && RE2::FullMatch(r->ast.name, *dis)) continue;
    out->rules_.push_back(r);
  }
  return std::shared_ptr<const RuleSet>(out);
}

std::shared_ptr<const RuleSet> RuleSet::Without(const std::vector<std::string>& names) const {
  absl::flat_hash_set<std::string> drop(names.begin(), names.end());
  std::shared_ptr<RuleSet> out(new RuleSet());
  for (const auto& r : rules_) {
    if (!drop.contains(r->ast.name)) out->rules_.push_back(r);
  }
  return out;
}

std::shared_ptr<const RuleSet> RuleSet::Only(const std::vector<std::string>& names) const {
  absl::flat_hash_set<std::string> keep(names.begin(), names.end());
  std::shared_ptr<RuleSet> out(new RuleSet());
  for (const auto& r : rules_) {
    if (keep.contains(r->ast.name)) out->rules_.push_back(r);
  }
  return out;
}

std::string RuleSet::Fingerprint() const {
  std::string all;
  for (const auto& r : rules_) absl::StrAppend(&all, r->ast.normalized_text, "\n\n");
  return Sha256Hex(all);
}

const Rule& RuleSet::rule(size_t i) const { return rules_[i]->ast; }

RuleSet::~RuleSet() = default;

std::string DescribeLanguage() {
  std::vector<std::string> lines;
  for (const auto& [name, spec] : internal::Functions()) {
    lines.push_back(absl::StrCat("function ", name, ": ", spec.doc));
  }
  for (const auto& [name, spec] : internal::Builtins()) {
    lines.push_back(absl::StrCat("builtin ", name, ": ", spec.doc));
  }
  std::sort(lines.begin(), lines.end());
  return absl::StrJoin(lines, "\n");
}

}  // namespace sentier
