// rule_engine.cc — compiles text rules and matches them against TorchScript graphs.
//
// Matching starts at the anchor (a rule's last match line) and walks backwards through inputs:
// every pattern line is reached through the value it defines, so a match is deterministic — no
// backtracking. Variadic captures bind all remaining inputs (or all outputs) of a node; `foreach`
// blocks then match a sub-pattern once per element of a sequence, with per-element names
// collected into sequences. `where` constraints are evaluated on the bindings, and the rewrite
// section is executed as a transaction: new nodes are inserted, every replacement is checked
// (types, dominance), and only then are uses redirected; on any failure the inserted nodes are
// destroyed and the graph is as before.
#include <algorithm>
#include <sstream>

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/runtime/operator.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "passes/status_macros.h"
#include "passes/digest.h"
#include "passes/internal/compiled_rule.h"
#include "passes/rule_set.h"
#include "re2/re2.h"

namespace sentier {

using internal::Bindings;
using internal::Datum;
using internal::EvalContext;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

namespace internal {

bool Datum::Equal(const Datum& o) const {
  if (kind == Kind::kInt && o.kind == Kind::kInt) return i == o.i;
  if ((kind == Kind::kInt || kind == Kind::kFloat) && (o.kind == Kind::kInt || o.kind == Kind::kFloat)) {
    double a = kind == Kind::kInt ? static_cast<double>(i) : f;
    double c = o.kind == Kind::kInt ? static_cast<double>(o.i) : o.f;
    return a == c;
  }
  if (kind != o.kind) return false;
  switch (kind) {
    case Kind::kNone:
      return true;
    case Kind::kBool:
      return b == o.b;
    case Kind::kString:
      return s == o.s;
    case Kind::kList:
      if (list.size() != o.list.size()) return false;
      for (size_t k = 0; k < list.size(); ++k) {
        if (!list[k].Equal(o.list[k])) return false;
      }
      return true;
    case Kind::kValue:
      return value == o.value;
    case Kind::kValueSeq:
      return values == o.values;
    case Kind::kOpaque:
      return value != nullptr && value == o.value;
    default:
      return false;
  }
}

std::string Datum::DebugString() const {
  switch (kind) {
    case Kind::kNone:
      return "None";
    case Kind::kInt:
      return std::to_string(i);
    case Kind::kFloat:
      return absl::StrFormat("%.17g", f);  // full precision: group keys compare this text
    case Kind::kBool:
      return b ? "true" : "false";
    case Kind::kString:
      return absl::StrCat("\"", s, "\"");
    case Kind::kList: {
      std::vector<std::string> parts;
      for (const Datum& d : list) parts.push_back(d.DebugString());
      return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
    }
    case Kind::kValue:
      return absl::StrCat("%", value->debugName());
    case Kind::kValueSeq: {
      std::vector<std::string> parts;
      for (Value* v : values) parts.push_back(absl::StrCat("%", v->debugName()));
      return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
    }
    case Kind::kOpaque:
      return "<constant>";
  }
  return "?";
}

absl::StatusOr<c10::IValue> Datum::ToIValue() const {
  switch (kind) {
    case Kind::kNone:
      return c10::IValue();
    case Kind::kInt:
      return c10::IValue(i);
    case Kind::kFloat:
      return c10::IValue(f);
    case Kind::kBool:
      return c10::IValue(b);
    case Kind::kString:
      return c10::IValue(s);
    case Kind::kOpaque:
      return opaque;
    case Kind::kList: {
      bool all_int = true, all_float = true, all_bool = true;
      for (const Datum& d : list) {
        all_int &= d.kind == Kind::kInt;
        all_float &= d.kind == Kind::kFloat || d.kind == Kind::kInt;
        all_bool &= d.kind == Kind::kBool;
      }
      if (all_int) {
        std::vector<int64_t> v;
        for (const Datum& d : list) v.push_back(d.i);
        return c10::IValue(v);
      }
      if (all_float) {
        std::vector<double> v;
        for (const Datum& d : list) v.push_back(d.kind == Kind::kInt ? d.i : d.f);
        return c10::IValue(v);
      }
      if (all_bool) {
        c10::List<bool> v;
        for (const Datum& d : list) v.push_back(d.b);
        return c10::IValue(v);
      }
      return absl::InvalidArgumentError("a constant list must hold only ints, floats or bools");
    }
    default:
      return absl::InvalidArgumentError("a graph value is not a constant");
  }
}

namespace {
Datum DatumFromIValue(const c10::IValue& iv) {
  if (iv.isNone()) return Datum();
  if (iv.isInt()) return Datum::Int(iv.toInt());
  if (iv.isDouble()) return Datum::Float(iv.toDouble());
  if (iv.isBool()) return Datum::Bool(iv.toBool());
  if (iv.isString()) return Datum::Str(iv.toStringRef());
  if (iv.isIntList()) {
    std::vector<Datum> out;
    for (int64_t x : iv.toIntVector()) out.push_back(Datum::Int(x));
    return Datum::List(std::move(out));
  }
  if (iv.isDoubleList()) {
    std::vector<Datum> out;
    for (double x : iv.toDoubleVector()) out.push_back(Datum::Float(x));
    return Datum::List(std::move(out));
  }
  if (iv.isBoolList()) {
    std::vector<Datum> out;
    for (bool x : iv.toBoolList()) out.push_back(Datum::Bool(x));
    return Datum::List(std::move(out));
  }
  Datum d;
  d.kind = Datum::Kind::kOpaque;
  d.opaque = iv;
  return d;
}
}  // namespace

c10::optional<Datum> DatumFromConstant(Value* v) {
  if (v->node()->kind() == c10::prim::ListConstruct) {
    // A list literal of constants (scripted `[64]`) is a constant too.
    std::vector<Datum> items;
    for (Value* in : v->node()->inputs()) {
      c10::optional<Datum> d = DatumFromConstant(in);
      if (!d || d->kind == Datum::Kind::kList || d->kind == Datum::Kind::kOpaque) return c10::nullopt;
      items.push_back(*d);
    }
    Datum d = Datum::List(std::move(items));
    d.value = v;
    return d;
  }
  if (v->node()->kind() != c10::prim::Constant) return c10::nullopt;
  c10::optional<c10::IValue> iv = torch::jit::toIValue(v);
  if (!iv) return c10::nullopt;
  Datum d = DatumFromIValue(*iv);
  d.value = v;
  return d;
}

}  // namespace internal

// =============================================================================================
// Compilation
namespace {

// All node kinds a pattern may name: every registered operator plus the prim node kinds that
// have no operator of their own.
const std::vector<c10::Symbol>& KnownKinds() {
  static const std::vector<c10::Symbol>* kinds = [] {
    absl::flat_hash_set<c10::Symbol> seen;
    auto* out = new std::vector<c10::Symbol>();
    for (const auto& op : torch::jit::getAllOperators()) {
      c10::Symbol s = c10::Symbol::fromQualString(op->schema().name());
      if (seen.insert(s).second) out->push_back(s);
    }
    for (const char* name :
         {"prim::Constant", "prim::ListConstruct", "prim::ListUnpack", "prim::TupleConstruct",
          "prim::TupleUnpack", "prim::TupleIndex", "prim::GetAttr", "prim::SetAttr", "prim::If",
          "prim::Loop", "prim::CallMethod", "prim::CallFunction", "prim::DictConstruct",
          "prim::Uninitialized", "prim::unchecked_cast", "prim::Param", "prim::Return"}) {
      c10::Symbol s = c10::Symbol::fromQualString(name);
      if (seen.insert(s).second) out->push_back(s);
    }
    return out;
  }();
  return *kinds;
}

bool IsRegexOp(const std::string& op) {
  return op.find_first_of("()|*+?[]\\^$") != std::string::npos;
}

absl::Status LocError(const SourceLoc& loc, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(loc.ToString(), ": ", msg));
}

absl::StatusOr<absl::flat_hash_set<c10::Symbol>> ResolveOp(const std::string& op,
                                                           const SourceLoc& loc) {
  absl::flat_hash_set<c10::Symbol> out;
  if (!IsRegexOp(op)) {
    c10::Symbol s = c10::Symbol::fromQualString(op);
    for (c10::Symbol k : KnownKinds()) {
      if (k == s) {
        out.insert(s);
        return out;
      }
    }
    return LocError(loc, absl::StrCat("unknown operator '", op,
                                      "' (not in LibTorch's operator registry; write the node "
                                      "kind without an overload name, e.g. aten::split)"));
  }
  RE2 re(op);
  if (!re.ok()) return LocError(loc, absl::StrCat("bad operator regex '", op, "': ", re.error()));
  for (c10::Symbol k : KnownKinds()) {
    if (RE2::FullMatch(k.toQualString(), re)) out.insert(k);
  }
  if (out.empty()) return LocError(loc, absl::StrCat("operator regex '", op, "' matches no operator"));
  return out;
}

absl::StatusOr<Datum> LiteralDatum(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kInt:
      return Datum::Int(e.int_value);
    case Expr::Kind::kFloat:
      return Datum::Float(e.float_value);
    case Expr::Kind::kBool:
      return Datum::Bool(e.bool_value);
    case Expr::Kind::kNone:
      return Datum();
    case Expr::Kind::kString:
      return Datum::Str(e.text);
    case Expr::Kind::kUnary: {
      auto inner = LiteralDatum(*e.args[0]);
      if (!inner.ok()) return inner;
      if (inner->kind == Datum::Kind::kInt) return Datum::Int(-inner->i);
      return Datum::Float(-inner->f);
    }
    case Expr::Kind::kList: {
      std::vector<Datum> items;
      for (const auto& a : e.args) {
        auto d = LiteralDatum(*a);
        if (!d.ok()) return d;
        items.push_back(*d);
      }
      return Datum::List(std::move(items));
    }
    default:
      return LocError(e.loc, "not a literal");
  }
}

// Names in scope while checking a rule: "%x" values, "%xs..." sequences, "$c" constants.
using NameSet = absl::flat_hash_set<std::string>;

std::string RefKey(const Expr& e) {
  if (e.kind == Expr::Kind::kValueRef) return absl::StrCat("%", e.text, e.variadic ? "..." : "");
  return absl::StrCat("$", e.text);  // $k and $k... are the same constant (a list)
}

absl::Status CheckExpr(const Expr& e, const NameSet& names) {
  switch (e.kind) {
    case Expr::Kind::kValueRef:
    case Expr::Kind::kConstRef:
      if (!names.contains(RefKey(e))) {
        std::string hint;
        if (e.kind == Expr::Kind::kValueRef) {
          std::string other = absl::StrCat("%", e.text, e.variadic ? "" : "...");
          if (names.contains(other)) {
            hint = e.variadic ? " (it is a single value: drop the '...')"
                              : " (it is a sequence: write it with '...')";
          }
        }
        return LocError(e.loc, absl::StrCat("unknown capture '", RefKey(e), "'", hint));
      }
      return absl::OkStatus();
    case Expr::Kind::kCall: {
      const auto& fns = internal::Functions();
      auto it = fns.find(e.text);
      if (it == fns.end()) {
        return LocError(e.loc, absl::StrCat("unknown function '", e.text,
                                            "' (see patterns/README.md for the list)"));
      }
      int n = static_cast<int>(e.args.size());
      if (n < it->second.min_args || (it->second.max_args >= 0 && n > it->second.max_args)) {
        return LocError(e.loc, absl::StrCat("function '", e.text, "' takes ",
                                            it->second.min_args,
                                            it->second.max_args == it->second.min_args
                                                ? ""
                                                : absl::StrCat(" to ", it->second.max_args),
                                            " argument(s), got ", n));
      }
      break;
    }
    default:
      break;
  }
  for (const auto& a : e.args) {
    absl::Status st = CheckExpr(*a, names);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

void AddNodeNames(const PatternNode& n, NameSet* names) {
  for (const PatternOutput& o : n.outputs) {
    if (!o.name.empty()) names->insert(absl::StrCat("%", o.name, o.variadic ? "..." : ""));
  }
  for (const PatternArg& a : n.args) {
    if (a.kind == PatternArg::Kind::kValue) {
      names->insert(absl::StrCat("%", a.name, a.variadic ? "..." : ""));
    } else if (a.kind == PatternArg::Kind::kConst) {
      names->insert(absl::StrCat("$", a.name));
    }
  }
  if (!n.output_index.empty()) names->insert(absl::StrCat("$", n.output_index));
}

absl::Status BuildScope(const std::vector<PatternNode>& nodes, int first_id, PatternScope* scope) {
  for (size_t k = 0; k < nodes.size(); ++k) {
    int id = first_id + static_cast<int>(k);
    scope->node_ids.push_back(id);
    const PatternNode& n = nodes[k];
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      const PatternOutput& out = n.outputs[o];
      if (out.name.empty()) continue;
      bool dup = scope->value_def.contains(out.name) || scope->seq_def.contains(out.name);
      if (dup) return LocError(out.loc, absl::StrCat("'%", out.name, "' is defined twice"));
      if (out.variadic) {
        scope->seq_def[out.name] = id;
      } else {
        scope->value_def[out.name] = {id, static_cast<int>(o)};
      }
    }
  }
  return absl::OkStatus();
}

// Marks every node of `scope` reachable from `start` through input names.
void Reach(const std::vector<CompiledPatternNode>& all, const PatternScope& scope, int start,
           absl::flat_hash_set<int>* seen) {
  if (!seen->insert(start).second) return;
  for (const PatternArg& a : all[start].ast->args) {
    if (a.kind != PatternArg::Kind::kValue) continue;
    if (a.variadic) {
      auto it = scope.seq_def.find(a.name);
      if (it != scope.seq_def.end()) Reach(all, scope, it->second, seen);
    } else {
      auto it = scope.value_def.find(a.name);
      if (it != scope.value_def.end()) Reach(all, scope, it->second.first, seen);
    }
  }
}

absl::StatusOr<std::shared_ptr<CompiledRule>> CompileRule(Rule rule) {
  auto cr = std::make_shared<CompiledRule>();
  cr->ast = std::move(rule);
  const Rule& r = cr->ast;
  // Pattern nodes: main first, then each foreach block.
  auto add_node = [&](const PatternNode& n) -> absl::Status {
    CompiledPatternNode cn;
    cn.ast = &n;
    auto kinds = ResolveOp(n.op, n.op_loc);
    if (!kinds.ok()) return kinds.status();
    cn.kinds = std::move(*kinds);
    for (const PatternArg& a : n.args) {
      if (a.kind == PatternArg::Kind::kLiteral) {
        auto d = LiteralDatum(*a.literal);
        if (!d.ok()) return d.status();
        cn.literals.push_back(*d);
      } else {
        cn.literals.push_back(Datum());
      }
    }
    cr->nodes.push_back(std::move(cn));
    return absl::OkStatus();
  };
  for (const PatternNode& n : r.match) {
    absl::Status st = add_node(n);
    if (!st.ok()) return st;
  }
  absl::Status st = BuildScope(r.match, 0, &cr->main);
  if (!st.ok()) return st;
  cr->anchor = static_cast<int>(r.match.size()) - 1;
  {
    absl::flat_hash_set<int> seen;
    Reach(cr->nodes, cr->main, cr->anchor, &seen);
    for (int id : cr->main.node_ids) {
      if (!seen.contains(id)) {
        return LocError(r.match[id].loc,
                        "pattern line is not connected to the anchor (the last match line): "
                        "each line must define a value that a later line uses");
      }
    }
  }
  if (cr->nodes[cr->anchor].ast->outputs.empty() ||
      !cr->nodes[cr->anchor].ast->output_index.empty()) {
    return LocError(r.match.back().loc, "the anchor (last match line) cannot use '@ $k'");
  }
  NameSet names;
  for (const PatternNode& n : r.match) AddNodeNames(n, &names);
  for (const ForeachPattern& fe : r.foreach) {
    CompiledForeach cf;
    cf.ast = &fe;
    int first = static_cast<int>(cr->nodes.size());
    for (const PatternNode& n : fe.nodes) {
      SENTIER_RETURN_IF_ERROR(add_node(n));
    }
    SENTIER_RETURN_IF_ERROR(BuildScope(fe.nodes, first, &cf.scope));
    if (!names.contains(absl::StrCat("%", fe.sequence, "..."))) {
      return LocError(fe.loc, absl::StrCat("foreach iterates over '%", fe.sequence,
                                           "...', which the pattern above does not bind"));
    }
    auto def = cf.scope.value_def.find(fe.element);
    if (def == cf.scope.value_def.end()) {
      return LocError(fe.loc, absl::StrCat("the element '%", fe.element,
                                           "' must be defined by a line of the foreach block"));
    }
    absl::flat_hash_set<int> seen;
    Reach(cr->nodes, cf.scope, def->second.first, &seen);
    NameSet block_names;
    for (int id : cf.scope.node_ids) {
      if (!seen.contains(id)) {
        return LocError(cr->nodes[id].ast->loc,
                        "foreach line is not connected to the element's defining line");
      }
      AddNodeNames(*cr->nodes[id].ast, &block_names);
    }
    for (const std::string& pe : fe.per_element) {
      if (!block_names.contains(pe)) {
        return LocError(fe.loc, absl::StrCat("per-element name '", pe,
                                             "' is not bound inside the foreach block"));
      }
    }
    // Shared names become visible; per-element ones become sequences/lists.
    for (const std::string& n : block_names) {
      bool per = n == absl::StrCat("%", fe.element) ||
                 std::find(fe.per_element.begin(), fe.per_element.end(), n) != fe.per_element.end();
      if (!per) names.insert(n);
    }
    for (const std::string& pe : fe.per_element) {
      names.insert(pe[0] == '%' ? absl::StrCat(pe, "...") : pe);
    }
    cr->foreach.push_back(std::move(cf));
  }
  for (const ExprPtr& w : r.where) {
    SENTIER_RETURN_IF_ERROR(CheckExpr(*w, names));
  }
  if (r.is_group) {
    if (r.key.empty()) return LocError(r.loc, "a group rule needs a 'key' section");
    for (const ExprPtr& k : r.key) {
      SENTIER_RETURN_IF_ERROR(CheckExpr(*k, names));
    }
    // In a group's rewrite every per-member value is a sequence over the members (%x...), and
    // a constant is the first member's (list it in the key when members must agree on it).
    NameSet group_names;
    for (const std::string& n : names) {
      if (n[0] == '%' && n.size() > 3 && n.substr(n.size() - 3) == "...") continue;
      group_names.insert(n[0] == '%' ? absl::StrCat(n, "...") : n);
    }
    names = std::move(group_names);
  }
  for (const RewriteStmt& s : r.rewrite) {
    for (const ExprPtr& a : s.args) {
      SENTIER_RETURN_IF_ERROR(CheckExpr(*a, names));
    }
    for (const auto& [kw, a] : s.kwargs) {
      SENTIER_RETURN_IF_ERROR(CheckExpr(*a, names));
    }
    switch (s.kind) {
      case RewriteStmt::Kind::kInsert: {
        if (IsRegexOp(s.op)) return LocError(s.loc, "a rewrite inserts one named operator, not a regex");
        auto kinds = ResolveOp(s.op, s.loc);
        if (!kinds.ok()) return kinds.status();
        if (names.contains(absl::StrCat("%", s.output))) {
          return LocError(s.loc, absl::StrCat("'%", s.output, "' is already bound"));
        }
        names.insert(absl::StrCat("%", s.output));
        break;
      }
      case RewriteStmt::Kind::kUnpack:
        if (s.args.size() != 2) return LocError(s.loc, "unpack(list, count) takes 2 arguments");
        if (names.contains(absl::StrCat("%", s.output, "...")) ||
            names.contains(absl::StrCat("%", s.output))) {
          return LocError(s.loc, absl::StrCat("'%", s.output, "' is already bound"));
        }
        names.insert(absl::StrCat("%", s.output, "..."));
        break;
      case RewriteStmt::Kind::kReplace: {
        absl::Status a = CheckExpr(*s.from, names);
        if (!a.ok()) return a;
        absl::Status b = CheckExpr(*s.to, names);
        if (!b.ok()) return b;
        break;
      }
      case RewriteStmt::Kind::kCall: {
        if (&s != &r.rewrite.back()) {
          return LocError(s.loc, "'call' must be the last statement of a rewrite");
        }
        for (const RewriteStmt& prev : r.rewrite) {
          if (prev.kind == RewriteStmt::Kind::kReplace) {
            return LocError(s.loc, "a rewrite with 'call' cannot also 'replace'");
          }
        }
        const auto& builtins = internal::Builtins();
        auto it = builtins.find(s.op);
        if (it == builtins.end()) {
          return LocError(s.loc, absl::StrCat("unknown builtin '", s.op,
                                              "' (see patterns/README.md for the list)"));
        }
        if (static_cast<int>(s.args.size()) != it->second.num_args) {
          return LocError(s.loc, absl::StrCat("builtin '", s.op, "' takes ",
                                              it->second.num_args, " argument(s), got ",
                                              s.args.size()));
        }
        break;
      }
    }
  }
  return cr;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const RuleSet>> RuleSet::Create(std::vector<Rule> rules) {
  std::shared_ptr<RuleSet> set(new RuleSet());
  absl::flat_hash_map<std::string, SourceLoc> seen;
  for (Rule& r : rules) {
    auto [it, inserted] = seen.emplace(r.name, r.loc);
    if (!inserted) {
      return LocError(r.loc, absl::StrCat("duplicate rule name '", r.name, "' (first defined at ",
                                          it->second.ToString(), ")"));
    }
    auto cr = CompileRule(std::move(r));
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

// =============================================================================================
// Matching
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

  // `via`: the value through which the node was reached (for `@ $k` lines).
  bool MatchNode(const PatternScope& scope, int id, Node* n, Value* via) {
    auto seen = b_.matched.find(n);
    if (seen != b_.matched.end()) {
      if (seen->second != id) return false;
      const PatternNode& p = *rule_.nodes[id].ast;
      if (!p.output_index.empty() && via != nullptr) {
        // Same node reached through another output: only the index may differ per element.
        return BindValue(p.outputs[0].name, via) &&
               BindConst(p.output_index, Datum::Int(static_cast<int64_t>(via->offset())));
      }
      return true;
    }
    const CompiledPatternNode& cn = rule_.nodes[id];
    const PatternNode& p = *cn.ast;
    if (!cn.kinds.contains(n->kind())) return false;
    b_.matched.emplace(n, id);
    b_.matched_order.push_back(n);
    // Outputs.
    if (!p.output_index.empty()) {
      if (via == nullptr) return false;
      if (!p.outputs[0].name.empty() && !BindValue(p.outputs[0].name, via)) return false;
      if (!BindConst(p.output_index, Datum::Int(static_cast<int64_t>(via->offset())))) return false;
    } else {
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
    }
    // Inputs.
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

// ---------------------------------------------------------------------------------------------
// Expression evaluation
absl::StatusOr<Datum> Eval(const Expr& e, EvalContext& ctx);

absl::StatusOr<Datum> EvalBinary(const Expr& e, EvalContext& ctx) {
  const std::string& op = e.text;
  auto lhs = Eval(*e.args[0], ctx);
  if (!lhs.ok()) return lhs;
  if (op == "and" || op == "or") {
    if (lhs->kind != Datum::Kind::kBool) return LocError(e.loc, "'and'/'or' need booleans");
    if (op == "and" && !lhs->b) return Datum::Bool(false);
    if (op == "or" && lhs->b) return Datum::Bool(true);
    auto rhs = Eval(*e.args[1], ctx);
    if (!rhs.ok()) return rhs;
    if (rhs->kind != Datum::Kind::kBool) return LocError(e.loc, "'and'/'or' need booleans");
    return Datum::Bool(rhs->b);
  }
  auto rhs = Eval(*e.args[1], ctx);
  if (!rhs.ok()) return rhs;
  const Datum& a = *lhs;
  const Datum& b = *rhs;
  if (op == "==") return Datum::Bool(a.Equal(b));
  if (op == "!=") return Datum::Bool(!a.Equal(b));
  if (op == "+" && a.kind == Datum::Kind::kValueSeq && b.kind == Datum::Kind::kValueSeq) {
    std::vector<Value*> out = a.values;
    out.insert(out.end(), b.values.begin(), b.values.end());
    return Datum::Seq(std::move(out));
  }
  if (op == "+" && a.kind == Datum::Kind::kList && b.kind == Datum::Kind::kList) {
    std::vector<Datum> out = a.list;
    out.insert(out.end(), b.list.begin(), b.list.end());
    return Datum::List(std::move(out));
  }
  bool nums = (a.kind == Datum::Kind::kInt || a.kind == Datum::Kind::kFloat) &&
              (b.kind == Datum::Kind::kInt || b.kind == Datum::Kind::kFloat);
  if (!nums) {
    return LocError(e.loc, absl::StrCat("'", op, "' needs numbers, got ", a.DebugString(), " and ",
                                        b.DebugString()));
  }
  bool ints = a.kind == Datum::Kind::kInt && b.kind == Datum::Kind::kInt;
  if (ints) {
    if (op == "<") return Datum::Bool(a.i < b.i);
    if (op == "<=") return Datum::Bool(a.i <= b.i);
    if (op == ">") return Datum::Bool(a.i > b.i);
    if (op == ">=") return Datum::Bool(a.i >= b.i);
  }
  double x = a.kind == Datum::Kind::kInt ? static_cast<double>(a.i) : a.f;
  double y = b.kind == Datum::Kind::kInt ? static_cast<double>(b.i) : b.f;
  if (op == "<") return Datum::Bool(x < y);
  if (op == "<=") return Datum::Bool(x <= y);
  if (op == ">") return Datum::Bool(x > y);
  if (op == ">=") return Datum::Bool(x >= y);
  if (ints) {
    if (op == "+") return Datum::Int(a.i + b.i);
    if (op == "-") return Datum::Int(a.i - b.i);
    if (op == "*") return Datum::Int(a.i * b.i);
    if (op == "/" || op == "%") {
      if (b.i == 0) return LocError(e.loc, "division by zero");
      // Floor division and modulo, as in TorchScript/Python.
      int64_t q = a.i / b.i;
      if ((a.i % b.i != 0) && ((a.i < 0) != (b.i < 0))) --q;
      return op == "/" ? Datum::Int(q) : Datum::Int(a.i - q * b.i);
    }
  }
  if (op == "+") return Datum::Float(x + y);
  if (op == "-") return Datum::Float(x - y);
  if (op == "*") return Datum::Float(x * y);
  if (op == "/") return Datum::Float(x / y);
  return LocError(e.loc, absl::StrCat("unsupported operator '", op, "'"));
}

absl::StatusOr<Datum> Eval(const Expr& e, EvalContext& ctx) {
  Bindings& b = *ctx.bindings;
  switch (e.kind) {
    case Expr::Kind::kInt:
      return Datum::Int(e.int_value);
    case Expr::Kind::kFloat:
      return Datum::Float(e.float_value);
    case Expr::Kind::kBool:
      return Datum::Bool(e.bool_value);
    case Expr::Kind::kNone:
      return Datum();
    case Expr::Kind::kString:
      return Datum::Str(e.text);
    case Expr::Kind::kConstRef: {
      auto it = b.consts.find(e.text);
      if (it == b.consts.end()) return LocError(e.loc, absl::StrCat("$", e.text, " is not bound"));
      return it->second;
    }
    case Expr::Kind::kValueRef: {
      if (e.variadic) {
        auto it = b.seqs.find(e.text);
        if (it == b.seqs.end()) return LocError(e.loc, absl::StrCat("%", e.text, "... is not bound"));
        return Datum::Seq(it->second);
      }
      auto it = b.values.find(e.text);
      if (it == b.values.end()) return LocError(e.loc, absl::StrCat("%", e.text, " is not bound"));
      return Datum::Val(it->second);
    }
    case Expr::Kind::kList: {
      std::vector<Datum> items;
      bool any_value = false;
      for (const auto& a : e.args) {
        auto d = Eval(*a, ctx);
        if (!d.ok()) return d;
        any_value |= !d->IsConstant();
        items.push_back(std::move(*d));
      }
      if (!any_value) return Datum::List(std::move(items));
      std::vector<Value*> vs;
      for (const Datum& d : items) {
        if (d.kind == Datum::Kind::kValue) {
          vs.push_back(d.value);
        } else if (d.kind == Datum::Kind::kValueSeq) {
          vs.insert(vs.end(), d.values.begin(), d.values.end());
        } else {
          return LocError(e.loc, "a list cannot mix graph values and constants");
        }
      }
      return Datum::Seq(std::move(vs));
    }
    case Expr::Kind::kBinary:
      return EvalBinary(e, ctx);
    case Expr::Kind::kUnary: {
      auto d = Eval(*e.args[0], ctx);
      if (!d.ok()) return d;
      if (e.text == "not") {
        if (d->kind != Datum::Kind::kBool) return LocError(e.loc, "'not' needs a boolean");
        return Datum::Bool(!d->b);
      }
      if (d->kind == Datum::Kind::kInt) return Datum::Int(-d->i);
      if (d->kind == Datum::Kind::kFloat) return Datum::Float(-d->f);
      return LocError(e.loc, "unary '-' needs a number");
    }
    case Expr::Kind::kIndex: {
      auto base = Eval(*e.args[0], ctx);
      if (!base.ok()) return base;
      auto idx = Eval(*e.args[1], ctx);
      if (!idx.ok()) return idx;
      if (idx->kind != Datum::Kind::kInt) return LocError(e.loc, "an index must be an int");
      int64_t n = base->kind == Datum::Kind::kList      ? static_cast<int64_t>(base->list.size())
                  : base->kind == Datum::Kind::kValueSeq ? static_cast<int64_t>(base->values.size())
                                                         : -1;
      if (n < 0) return LocError(e.loc, "only lists and sequences can be indexed");
      int64_t k = idx->i < 0 ? idx->i + n : idx->i;
      if (k < 0 || k >= n) return LocError(e.loc, "index out of range");
      if (base->kind == Datum::Kind::kList) return base->list[k];
      return Datum::Val(base->values[k]);
    }
    case Expr::Kind::kCall: {
      const FunctionSpec& fn = Functions().at(e.text);
      std::vector<Datum> args;
      for (const auto& a : e.args) {
        auto d = Eval(*a, ctx);
        if (!d.ok()) return d;
        args.push_back(std::move(*d));
      }
      auto out = fn.impl(args, ctx);
      if (!out.ok()) return LocError(e.loc, absl::StrCat(e.text, ": ", out.status().message()));
      return out;
    }
  }
  return LocError(e.loc, "cannot evaluate");
}

// ---------------------------------------------------------------------------------------------
// Rewrite
bool SameKindOfType(const c10::TypePtr& from, const c10::TypePtr& to) {
  c10::TypePtr a = c10::unshapedType(from);
  c10::TypePtr b = c10::unshapedType(to);
  return b->isSubtypeOf(*a);
}

// Position of `v`'s definition within `block`: the node (of `block`) that defines it or contains
// its definition; nullptr when it is defined outside (graph inputs, outer blocks): earliest.
Node* DefinitionIn(Value* v, torch::jit::Block* block) {
  Node* n = v->node();
  while (n != nullptr && n->owningBlock() != block) {
    torch::jit::Block* ob = n->owningBlock();
    if (ob == nullptr || ob->owningNode() == nullptr) return nullptr;
    n = ob->owningNode();
  }
  if (n != nullptr && n->kind() == c10::prim::Param) return nullptr;
  return n;
}

bool UseIsAfter(const torch::jit::Use& use, Node* def) {
  if (def == nullptr) return true;
  Node* user = use.user;
  torch::jit::Block* block = def->owningBlock();
  while (user != nullptr && user->owningBlock() != block) {
    torch::jit::Block* ob = user->owningBlock();
    if (ob == nullptr || ob->owningNode() == nullptr) return false;
    user = ob->owningNode();
  }
  if (user == nullptr) return false;
  if (user->kind() == c10::prim::Return) return true;
  return def->isBefore(user);
}

class Rewriter {
 public:
  Rewriter(const CompiledRule& rule, EvalContext& ctx) : rule_(rule), ctx_(ctx) {}

  absl::StatusOr<bool> Run() {
    Graph* g = ctx_.graph;
    torch::jit::Block* block = ctx_.anchor->owningBlock();
    std::vector<std::pair<Value*, Value*>> replacements;
    bool changed = false;
    try {
      for (const RewriteStmt& s : rule_.ast.rewrite) {
        switch (s.kind) {
          case RewriteStmt::Kind::kInsert: {
            std::vector<Datum> args;
            for (const ExprPtr& a : s.args) {
              auto d = Eval(*a, ctx_);
              if (!d.ok()) return Fail(d.status());
              args.push_back(std::move(*d));
            }
            std::vector<std::pair<std::string, Datum>> kwargs;
            std::vector<Datum> all = args;
            for (const auto& [kw, a] : s.kwargs) {
              auto d = Eval(*a, ctx_);
              if (!d.ok()) return Fail(d.status());
              kwargs.emplace_back(kw, *d);
              all.push_back(*d);
            }
            Node* point = InsertPointFor(all, block);
            torch::jit::WithInsertPoint guard(point);
            std::vector<torch::jit::NamedValue> named, kwnamed;
            for (const Datum& d : args) {
              auto nv = ToNamedValue(d, g);
              if (!nv.ok()) return Fail(nv.status());
              named.push_back(*nv);
            }
            for (const auto& [kw, d] : kwargs) {
              auto nv = ToNamedValue(d, g);
              if (!nv.ok()) return Fail(nv.status());
              kwnamed.emplace_back(kw, nv->value(*g));
            }
            Value* out = g->insert(c10::Symbol::fromQualString(s.op), named, kwnamed);
            Track(out->node());
            // An overload reached only through an implicit conversion (a tensor passed where a
            // Scalar goes) computes something else: refuse it.
            for (Value* in : out->node()->inputs()) {
              c10::Symbol k = in->node()->kind();
              if (k == c10::aten::ScalarImplicit || k == c10::aten::IntImplicit ||
                  k == c10::aten::FloatImplicit || k == c10::aten::ComplexImplicit) {
                Track(in->node());
                return Fail(absl::InvalidArgumentError(absl::StrCat(
                    s.op, " matched only through an implicit ", k.toQualString(),
                    " (pass keyword-only arguments as name=value)")));
              }
            }
            ctx_.bindings->values[s.output] = out;
            break;
          }
          case RewriteStmt::Kind::kUnpack: {
            auto list = Eval(*s.args[0], ctx_);
            if (!list.ok()) return Fail(list.status());
            auto count = Eval(*s.args[1], ctx_);
            if (!count.ok()) return Fail(count.status());
            if (list->kind != Datum::Kind::kValue || count->kind != Datum::Kind::kInt ||
                count->i < 0) {
              return Fail(absl::InvalidArgumentError("unpack(list, count) needs a list value and an int"));
            }
            Node* point = InsertPointFor({*list}, block);
            torch::jit::WithInsertPoint guard(point);
            Node* un = g->insertNode(g->createListUnpack(list->value, static_cast<size_t>(count->i)));
            Track(un);
            ctx_.bindings->seqs[s.output] =
                std::vector<Value*>(un->outputs().begin(), un->outputs().end());
            break;
          }
          case RewriteStmt::Kind::kReplace: {
            auto from = Eval(*s.from, ctx_);
            if (!from.ok()) return Fail(from.status());
            auto to = Eval(*s.to, ctx_);
            if (!to.ok()) return Fail(to.status());
            std::vector<Value*> fs = AsValues(*from), ts = AsValues(*to);
            if (fs.size() != ts.size() || fs.empty()) {
              return Fail(absl::InvalidArgumentError(
                  absl::StrCat("replace: ", fs.size(), " values with ", ts.size())));
            }
            for (size_t k = 0; k < fs.size(); ++k) {
              if (fs[k] == nullptr || ts[k] == nullptr) {
                return Fail(absl::InvalidArgumentError("replace needs graph values"));
              }
              if (fs[k] != ts[k]) replacements.emplace_back(fs[k], ts[k]);
            }
            break;
          }
          case RewriteStmt::Kind::kCall: {
            // Builtins validate and edit on their own. A call is a rule's last statement and
            // no `replace` precedes it (checked when the rule is compiled).
            std::vector<Datum> args;
            for (const ExprPtr& a : s.args) {
              auto d = Eval(*a, ctx_);
              if (!d.ok()) return Fail(d.status());
              args.push_back(std::move(*d));
            }
            auto did = Builtins().at(s.op).impl(args, ctx_);
            if (!did.ok()) return Fail(did.status());
            if (!*did) return Fail(absl::OkStatus());
            changed = true;
            break;
          }
        }
      }
    } catch (const std::exception& ex) {
      return Fail(absl::InternalError(absl::StrCat("rule '", rule_.ast.name, "': ", ex.what())));
    }
    if (!Commit(replacements)) return Fail(absl::OkStatus());
    changed |= !replacements.empty();
    if (!changed) {
      RollBack();
      return false;
    }
    return true;
  }

 private:
  static std::vector<Value*> AsValues(const Datum& d) {
    if (d.kind == Datum::Kind::kValue) return {d.value};
    if (d.kind == Datum::Kind::kValueSeq) return d.values;
    return {nullptr};
  }

  absl::StatusOr<torch::jit::NamedValue> ToNamedValue(const Datum& d, Graph* g) {
    if (d.kind == Datum::Kind::kValue) return torch::jit::NamedValue(d.value);
    if (d.kind == Datum::Kind::kValueSeq) {
      if (d.values.empty()) return absl::InvalidArgumentError("cannot build an empty value list");
      c10::TypePtr elem = c10::unshapedType(d.values[0]->type());
      Node* list = g->insertNode(g->createList(elem, d.values));
      Track(list);
      return torch::jit::NamedValue(list->output());
    }
    if (d.value != nullptr && d.value->node()->kind() == c10::prim::Constant) {
      return torch::jit::NamedValue(d.value);
    }
    auto iv = d.ToIValue();
    if (!iv.ok()) return iv.status();
    return torch::jit::NamedValue(*iv);
  }

  // New nodes go right after the latest definition among their inputs (within the anchor's
  // block), so they dominate as many uses of the values they replace as possible.
  Node* InsertPointFor(const std::vector<Datum>& args, torch::jit::Block* block) {
    Node* latest = nullptr;
    auto consider = [&](Value* v) {
      Node* def = DefinitionIn(v, block);
      if (def != nullptr && (latest == nullptr || latest->isBefore(def))) latest = def;
    };
    for (const Datum& d : args) {
      if (d.kind == Datum::Kind::kValue) consider(d.value);
      if (d.kind == Datum::Kind::kValueSeq) {
        for (Value* v : d.values) consider(v);
      }
      // Constants captured from the graph are reused as they are (ToNamedValue).
      if (d.IsConstant() && d.value != nullptr && d.value->node()->kind() == c10::prim::Constant) {
        consider(d.value);
      }
    }
    if (latest == nullptr) return block->nodes().front();
    return latest->next();
  }

  void Track(Node* n) { inserted_.push_back(n); }

  bool Commit(const std::vector<std::pair<Value*, Value*>>& reps) {
    for (const auto& [from, to] : reps) {
      if (!SameKindOfType(from->type(), to->type())) return false;
      Node* def = DefinitionIn(to, from->node()->owningBlock());
      for (const torch::jit::Use& use : from->uses()) {
        if (use.user == to->node()) return false;  // would create a cycle
        if (!UseIsAfter(use, def)) return false;
      }
    }
    // All replacements happen at once (a swap [%a, %b] -> [%b, %a] works): uses are taken
    // before any of them is redirected.
    std::vector<std::vector<torch::jit::Use>> uses;
    for (const auto& rep : reps) uses.push_back(rep.first->uses());
    for (size_t k = 0; k < reps.size(); ++k) {
      Value* from = reps[k].first;
      Value* to = reps[k].second;
      bool created = std::find(inserted_.begin(), inserted_.end(), to->node()) != inserted_.end();
      if (created && from->type()->kind() == c10::TypeKind::TensorType &&
          to->type()->kind() == c10::TypeKind::TensorType) {
        to->setType(from->type());
      }
      for (const torch::jit::Use& u : uses[k]) u.user->replaceInput(u.offset, to);
      if (ctx_.facts != nullptr) ctx_.facts->Propagate(from, to);
    }
    return true;
  }

  void RollBack() {
    for (auto it = inserted_.rbegin(); it != inserted_.rend(); ++it) {
      Node* n = *it;
      bool used = false;
      for (Value* o : n->outputs()) used |= o->hasUses();
      if (!used) n->destroy();
    }
    inserted_.clear();
  }

  absl::StatusOr<bool> Fail(const absl::Status& st) {
    RollBack();
    if (st.ok()) return false;
    return st;
  }

  const CompiledRule& rule_;
  EvalContext& ctx_;
  std::vector<Node*> inserted_;
};

}  // namespace

namespace {

// Nodes that can be moved to an earlier point of their block without changing anything: constants,
// attribute reads of the module, and int-list literals.
bool Hoistable(Node* n) {
  if (n->kind() == c10::prim::Constant) return true;
  if (n->kind() == c10::prim::GetAttr) {
    Value* obj = n->input(0);
    return obj->node()->kind() == c10::prim::Param || Hoistable(obj->node());
  }
  if (n->kind() == c10::prim::ListConstruct) {
    for (Value* v : n->inputs()) {
      if (v->node()->kind() != c10::prim::Constant) return false;
    }
    return true;
  }
  return false;
}

// Moves the definition of `v` (and what it needs) right after `*cursor` in `*cursor`'s block,
// advancing the cursor, when it is hoistable and defined later; returns false when `v` is defined
// later and cannot move. Inputs move first, so every moved node follows what it reads.
bool HoistAfter(Value* v, Node** cursor) {
  Node* n = v->node();
  if (n->owningBlock() != (*cursor)->owningBlock() || n->kind() == c10::prim::Param) return true;
  if (n == *cursor || n->isBefore(*cursor)) return true;
  if (!Hoistable(n)) return false;
  for (Value* in : n->inputs()) {
    if (!HoistAfter(in, cursor)) return false;
  }
  n->moveAfter(*cursor);
  *cursor = n;
  return true;
}

Node* OwnerIn(Node* n, torch::jit::Block* block) {
  while (n != nullptr && n->owningBlock() != block) {
    torch::jit::Block* ob = n->owningBlock();
    if (ob == nullptr || ob->owningNode() == nullptr) return nullptr;
    n = ob->owningNode();
  }
  return n;
}

}  // namespace

// FollowsBatch: a tensor value whose size may change with the batch (a dynamic dim in the facts,
// or no facts at all); module parameters and constants never do.
bool FollowsBatch(Value* v, const ShapeFacts* facts) {
  if (v->type()->kind() != c10::TypeKind::TensorType) return false;
  if (Hoistable(v->node())) return false;
  const TensorFact* f = facts != nullptr ? facts->Find(v) : nullptr;
  if (f == nullptr) return true;
  for (bool d : f->dynamic) {
    if (d) return true;
  }
  return false;
}

// ProvablySameShape: a and b have equal sizes for every input the graph accepts, whatever the
// batch: the same value; pieces of one unbind, or equal sections of one split_with_sizes; pieces
// of two unbinds (or equal sections of two splits) on one dim of provably equal tensors; the
// same shape-preserving op (pointwise, layer_norm, dropout, detach, linear with weights of equal
// static sizes) applied to provably equal-shaped tensors and equal constants.
bool ProvablySameShape(Value* a, Value* b, const ShapeFacts* facts, int depth) {
  if (a == b) return true;
  if (depth > 48) return false;
  Node* na = a->node();
  Node* nb = b->node();
  if (na == nb && na->kind() == c10::prim::ListUnpack) {
    Node* src = na->input(0)->node();
    if (src->kind() == c10::aten::unbind) return true;
    c10::optional<std::vector<int64_t>> sizes = SplitSections(src);
    return sizes && (*sizes)[a->offset()] == (*sizes)[b->offset()];
  }
  if (na->kind() == c10::prim::ListUnpack && nb->kind() == c10::prim::ListUnpack) {
    // Pieces of two unbinds, or two splits, on the same dim of provably equal-shaped tensors;
    // for splits, the two pieces' sections must also be equal.
    Node* sa = na->input(0)->node();
    Node* sb = nb->input(0)->node();
    if (sa->kind() != sb->kind()) return false;
    size_t dim_index;
    if (sa->kind() == c10::aten::unbind) {
      dim_index = 1;
    } else {
      c10::optional<std::vector<int64_t>> za = SplitSections(sa);
      c10::optional<std::vector<int64_t>> zb = SplitSections(sb);
      if (!za || !zb || (*za)[a->offset()] != (*zb)[b->offset()]) return false;
      dim_index = 2;
    }
    if (sa->inputs().size() <= dim_index || sb->inputs().size() <= dim_index) return false;
    c10::optional<Datum> da = DatumFromConstant(sa->input(dim_index));
    c10::optional<Datum> db = DatumFromConstant(sb->input(dim_index));
    if (!da || !db || !da->Equal(*db)) return false;
    return ProvablySameShape(sa->input(0), sb->input(0), facts, depth + 1);
  }
  if (na->kind() != nb->kind() || na->inputs().size() != nb->inputs().size() ||
      na->outputs().size() != 1 || nb->outputs().size() != 1) {
    return false;
  }
  static const char* kPreserving[] = {
      "aten::relu",  "aten::tanh",   "aten::sigmoid",    "aten::silu",     "aten::gelu",
      "aten::clamp", "aten::detach", "aten::nan_to_num", "aten::dropout",  "aten::layer_norm",
      "aten::add",   "aten::sub",    "aten::mul",        "aten::div",      "aten::neg",
      "aten::abs",   "aten::exp",    "aten::contiguous", "aten::softmax",  "aten::linear"};
  bool preserving = false;
  for (const char* k : kPreserving) preserving |= na->kind() == c10::Symbol::fromQualString(k);
  if (!preserving) return false;
  for (size_t k = 0; k < na->inputs().size(); ++k) {
    Value* x = na->input(k);
    Value* y = nb->input(k);
    if (x == y) continue;
    c10::optional<Datum> cx = DatumFromConstant(x);
    c10::optional<Datum> cy = DatumFromConstant(y);
    if (cx || cy) {
      if (!cx || !cy || !cx->Equal(*cy)) return false;
      continue;
    }
    if (!FollowsBatch(x, facts) && !FollowsBatch(y, facts)) {
      // Parameters and other static tensors (a linear's weight, a layer_norm's affine): their
      // sizes are fixed; they must be equal.
      const TensorFact* fx = facts != nullptr ? facts->Find(x) : nullptr;
      const TensorFact* fy = facts != nullptr ? facts->Find(y) : nullptr;
      if (fx == nullptr || fy == nullptr || fx->sizes != fy->sizes) return false;
      continue;
    }
    if (!ProvablySameShape(x, y, facts, depth + 1)) return false;
  }
  return true;
}

bool IsBefore(Node* a, Node* b) {
  if (a == nullptr) return b != nullptr;
  if (b == nullptr) return false;
  return a->isBefore(b);
}

namespace {

// MakeContext: the evaluation context of one match (or one group) anchored at `anchor`.
EvalContext MakeContext(const CompiledRule& rule, Node* anchor, ShapeFacts* facts,
                        Bindings* bindings, const LegalityCheck* legal) {
  EvalContext ctx;
  ctx.graph = anchor->owningGraph();
  ctx.anchor = anchor;
  ctx.facts = facts;
  ctx.bindings = bindings;
  ctx.rule_name = rule.ast.name;
  if (legal != nullptr && *legal) {
    LegalityCheck check = *legal;
    ctx.legal = [check, anchor](const std::vector<Node*>& nodes) { return check(nodes, anchor); };
  }
  return ctx;
}

// Rewrite: runs the rule's rewrite section; kApplied, kNoMatch (nothing changed) or kError.
ApplyResult Rewrite(const CompiledRule& rule, EvalContext& ctx, std::string* error) {
  Rewriter rw(rule, ctx);
  auto done = rw.Run();
  if (!done.ok()) {
    if (error != nullptr) *error = std::string(done.status().message());
    return ApplyResult::kError;
  }
  return *done ? ApplyResult::kApplied : ApplyResult::kNoMatch;
}

}  // namespace

bool MatchGroupMember(const CompiledRule& rule, Node* anchor, ShapeFacts* facts,
                      GroupMember* out) {
  if (!rule.nodes[rule.anchor].kinds.contains(anchor->kind())) return false;
  GroupMember m;
  m.anchor = anchor;
  Matcher matcher(rule, &m.bindings);
  if (!matcher.MatchAll(anchor)) return false;
  EvalContext ctx = MakeContext(rule, anchor, facts, &m.bindings, nullptr);
  for (const ExprPtr& w : rule.ast.where) {
    auto d = Eval(*w, ctx);
    if (!d.ok() || d->kind != Datum::Kind::kBool || !d->b) return false;
  }
  std::vector<std::string> key;
  for (const ExprPtr& k : rule.ast.key) {
    auto d = Eval(*k, ctx);
    if (!d.ok()) return false;
    key.push_back(d->DebugString());
  }
  m.key = absl::StrJoin(key, "|");
  torch::jit::Block* block = anchor->owningBlock();
  for (Node* n : m.bindings.matched_order) {
    if (n->owningBlock() != block) return false;
    for (Value* in : n->inputs()) {
      if (m.bindings.matched.contains(in->node()) || Hoistable(in->node())) continue;
      Node* def = DefinitionIn(in, block);
      if (def != nullptr && IsBefore(m.last_input_def, def)) m.last_input_def = def;
    }
    for (Value* o : n->outputs()) {
      for (const torch::jit::Use& u : o->uses()) {
        if (m.bindings.matched.contains(u.user)) continue;
        Node* user = OwnerIn(u.user, block);
        if (user == nullptr || user->kind() == c10::prim::Return) continue;
        if (m.first_output_use == nullptr || user->isBefore(m.first_output_use)) {
          m.first_output_use = user;
        }
      }
    }
  }
  *out = std::move(m);
  return true;
}

ApplyResult ApplyGroup(const CompiledRule& rule, const std::vector<GroupMember*>& all_members,
                       ShapeFacts* facts, const LegalityCheck& legal, std::string* error) {
  if (all_members.empty()) return ApplyResult::kNoMatch;
  // Keys compare sizes seen on the samples; stacking needs equal sizes for every batch. Keep the
  // members whose batch-following values are provably shaped like the first member's.
  std::vector<GroupMember*> members = {all_members[0]};
  for (size_t i = 1; i < all_members.size(); ++i) {
    bool same = true;
    for (const auto& [name, v0] : all_members[0]->bindings.values) {
      auto it = all_members[i]->bindings.values.find(name);
      if (it == all_members[i]->bindings.values.end()) {
        same = false;
        break;
      }
      // Only what goes into the batched op must agree; the members' own results may differ.
      if (all_members[0]->bindings.matched.contains(v0->node())) continue;
      if (FollowsBatch(v0, facts) && !ProvablySameShape(v0, it->second, facts, 0)) {
        same = false;
        break;
      }
    }
    if (same) members.push_back(all_members[i]);
  }
  if (static_cast<int64_t>(members.size()) < rule.ast.min_group) return ApplyResult::kNoMatch;
  Node* anchor = members[0]->anchor;
  torch::jit::Block* block = anchor->owningBlock();
  Bindings combined;
  Node* last_def = nullptr;
  for (size_t i = 0; i < members.size(); ++i) {
    const GroupMember& m = *members[i];
    if (m.anchor->owningBlock() != block) return ApplyResult::kNoMatch;
    for (const auto& [name, v] : m.bindings.values) combined.seqs[name].push_back(v);
    if (i == 0) combined.consts = m.bindings.consts;
    for (Node* n : m.bindings.matched_order) {
      if (!combined.matched.emplace(n, static_cast<int>(i)).second) return ApplyResult::kNoMatch;
      combined.matched_order.push_back(n);
    }
    if (IsBefore(last_def, m.last_input_def)) last_def = m.last_input_def;
  }
  for (const GroupMember* m : members) {
    if (m->first_output_use != nullptr && !IsBefore(last_def, m->first_output_use)) {
      return ApplyResult::kNoMatch;
    }
  }
  if (legal && !legal(combined.matched_order, anchor)) return ApplyResult::kIllegal;
  // Movable inputs defined after the insertion point (attribute reads next to each member's op)
  // move up to it, so the batched op can read them.
  Node* cursor = last_def != nullptr ? last_def : block->param_node();
  for (Node* n : combined.matched_order) {
    for (Value* in : n->inputs()) {
      if (combined.matched.contains(in->node())) continue;
      if (!HoistAfter(in, &cursor)) return ApplyResult::kNoMatch;
    }
  }
  EvalContext ctx = MakeContext(rule, anchor, facts, &combined, &legal);
  return Rewrite(rule, ctx, error);
}

ApplyResult TryApply(const CompiledRule& rule, Node* anchor, ShapeFacts* facts,
                     const LegalityCheck& legal, std::string* error) {
  if (!rule.nodes[rule.anchor].kinds.contains(anchor->kind())) return ApplyResult::kNoMatch;
  Bindings b;
  Matcher m(rule, &b);
  if (!m.MatchAll(anchor)) return ApplyResult::kNoMatch;
  EvalContext ctx = MakeContext(rule, anchor, facts, &b, &legal);
  for (const ExprPtr& w : rule.ast.where) {
    auto d = Eval(*w, ctx);
    // A constraint that cannot be evaluated (e.g. a size that is not known) does not hold.
    if (!d.ok() || d->kind != Datum::Kind::kBool || !d->b) return ApplyResult::kNoMatch;
  }
  if (legal && !legal(b.matched_order, anchor)) return ApplyResult::kIllegal;
  return Rewrite(rule, ctx, error);
}

}  // namespace internal
}  // namespace sentier
