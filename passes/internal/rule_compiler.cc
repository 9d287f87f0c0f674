// internal/rule_compiler.cc — the rule compiler: turns one parsed Rule into a CompiledRule. It
// resolves every operator name or RE2 alternative against LibTorch's operator registry, reads
// literal arguments into Datums, records which line defines each name of the main pattern and of
// each foreach block, checks that every line is connected to the anchor (the last match line),
// that every capture is bound before it is used, and that every function and builtin exists with
// the right number of arguments. Errors name `file:line:col`.
#include "passes/internal/rule_compiler.h"

#include <algorithm>

#include <torch/csrc/jit/runtime/operator.h>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "passes/internal/rule_eval.h"
#include "passes/status_macros.h"
#include "re2/re2.h"

namespace sentier {
namespace internal {
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
  if (c10::optional<Datum> scalar = ScalarLiteral(e)) return *scalar;
  switch (e.kind) {
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

// Compiles pattern node `n` (its operator kinds and literal arguments) and appends it to `cr`.
absl::Status AddPatternNode(const PatternNode& n, CompiledRule* cr) {
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
}

// Records, for each main pattern node, which of its value arguments another main line defines.
void RecordDefinedInputs(CompiledRule* cr) {
  for (int id : cr->main.node_ids) {
    const std::vector<PatternArg>& args = cr->nodes[id].ast->args;
    for (size_t k = 0; k < args.size(); ++k) {
      if (args[k].kind != PatternArg::Kind::kValue) continue;
      if (args[k].variadic) {
        auto it = cr->main.seq_def.find(args[k].name);
        if (it != cr->main.seq_def.end()) cr->nodes[id].defined_inputs.push_back({k, it->second, true});
      } else {
        auto it = cr->main.value_def.find(args[k].name);
        if (it != cr->main.value_def.end()) {
          cr->nodes[id].defined_inputs.push_back({k, it->second.first, false});
        }
      }
    }
  }
}

// Compiles the main pattern: its nodes, scope and anchor; checks that every line reaches the
// anchor and that the anchor is a plain node with outputs.
absl::Status CompileMainPattern(CompiledRule* cr) {
  const Rule& r = cr->ast;
  for (const PatternNode& n : r.match) {
    SENTIER_RETURN_IF_ERROR(AddPatternNode(n, cr));
  }
  SENTIER_RETURN_IF_ERROR(BuildScope(r.match, 0, &cr->main));
  cr->anchor = static_cast<int>(r.match.size()) - 1;
  RecordDefinedInputs(cr);
  absl::flat_hash_set<int> seen;
  Reach(cr->nodes, cr->main, cr->anchor, &seen);
  for (int id : cr->main.node_ids) {
    if (!seen.contains(id)) {
      return LocError(r.match[id].loc,
                      "pattern line is not connected to the anchor (the last match line): "
                      "each line must define a value that a later line uses");
    }
  }
  if (cr->nodes[cr->anchor].ast->outputs.empty() ||
      !cr->nodes[cr->anchor].ast->output_index.empty()) {
    return LocError(r.match.back().loc, "the anchor (last match line) cannot use '@ $k'");
  }
  return absl::OkStatus();
}

// Compiles one foreach block into `cr` and adds the names it makes visible to `names`: shared
// names as they are, per-element ones as sequences (values) or lists (constants).
absl::Status CompileForeach(const ForeachPattern& fe, CompiledRule* cr, NameSet* names) {
  CompiledForeach cf;
  cf.ast = &fe;
  int first = static_cast<int>(cr->nodes.size());
  for (const PatternNode& n : fe.nodes) {
    SENTIER_RETURN_IF_ERROR(AddPatternNode(n, cr));
  }
  SENTIER_RETURN_IF_ERROR(BuildScope(fe.nodes, first, &cf.scope));
  if (!names->contains(absl::StrCat("%", fe.sequence, "..."))) {
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
  for (const std::string& n : block_names) {
    bool per = n == absl::StrCat("%", fe.element) ||
               std::find(fe.per_element.begin(), fe.per_element.end(), n) != fe.per_element.end();
    if (!per) names->insert(n);
  }
  for (const std::string& pe : fe.per_element) {
    names->insert(pe[0] == '%' ? absl::StrCat(pe, "...") : pe);
  }
  cr->foreach.push_back(std::move(cf));
  return absl::OkStatus();
}

// Checks a group rule's key and turns `names` into what its rewrite sees: every per-member value
// is a sequence over the members (%x...), and a constant is the first member's (list it in the
// key when members must agree on it).
absl::Status CheckGroupKey(const Rule& r, NameSet* names) {
  if (r.key.empty()) return LocError(r.loc, "a group rule needs a 'key' section");
  for (const ExprPtr& k : r.key) {
    SENTIER_RETURN_IF_ERROR(CheckExpr(*k, *names));
  }
  NameSet group_names;
  for (const std::string& n : *names) {
    if (n[0] == '%' && n.size() > 3 && n.substr(n.size() - 3) == "...") continue;
    group_names.insert(n[0] == '%' ? absl::StrCat(n, "...") : n);
  }
  *names = std::move(group_names);
  return absl::OkStatus();
}

// `insert`: one named operator that defines at least one new output.
absl::Status CheckInsertStmt(const RewriteStmt& s, NameSet* names) {
  if (IsRegexOp(s.op)) return LocError(s.loc, "a rewrite inserts one named operator, not a regex");
  auto kinds = ResolveOp(s.op, s.loc);
  if (!kinds.ok()) return kinds.status();
  const std::vector<std::string> defined =
      s.outputs.empty() ? std::vector<std::string>{s.output} : s.outputs;
  bool any = false;
  for (const std::string& name : defined) {
    if (name.empty()) continue;  // `_`
    any = true;
    if (names->contains(absl::StrCat("%", name)) || names->contains(absl::StrCat("%", name, "..."))) {
      return LocError(s.loc, absl::StrCat("'%", name, "' is already bound"));
    }
    names->insert(absl::StrCat("%", name));
  }
  if (!any) return LocError(s.loc, "an inserted operator must name at least one output");
  return absl::OkStatus();
}

// `each`, `scan`, `constants` and `unpack`: the argument count, the operator (each, scan), and
// the new sequence they define.
absl::Status CheckSequenceStmt(const RewriteStmt& s, NameSet* names) {
  if (s.kind == RewriteStmt::Kind::kUnpack && s.args.size() != 2) {
    return LocError(s.loc, "unpack(list, count) takes 2 arguments");
  }
  if (s.kind == RewriteStmt::Kind::kConstants && s.args.size() != 1) {
    return LocError(s.loc, "constants(list) takes 1 argument");
  }
  if (s.kind == RewriteStmt::Kind::kScan && s.args.empty()) {
    return LocError(s.loc, "scan op(%xs..., ...) needs the sequence it runs over");
  }
  if (s.kind == RewriteStmt::Kind::kEach || s.kind == RewriteStmt::Kind::kScan) {
    if (IsRegexOp(s.op)) {
      return LocError(s.loc, absl::StrCat("'", s.kind == RewriteStmt::Kind::kEach ? "each" : "scan",
                                          "' inserts one named operator, not a regex"));
    }
    auto kinds = ResolveOp(s.op, s.loc);
    if (!kinds.ok()) return kinds.status();
  }
  if (names->contains(absl::StrCat("%", s.output, "...")) ||
      names->contains(absl::StrCat("%", s.output))) {
    return LocError(s.loc, absl::StrCat("'%", s.output, "' is already bound"));
  }
  names->insert(absl::StrCat("%", s.output, "..."));
  return absl::OkStatus();
}

// `call`: the last statement, in a rewrite without `replace`, naming a builtin with its arity.
absl::Status CheckCallStmt(const RewriteStmt& s, const Rule& r) {
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
    return LocError(s.loc, absl::StrCat("builtin '", s.op, "' takes ", it->second.num_args,
                                        " argument(s), got ", s.args.size()));
  }
  return absl::OkStatus();
}

// Checks one rewrite statement of `r` against the names in scope and adds the names it defines.
absl::Status CheckRewriteStmt(const RewriteStmt& s, const Rule& r, NameSet* names) {
  for (const ExprPtr& a : s.args) {
    SENTIER_RETURN_IF_ERROR(CheckExpr(*a, *names));
  }
  for (const auto& [kw, a] : s.kwargs) {
    SENTIER_RETURN_IF_ERROR(CheckExpr(*a, *names));
  }
  switch (s.kind) {
    case RewriteStmt::Kind::kInsert:
      return CheckInsertStmt(s, names);
    case RewriteStmt::Kind::kEach:
    case RewriteStmt::Kind::kScan:
    case RewriteStmt::Kind::kConstants:
    case RewriteStmt::Kind::kUnpack:
      return CheckSequenceStmt(s, names);
    case RewriteStmt::Kind::kReplace:
      SENTIER_RETURN_IF_ERROR(CheckExpr(*s.from, *names));
      return CheckExpr(*s.to, *names);
    case RewriteStmt::Kind::kCall:
      return CheckCallStmt(s, r);
  }
  return absl::OkStatus();
}

}  // namespace

// Steps: main pattern -> foreach blocks -> where -> group key -> rewrite statements, each step
// widening the set of names the next one may use.
absl::StatusOr<std::shared_ptr<CompiledRule>> CompileRule(Rule rule) {
  auto cr = std::make_shared<CompiledRule>();
  cr->ast = std::move(rule);
  const Rule& r = cr->ast;
  SENTIER_RETURN_IF_ERROR(CompileMainPattern(cr.get()));
  NameSet names;
  for (const PatternNode& n : r.match) AddNodeNames(n, &names);
  for (const ForeachPattern& fe : r.foreach) {
    SENTIER_RETURN_IF_ERROR(CompileForeach(fe, cr.get(), &names));
  }
  for (const ExprPtr& w : r.where) {
    SENTIER_RETURN_IF_ERROR(CheckExpr(*w, names));
  }
  if (r.is_group) SENTIER_RETURN_IF_ERROR(CheckGroupKey(r, &names));
  for (const RewriteStmt& s : r.rewrite) {
    SENTIER_RETURN_IF_ERROR(CheckRewriteStmt(s, r, &names));
  }
  return cr;
}

}  // namespace internal
}  // namespace sentier
