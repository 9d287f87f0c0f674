// rewrite_driver.cc — the driver: the fixpoint loop that applies rules, with engine-side
// legality. Ordinary rules are matched (internal/matcher.h), checked (internal/expr_eval.h) and
// rewritten (internal/rewriter.h) one anchor at a time; group rules go to the group search
// (internal/group_search.h).
//
// Each round indexes the graph's nodes by kind once, then tries every rule (in load order) at
// every node whose kind its anchor accepts, so a round costs O(nodes x rules whose anchor kind is
// present) and never rescans the graph per rule. Nodes created in a round are matched in the next
// one. Legality under mutation needs to know which values are written: a graph without any
// mutating node cannot have writers; otherwise the values that may share memory with a written
// one are found by following schema alias annotations from the writes (WrittenRegion), and
// LibTorch's AliasDb, whose cost grows faster than the graph, is built only for a candidate that
// touches them or for a graph that region does not model.
#include "passes/rewrite_driver.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <cstring>

#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/runtime/operator.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "passes/canonicalize/passes.h"
#include "passes/internal/compiled_rule.h"
#include "passes/internal/expr_eval.h"
#include "passes/internal/group_search.h"
#include "passes/internal/matcher.h"
#include "passes/internal/rewriter.h"
#include "passes/module_objects.h"
#include "passes/remove_dead_nodes.h"
#include "passes/stacked_parameters.h"

namespace sentier {
namespace {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

// Calls `visit` on every node of `b` and its nested blocks, in program order.
template <typename Visit>
void Walk(Block* b, const Visit& visit) {
  for (Node* n : b->nodes()) {
    visit(n);
    for (Block* sub : n->blocks()) Walk(sub, visit);
  }
}

bool MutatesSomething(const Node* n) {
  if (n->kind() == c10::prim::SetAttr) return true;
  // Other prim:: nodes (constants, lists, tuples, attribute reads, control flow) write nothing;
  // looking their schema up would search the operator registry for every one, every round.
  if (n->kind().is_prim()) return false;
  const c10::FunctionSchema* schema = n->maybeSchema();
  return schema != nullptr && schema->is_mutable();
}

bool IsPure(Node* n) { return !n->hasSideEffects() && !MutatesSomething(n); }

// Dropout in eval mode returns its input itself, but its schema does not say so, so AliasDb
// treats the result as a fresh tensor. A value is written to when anything reached from it
// through such ops has writers (`written`: AliasDb's hasWriters, or a cheaper superset of it).
template <typename Written>
bool WrittenThroughDropout(const Written& written, torch::jit::Value* v, int depth = 0) {
  static const c10::Symbol kDropouts[] = {
      c10::Symbol::fromQualString("aten::dropout"),
      c10::Symbol::fromQualString("aten::feature_dropout"),
      c10::Symbol::fromQualString("aten::alpha_dropout"),
      c10::Symbol::fromQualString("aten::feature_alpha_dropout")};
  if (depth > 16) return true;
  for (const torch::jit::Use& u : v->uses()) {
    if (u.offset != 0) continue;
    bool dropout = false;
    for (c10::Symbol k : kDropouts) dropout |= u.user->kind() == k;
    if (!dropout) continue;
    torch::jit::Value* out = u.user->output();
    if (written(out) || WrittenThroughDropout(written, out, depth + 1)) return true;
  }
  return false;
}

// Whether `n` may be written to, or reaches a written value through dropouts (see above).
template <typename Written>
bool MayBeWritten(const Written& written, Node* n) {
  for (torch::jit::Value* v : n->inputs()) {
    if (written(v) || WrittenThroughDropout(written, v)) return true;
  }
  for (torch::jit::Value* v : n->outputs()) {
    if (written(v) || WrittenThroughDropout(written, v)) return true;
  }
  return false;
}

// Values that may share memory with a value some node writes, found without an alias analysis
// (LibTorch's AliasDb costs more than the rest of a round on a 100k-node graph). It follows the
// same edges AliasDb draws: an output annotated as aliasing points to the inputs annotated with
// an alias set (all of them here, which can only add values), and nothing else connects two
// tensors. Whatever AliasDb would connect to a wildcard, or analyze without a schema, is not
// modeled: Build then returns false and the caller asks AliasDb. When it returns true, every value
// whose memory AliasDb would find written is in the region, so a node that touches no region
// value (and no dropout output reached from one) has no writers for AliasDb either.
class WrittenRegion {
 public:
  // Steps: seed the region with the values nodes write -> follow alias edges from each region
  // value in both directions (what it points to, what points to it) until nothing is new.
  bool Build(Graph* graph, const std::vector<Node*>& nodes) {
    region_.clear();
    std::vector<Value*> work;
    if (!AddWrittenValues(nodes, &work)) return false;
    while (!work.empty()) {
      Value* v = work.back();
      work.pop_back();
      if (!region_.insert(v).second) continue;
      if (v->type()->kind() != c10::TypeKind::TensorType) return false;
      if (!AddPointedTo(v, &work)) return false;
      if (!AddPointingTo(graph, v, &work)) return false;
    }
    return true;
  }

  bool Contains(const Value* v) const { return region_.contains(v); }

 private:
  // Adds to `work` every value a node of `nodes` writes (its schema's write annotations);
  // false when a node's writes are not modeled.
  static bool AddWrittenValues(const std::vector<Node*>& nodes, std::vector<Value*>* work) {
    for (Node* n : nodes) {
      if (NoWrites(n->kind())) continue;
      const c10::FunctionSchema* schema = nullptr;
      Model model = ModelOf(n, &schema);
      if (model == Model::kUnknown) return false;
      if (model == Model::kFresh || !schema->is_mutable()) continue;
      bool found = false;
      for (size_t i = 0; i < schema->arguments().size(); ++i) {
        const c10::AliasInfo* a = schema->arguments()[i].alias_info();
        if (a == nullptr || !Writes(*a)) continue;
        work->push_back(n->input(i));
        found = true;
      }
      for (size_t i = 0; i < schema->returns().size(); ++i) {
        const c10::AliasInfo* a = schema->returns()[i].alias_info();
        if (a == nullptr || !Writes(*a)) continue;
        work->push_back(n->output(i));
        found = true;
      }
      if (!found) return false;
    }
    return true;
  }

  // What v points to: the inputs its defining node's schema lets it alias. False when that is
  // not modeled.
  static bool AddPointedTo(Value* v, std::vector<Value*>* work) {
    Node* def = v->node();
    if (def->kind() == c10::prim::Param) return false;  // a graph or block input
    if (def->kind() == c10::prim::Constant || def->kind() == c10::prim::Uninitialized) return true;
    const c10::FunctionSchema* schema = nullptr;
    Model model = ModelOf(def, &schema);
    if (model == Model::kUnknown) return false;  // a graph or block input, a list element, ...
    if (model != Model::kSchema) return true;
    const c10::AliasInfo* out = schema->returns()[v->offset()].alias_info();
    if (out == nullptr) return true;
    if (Wildcard(*out)) return false;
    for (size_t i = 0; i < schema->arguments().size(); ++i) {
      const c10::AliasInfo* a = schema->arguments()[i].alias_info();
      if (a == nullptr) continue;
      if (Wildcard(*a)) return false;
      if (MayAlias(def->input(i))) work->push_back(def->input(i));
    }
    return true;
  }

  // What points to v: outputs of users whose schema lets them alias the argument v is. False
  // when that is not modeled.
  static bool AddPointingTo(Graph* graph, Value* v, std::vector<Value*>* work) {
    for (const torch::jit::Use& u : v->uses()) {
      Node* user = u.user;
      if (user == graph->return_node()) continue;
      if (user->kind() == c10::prim::Print || user->kind() == c10::prim::isinstance) continue;
      const c10::FunctionSchema* schema = nullptr;
      Model model = ModelOf(user, &schema);
      if (model == Model::kUnknown) return false;  // a list, a block's result, a call, ...
      if (model == Model::kFresh) continue;
      if (u.offset >= schema->arguments().size()) return false;
      const c10::AliasInfo* a = schema->arguments()[u.offset].alias_info();
      if (a == nullptr) continue;
      if (Wildcard(*a)) return false;
      for (size_t k = 0; k < schema->returns().size(); ++k) {
        const c10::AliasInfo* r = schema->returns()[k].alias_info();
        if (r == nullptr) continue;
        if (Wildcard(*r)) return false;
        if (MayAlias(user->output(k))) work->push_back(user->output(k));
      }
    }
    return true;
  }

  // Nodes AliasDb analyzes without a schema and that write nothing (containers, extractors,
  // control flow: the nodes of their blocks are visited on their own).
  static bool NoWrites(c10::Symbol k) {
    return k == c10::prim::Constant || k == c10::prim::ListConstruct ||
           k == c10::prim::TupleConstruct || k == c10::prim::DictConstruct ||
           k == c10::prim::ListUnpack || k == c10::prim::TupleUnpack ||
           k == c10::prim::TupleIndex || k == c10::prim::GetAttr || k == c10::prim::If ||
           k == c10::prim::Loop || k == c10::prim::Uninitialized || k == c10::prim::Print ||
           k == c10::prim::isinstance;
  }

  // How AliasDb analyzes a node: from its schema's annotations (kSchema, *schema set), as a pure
  // function (fresh outputs, no writes), or otherwise (a special case, conservatively, or there
  // is no operator): kUnknown.
  enum class Model { kUnknown, kFresh, kSchema };
  static Model ModelOf(Node* n, const c10::FunctionSchema** schema) {
    const torch::jit::Operator* op = n->maybeOperator();
    if (op == nullptr) return Model::kUnknown;
    c10::AliasAnalysisKind kind = op->aliasAnalysisKind();
    if (kind == c10::AliasAnalysisKind::PURE_FUNCTION) return Model::kFresh;
    if (kind != c10::AliasAnalysisKind::FROM_SCHEMA) return Model::kUnknown;
    const c10::FunctionSchema& s = op->schema();
    if (s.is_vararg() || s.is_varret() || n->inputs().size() != s.arguments().size() ||
        n->outputs().size() != s.returns().size()) {
      return Model::kUnknown;
    }
    *schema = &s;
    return Model::kSchema;
  }

  // Values of immutable types (int, float, bool, str, None, Number, Device and tuples of them)
  // hold no memory AliasDb tracks; anything else is followed (and a value in the region that is
  // not a tensor gives up).
  static bool MayAlias(const Value* v) { return !IsImmutableType(v->type()); }

  static bool Writes(const c10::AliasInfo& a) {
    if (a.isWrite()) return true;
    for (const c10::AliasInfo& c : a.containedTypes()) {
      if (Writes(c)) return true;
    }
    return false;
  }

  static bool Wildcard(const c10::AliasInfo& a) {
    if (a.isWildcardBefore() || a.isWildcardAfter()) return true;
    for (const c10::AliasInfo& c : a.containedTypes()) {
      if (Wildcard(c)) return true;
    }
    return false;
  }

  absl::flat_hash_set<const Value*> region_;
};

// TryApply: matches `rule` with `anchor` as its anchor node; when it matches, the constraints
// hold and `legal` agrees, performs the rewrite.
internal::ApplyResult TryApply(const CompiledRule& rule, Node* anchor, ShapeFacts* facts,
                               const internal::LegalityCheck& legal, std::string* error,
                               const internal::RuleEnvironment& env) {
  internal::Bindings b;
  if (!internal::MatchRule(rule, anchor, &b)) return internal::ApplyResult::kNoMatch;
  internal::EvalContext ctx =
      internal::MakeContext(rule, anchor, facts, &b, &legal, env);
  if (!internal::ConstraintsHold(rule.ast.where, ctx)) return internal::ApplyResult::kNoMatch;
  if (legal && !legal(b.matched_order, anchor)) return internal::ApplyResult::kIllegal;
  return internal::Rewrite(rule, ctx, error);
}

// Record: counts one application, refusal or failed rewrite of the rule `name`.
void Record(RewriteStats* stats, const std::string& name, internal::ApplyResult res,
            const std::string& error) {
  if (res == internal::ApplyResult::kApplied) {
    ++stats->applications[name];
  } else if (res == internal::ApplyResult::kIllegal) {
    ++stats->rejected[name];
  } else if (res == internal::ApplyResult::kError) {
    if (stats->errors[name]++ == 0) stats->first_error[name] = error;
  }
}

// The unique() id the graph will give its next value: ids only grow, so values created after
// this call have larger ones.
size_t NextUnique(Graph* graph) {
  Node* probe = graph->create(c10::prim::Constant);
  size_t id = probe->output()->unique();
  probe->destroy();
  return id;
}

bool CreatedBy(const std::vector<std::pair<size_t, size_t>>& ranges, const Node* n) {
  for (const torch::jit::Value* v : n->outputs()) {
    size_t id = v->unique();
    auto it = std::upper_bound(ranges.begin(), ranges.end(), std::make_pair(id, SIZE_MAX));
    if (it != ranges.begin() && id < std::prev(it)->second) return true;
  }
  return false;
}

// Whether LibTorch's AliasDb may treat each prim::GetAttr of a module tensor as a distinct memory
// location (its frozen mode): every module tensor is read by at most one GetAttr, no two module
// tensors share storage (tied weights), no attribute is assigned, and no GetAttr yields another
// mutable value (a list or dict attribute).
bool ModuleReadsAreDistinct(Graph& graph, const c10::IValue& self) {
  ModuleObjectMap objects = ModuleObjects(graph, self);
  if (objects.empty()) return false;
  absl::flat_hash_set<std::pair<const void*, std::string>> reads;
  absl::flat_hash_set<const void*> storages;
  bool ok = true;
  std::function<void(Block*)> walk = [&](Block* b) {
    for (Node* n : b->nodes()) {
      if (!ok) return;
      if (n->kind() == c10::prim::SetAttr) {
        ok = false;
      } else if (n->kind() == c10::prim::GetAttr) {
        auto it = objects.find(n->input());
        if (it == objects.end()) {
          ok = false;
        } else if (objects.count(n->output()) == 0) {
          const std::string& name = n->s(c10::attr::name);
          c10::optional<size_t> slot = it->second->type()->findAttributeSlot(name);
          if (!slot) {
            ok = false;
          } else {
            const c10::IValue& v = it->second->getSlot(*slot);
            if (v.isTensor()) {
              if (!reads.insert({it->second.get(), name}).second) ok = false;
              const at::Tensor& t = v.toTensor();
              if (t.defined() && t.has_storage() &&
                  !storages.insert(t.storage().unsafeGetStorageImpl()).second) {
                ok = false;
              }
            } else if (!(v.isInt() || v.isDouble() || v.isBool() || v.isString() || v.isNone())) {
              ok = false;
            }
          }
        }
      }
      for (Block* sub : n->blocks()) walk(sub);
    }
  };
  walk(graph.block());
  return ok;
}

// How far back from its anchor a pattern reaches: a rewrite can only make a new match for an
// anchor within that many uses downstream of a node it created.
size_t PatternReach(const RuleSet& rules) {
  size_t reach = 1;
  for (size_t r = 0; r < rules.size(); ++r) reach = std::max(reach, rules.compiled(r).nodes.size());
  return reach;
}

// One round's view of the graph, taken by one walk: on a 100k-node graph every further pass over
// the nodes costs a cache miss per node.
struct RoundIndex {
  std::vector<Node*> nodes;  // program order
  absl::flat_hash_map<c10::Symbol, std::vector<Node*>> by_kind;  // each list in program order
  bool has_mutation = false;
  // After the first round, ordinary rules are tried only at anchors the previous round's
  // rewrites can have touched: nodes it created and their users, `reach` uses deep. (Anything
  // missed is retried in the first round of the next ApplyRules call, which tries all.)
  absl::flat_hash_set<const Node*> dirty;
};

// Collects the candidates of round `round`: nodes created since `round_start` (a Value::unique()
// id) and the users they reach count as dirty.
RoundIndex IndexRound(Graph* graph, int round, size_t round_start, size_t reach,
                      size_t expected_nodes) {
  RoundIndex index;
  index.nodes.reserve(expected_nodes);
  std::vector<std::pair<Node*, size_t>> work;
  Walk(graph->block(), [&](Node* n) {
    index.nodes.push_back(n);
    index.has_mutation |= MutatesSomething(n);
    index.by_kind[n->kind()].push_back(n);
    if (round > 0) {
      bool created = false;
      for (const torch::jit::Value* o : n->outputs()) created |= o->unique() >= round_start;
      if (created && index.dirty.insert(n).second) work.emplace_back(n, 0);
    }
  });
  while (!work.empty()) {
    auto [n, depth] = work.back();
    work.pop_back();
    if (depth >= reach) continue;
    for (const torch::jit::Value* o : n->outputs()) {
      for (const torch::jit::Use& u : o->uses()) {
        if (index.dirty.insert(u.user).second) work.emplace_back(u.user, depth + 1);
      }
    }
  }
  return index;
}

// The engine-side legality of one round. With mutation, a node may be rewritten only when nothing
// writes to its values. The written region answers that for most nodes; AliasDb (whose cost
// grows faster than the graph) is built only when a node touches the region, or when the graph
// holds something the region does not model. Built lazily, it answers as one built at the start
// of the round would: until a rewrite involves a region value, rewrites neither add writes nor
// connect values to the region, and the nodes created this round are refused before it is asked.
class RoundLegality {
 public:
  RoundLegality(const std::shared_ptr<Graph>& graph, const RoundIndex& index,
                const c10::IValue& self)
      : graph_(graph), has_mutation_(index.has_mutation) {
    if (!has_mutation_) return;
    frozen_ = ModuleReadsAreDistinct(*graph, self);
    modeled_ = region_.Build(graph.get(), index.nodes);
    if (!modeled_) alias_db_ = std::make_unique<torch::jit::AliasDb>(graph, /*isFrozen=*/frozen_);
    known_.insert(index.nodes.begin(), index.nodes.end());
  }

  // Whether the match `matched` at `anchor` may be rewritten.
  bool Allows(const std::vector<Node*>& matched, Node* anchor) {
    auto in_region = [&](const torch::jit::Value* v) { return region_.Contains(v); };
    auto has_writers = [&](const torch::jit::Value* v) { return alias_db_->hasWriters(v); };
    for (Node* n : matched) {
      if (n->owningBlock() != anchor->owningBlock()) return false;
      if (!IsPure(n)) return false;
      if (has_mutation_) {
        if (!known_.contains(n)) return false;  // created this round: wait for the next one
        if (modeled_ && !MayBeWritten(in_region, n)) continue;
        if (!alias_db_) alias_db_ = std::make_unique<torch::jit::AliasDb>(graph_, /*isFrozen=*/frozen_);
        if (MayBeWritten(has_writers, n)) return false;
      }
    }
    return true;
  }

 private:
  const std::shared_ptr<Graph>& graph_;
  const bool has_mutation_;
  std::unique_ptr<torch::jit::AliasDb> alias_db_;
  absl::flat_hash_set<const Node*> known_;
  WrittenRegion region_;
  bool modeled_ = false;
  bool frozen_ = false;
};

// What the rules of one round have done so far.
struct RoundProgress {
  size_t mark;  // Value::unique() of the next value the graph creates, as of the last application
  bool changed = false;
  std::vector<std::string> fed_itself;  // rules that rewrote their own output this round
};

// Applies the group rule `rule` to every candidate anchor of the round at once.
void ApplyGroupRuleInRound(const CompiledRule& rule, const RoundIndex& index, Graph* graph,
                           const RewriteOptions& options, const internal::RuleEnvironment& env,
                           const internal::LegalityCheck& legal,
                           RewriteStats* stats, RoundProgress* progress) {
  const std::string& name = rule.ast.name;
  // The anchor's kinds, merged into program order (the indexing keeps each kind's list in
  // program order already).
  std::vector<Node*> candidates;
  for (c10::Symbol kind : rule.nodes[rule.anchor].kinds) {
    auto it = index.by_kind.find(kind);
    if (it != index.by_kind.end()) candidates.insert(candidates.end(), it->second.begin(), it->second.end());
  }
  if (rule.nodes[rule.anchor].kinds.size() > 1) {
    std::sort(candidates.begin(), candidates.end(), [](Node* a, Node* b) { return a->isBefore(b); });
  }
  auto report = [&](internal::ApplyResult res, size_t members, const std::string& error) {
    Record(stats, name, res, error);
    if (res == internal::ApplyResult::kApplied) {
      stats->grouped_members[name] += static_cast<int64_t>(members);
    }
  };
  if (internal::ApplyGroupRule(candidates, rule, options.facts, legal, report, env)) {
    progress->changed = true;
    progress->mark = NextUnique(graph);  // what the groups created is not another rule's
  }
}

// Applies the ordinary rule `rule` at each candidate anchor of the round, one at a time.
void ApplyRuleInRound(const CompiledRule& rule, const RoundIndex& index, int round, Graph* graph,
                      const RewriteOptions& options, const internal::RuleEnvironment& env,
                      const internal::LegalityCheck& legal,
                      RewriteStats* stats, RoundProgress* progress) {
  const std::string& name = rule.ast.name;
  // Anchor kinds in a fixed order (by name), so results never depend on hashing.
  std::vector<c10::Symbol> kinds(rule.nodes[rule.anchor].kinds.begin(),
                                 rule.nodes[rule.anchor].kinds.end());
  std::sort(kinds.begin(), kinds.end(), [](c10::Symbol a, c10::Symbol b) {
    return std::strcmp(a.toQualString(), b.toQualString()) < 0;
  });
  for (c10::Symbol kind : kinds) {
    auto it = index.by_kind.find(kind);
    if (it == index.by_kind.end()) continue;
    for (Node* anchor : it->second) {
      if (round > 0 && !index.dirty.contains(anchor)) continue;
      // Anchors without live uses are dead (replaced this round, or feeding only such nodes).
      if (!HasLiveUses(anchor)) continue;
      std::string error;
      std::vector<std::pair<size_t, size_t>>& mine = stats->created_by[name];
      bool own_output = CreatedBy(mine, anchor);
      internal::ApplyResult res =
          TryApply(rule, anchor, options.facts, legal, &error, env);
      Record(stats, name, res, error);
      if (res != internal::ApplyResult::kApplied) continue;
      progress->changed = true;
      // The values this application created (and any a failed attempt since the last
      // application created and destroyed again) have ids in [mark, next).
      size_t next = NextUnique(graph);
      mine.emplace_back(progress->mark, next);
      progress->mark = next;
      std::vector<std::string>& fed = progress->fed_itself;
      if (own_output && (fed.empty() || fed.back() != name)) fed.push_back(name);
    }
  }
}

// Counts the round and stops every rule that has now rewritten its own output in
// kSelfFeedingRounds rounds.
void RecordRound(const std::vector<std::string>& fed_itself, RewriteStats* stats) {
  ++stats->rounds;
  for (const std::string& name : fed_itself) {
    if (++stats->self_feeding_rounds[name] >= kSelfFeedingRounds) {
      stats->stopped[name] = absl::StrCat(
          "stopped after rewriting its own output in ", kSelfFeedingRounds, " rounds (",
          stats->applications[name], " applications): the rule matches what it produces");
    }
  }
}

// Environment: what the rules of a round know beyond the graph.
internal::RuleEnvironment Environment(Graph& graph, const RewriteOptions& options) {
  internal::RuleEnvironment env;
  env.stacked_parameters = options.stacked_parameters;
  if (options.stacked_parameters) {
    env.storable_parameter = options.storable_parameter
                                 ? options.storable_parameter
                                 : StorableParameterReads(graph, options.self);
  }
  return env;
}

}  // namespace

// Each round: collect candidates -> set up legality -> apply every rule (in load order) ->
// record statistics; then dead code goes, until a round changes nothing or the round limit.
bool ApplyRules(const std::shared_ptr<Graph>& graph, const RuleSet& rules,
                const RewriteOptions& options, RewriteStats* stats) {
  bool changed_any = false;
  const size_t reach = PatternReach(rules);
  size_t round_start = 0;  // Value::unique() at the start of the previous round
  size_t last_count = 0;
  for (int round = 0; round < options.max_rounds; ++round) {
    RoundIndex index = IndexRound(graph.get(), round, round_start, reach, last_count);
    last_count = index.nodes.size();
    RoundProgress progress;
    progress.mark = NextUnique(graph.get());
    round_start = progress.mark;
    RoundLegality legality(graph, index, options.self);
    const internal::RuleEnvironment env = Environment(*graph, options);
    const internal::LegalityCheck legal = [&legality](const std::vector<Node*>& matched,
                                                      Node* anchor) {
      return legality.Allows(matched, anchor);
    };
    for (size_t r = 0; r < rules.size(); ++r) {
      const CompiledRule& rule = rules.compiled(r);
      if (stats->stopped.count(rule.ast.name) != 0) continue;
      if (rule.ast.is_group) {
        ApplyGroupRuleInRound(rule, index, graph.get(), options, env, legal, stats, &progress);
      } else {
        ApplyRuleInRound(rule, index, round, graph.get(), options, env, legal, stats, &progress);
      }
    }
    RecordRound(progress.fed_itself, stats);
    if (!progress.changed) break;
    changed_any = true;
    RemoveDeadNodes(graph);
    if (round + 1 == options.max_rounds) stats->hit_round_limit = true;
  }
  return changed_any;
}

}  // namespace sentier
