// internal/matcher.cc — the matcher (see matcher.h): a walk from the anchor backwards through
// inputs that binds values, sequences and constants, checks node kinds, arities and literal
// arguments, and matches each foreach block once per element of its sequence.
#include "passes/internal/matcher.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace sentier {
namespace internal {
namespace {

class Matcher {
 public:
  Matcher(const CompiledRule& rule, Bindings* b) : rule_(rule), b_(*b) {}

  bool MatchAll(Node* anchor) {
    if (!MatchNode(rule_.main, rule_.anchor, anchor, nullptr)) return false;
    for (const CompiledForeach& fe : rule_.foreach) {
      if (!MatchForeach(fe)) return false;
    }
    return true;
  }

 private:
  bool BindValue(const std::string& name, Value* v) {
    auto [it, inserted] = b_.values.emplace(name, v);
    return inserted || it->second == v;
  }
  bool BindSeq(const std::string& name, const std::vector<Value*>& vs) {
    auto [it, inserted] = b_.seqs.emplace(name, vs);
    return inserted || it->second == vs;
  }
  bool BindConst(const std::string& name, const Datum& d) {
    auto [it, inserted] = b_.consts.emplace(name, d);
    return inserted || it->second.Equal(d);
  }

  bool MatchValue(const PatternScope& scope, const std::string& name, Value* v) {
    if (!BindValue(name, v)) return false;
    auto def = scope.value_def.find(name);
    if (def == scope.value_def.end()) return true;
    return MatchNode(scope, def->second.first, v->node(), v);
  }

  bool MatchSeq(const PatternScope& scope, const std::string& name, const std::vector<Value*>& vs) {
    if (!BindSeq(name, vs)) return false;
    auto def = scope.seq_def.find(name);
    if (def == scope.seq_def.end()) return true;
    if (vs.empty()) return false;
    Node* producer = vs[0]->node();
    const CompiledPatternNode& pn = rule_.nodes[def->second];
    size_t fixed = pn.ast->outputs.size() - 1;  // outputs before the variadic one
    if (producer->outputs().size() != fixed + vs.size()) return false;
    for (size_t k = 0; k < vs.size(); ++k) {
      if (vs[k] != producer->outputs()[fixed + k]) return false;
    }
    return MatchNode(scope, def->second, producer, nullptr);
  }

  // `via`: the value through which the node was reached (for `@ $k` lines). Steps: a node
  // matched before -> its kind -> its outputs -> its inputs (which match their defining lines).
  bool MatchNode(const PatternScope& scope, int id, Node* n, Value* via) {
    auto seen = b_.matched.find(n);
    if (seen != b_.matched.end()) return MatchAgain(seen->second, id, via);
    const CompiledPatternNode& cn = rule_.nodes[id];
    if (!cn.kinds.contains(n->kind())) return false;
    b_.matched.emplace(n, id);
    b_.matched_order.push_back(n);
    return BindOutputs(*cn.ast, n, via) && MatchInputs(scope, cn, n);
  }

  // A node already matched as line `matched_id`, reached again as line `id`.
  bool MatchAgain(int matched_id, int id, Value* via) {
    if (matched_id != id) return false;
    const PatternNode& p = *rule_.nodes[id].ast;
    if (!p.output_index.empty() && via != nullptr) {
      // Same node reached through another output: only the index may differ per element.
      return BindValue(p.outputs[0].name, via) &&
             BindConst(p.output_index, Datum::Int(static_cast<int64_t>(via->offset())));
    }
    return true;
  }

  // Binds the names of line `p`'s outputs (or, for `@ $k`, the output `via` and its index).
  bool BindOutputs(const PatternNode& p, Node* n, Value* via) {
    if (!p.output_index.empty()) {
      if (via == nullptr) return false;
      if (!p.outputs[0].name.empty() && !BindValue(p.outputs[0].name, via)) return false;
      return BindConst(p.output_index, Datum::Int(static_cast<int64_t>(via->offset())));
    }
    bool variadic = p.outputs.back().variadic;
    size_t fixed = variadic ? p.outputs.size() - 1 : p.outputs.size();
    if (variadic ? n->outputs().size() < fixed : n->outputs().size() != fixed) return false;
    for (size_t k = 0; k < fixed; ++k) {
      if (!p.outputs[k].name.empty() && !BindValue(p.outputs[k].name, n->outputs()[k])) {
        return false;
      }
    }
    if (variadic && !p.outputs.back().name.empty()) {
      std::vector<Value*> rest(n->outputs().begin() + fixed, n->outputs().end());
      if (!BindSeq(p.outputs.back().name, rest)) return false;
    }
    return true;
  }

  // Matches `n`'s inputs against line `cn`'s arguments: values (and sequences) through their
  // defining lines, constants bound, literals compared.
  bool MatchInputs(const PatternScope& scope, const CompiledPatternNode& cn, Node* n) {
    const PatternNode& p = *cn.ast;
    bool variadic_in = !p.args.empty() && p.args.back().variadic;
    size_t fixed_in = variadic_in ? p.args.size() - 1 : p.args.size();
    if (variadic_in ? n->inputs().size() < fixed_in : n->inputs().size() != fixed_in) return false;
    for (size_t k = 0; k < p.args.size(); ++k) {
      const PatternArg& a = p.args[k];
      if (a.variadic) {
        if (a.kind == PatternArg::Kind::kWildcard) break;
        std::vector<Value*> rest(n->inputs().begin() + k, n->inputs().end());
        if (!MatchSeq(scope, a.name, rest)) return false;
        break;
      }
      Value* in = n->inputs()[k];
      switch (a.kind) {
        case PatternArg::Kind::kWildcard:
          break;
        case PatternArg::Kind::kValue:
          if (!MatchValue(scope, a.name, in)) return false;
          break;
        case PatternArg::Kind::kConst: {
          c10::optional<Datum> d = DatumFromConstant(in);
          if (!d || !BindConst(a.name, *d)) return false;
          break;
        }
        case PatternArg::Kind::kLiteral: {
          c10::optional<Datum> d = DatumFromConstant(in);
          if (!d || !d->Equal(cn.literals[k])) return false;
          break;
        }
      }
    }
    return true;
  }

  bool MatchForeach(const CompiledForeach& fe) {
    auto seq_it = b_.seqs.find(fe.ast->sequence);
    if (seq_it == b_.seqs.end()) return false;
    const std::vector<Value*> seq = seq_it->second;
    std::vector<std::string> locals = {absl::StrCat("%", fe.ast->element)};
    for (const std::string& n : fe.ast->per_element) locals.push_back(n);
    std::vector<std::vector<Value*>> value_cols(locals.size());
    std::vector<std::vector<Datum>> const_cols(locals.size());
    auto erase_locals = [&] {
      for (const std::string& n : locals) {
        if (n[0] == '%') {
          b_.values.erase(n.substr(1));
        } else {
          b_.consts.erase(n.substr(1));
        }
      }
    };
    for (Value* v : seq) {
      erase_locals();
      // Nodes matched for a previous element by a per-element line must not block this one.
      std::vector<const Node*> local_nodes;
      if (!MatchValue(fe.scope, fe.ast->element, v)) return false;
      for (size_t k = 0; k < locals.size(); ++k) {
        const std::string& n = locals[k];
        if (n[0] == '%') {
          auto it = b_.values.find(n.substr(1));
          if (it == b_.values.end()) return false;
          value_cols[k].push_back(it->second);
        } else {
          auto it = b_.consts.find(n.substr(1));
          if (it == b_.consts.end()) return false;
          const_cols[k].push_back(it->second);
        }
      }
      // Per-element nodes (all nodes of the block that produced per-element values) may repeat
      // with another element; forget their pattern ids so the next element can match them.
      for (int id : fe.scope.node_ids) {
        for (auto it = b_.matched.begin(); it != b_.matched.end();) {
          auto cur = it++;
          if (cur->second == id && IsPerElementNode(fe, id)) b_.matched.erase(cur);
        }
      }
    }
    erase_locals();
    for (size_t k = 0; k < locals.size(); ++k) {
      const std::string& n = locals[k];
      if (n[0] == '%') {
        b_.seqs[n.substr(1)] = value_cols[k];
      } else {
        b_.consts[n.substr(1)] = Datum::List(const_cols[k]);
      }
    }
    return true;
  }

  // A foreach line is per-element when it defines the element or a per-element name.
  bool IsPerElementNode(const CompiledForeach& fe, int id) const {
    const PatternNode& p = *rule_.nodes[id].ast;
    if (!p.output_index.empty()) return true;
    for (const PatternOutput& o : p.outputs) {
      if (o.name == fe.ast->element) return true;
      for (const std::string& pe : fe.ast->per_element) {
        if (pe == absl::StrCat("%", o.name)) return true;
      }
    }
    return false;
  }

  const CompiledRule& rule_;
  Bindings& b_;
};

// Whether the graph around `n` has the shape main-pattern line `id` needs: its node kinds and
// input and output counts, and those of the lines that define its inputs, followed backwards as
// the matcher follows them. It binds nothing: names bound twice, constants, literals and
// `@ $k` outputs are left to the matcher. A successful match checks the same kinds and counts
// for every (line, node) pair it reaches (a pair seen again passed them the first time), so
// false here means MatchRule would fail; most failing attempts fail here, before any binding is
// allocated.
bool ShapeFits(const CompiledRule& rule, int id, const Node* n) {
  const CompiledPatternNode& cn = rule.nodes[id];
  if (!cn.kinds.contains(n->kind())) return false;
  const PatternNode& p = *cn.ast;
  if (p.output_index.empty()) {
    bool variadic = p.outputs.back().variadic;
    size_t fixed = variadic ? p.outputs.size() - 1 : p.outputs.size();
    if (variadic ? n->outputs().size() < fixed : n->outputs().size() != fixed) return false;
  }
  bool variadic_in = !p.args.empty() && p.args.back().variadic;
  size_t fixed_in = variadic_in ? p.args.size() - 1 : p.args.size();
  if (variadic_in ? n->inputs().size() < fixed_in : n->inputs().size() != fixed_in) return false;
  for (const CompiledPatternNode::DefinedInput& d : cn.defined_inputs) {
    if (!d.seq) {
      if (!ShapeFits(rule, d.def, n->inputs()[d.arg]->node())) return false;
      continue;
    }
    // A sequence is all outputs of its producer past the fixed ones, in order.
    size_t count = n->inputs().size() - d.arg;
    if (count == 0) return false;
    const Node* producer = n->inputs()[d.arg]->node();
    size_t fixed = rule.nodes[d.def].ast->outputs.size() - 1;
    if (producer->outputs().size() != fixed + count) return false;
    for (size_t k = 0; k < count; ++k) {
      if (n->inputs()[d.arg + k] != producer->outputs()[fixed + k]) return false;
    }
    if (!ShapeFits(rule, d.def, producer)) return false;
  }
  return true;
}

}  // namespace

bool MatchRule(const CompiledRule& rule, Node* anchor, Bindings* bindings) {
  if (!ShapeFits(rule, rule.anchor, anchor)) return false;
  Matcher matcher(rule, bindings);
  return matcher.MatchAll(anchor);
}

}  // namespace internal
}  // namespace sentier
