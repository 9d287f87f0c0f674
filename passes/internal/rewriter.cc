// internal/rewriter.cc — the rewriter (see rewriter.h): runs a rule's rewrite section as a
// transaction. New nodes are inserted right after the latest definition among their inputs,
// every replacement is checked (types, dominance, no cycle), and only then are uses redirected;
// on any failure the inserted nodes are destroyed and the graph is as before.
#include "passes/internal/rewriter.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <torch/csrc/jit/ir/constants.h>

#include "absl/strings/str_cat.h"
#include "passes/internal/expr_eval.h"

namespace sentier {
namespace internal {
namespace {

using torch::jit::Graph;

bool SameKindOfType(const c10::TypePtr& from, const c10::TypePtr& to) {
  c10::TypePtr a = c10::unshapedType(from);
  c10::TypePtr b = c10::unshapedType(to);
  return b->isSubtypeOf(*a);
}

bool UseIsAfter(const torch::jit::Use& use, Node* def) {
  if (def == nullptr) return true;
  Node* user = OwnerIn(use.user, def->owningBlock());
  if (user == nullptr) return false;
  if (user->kind() == c10::prim::Return) return true;
  return def->isBefore(user);
}

class Rewriter {
 public:
  Rewriter(const CompiledRule& rule, EvalContext& ctx) : rule_(rule), ctx_(ctx) {}

  // Steps: run each statement (inserting nodes, binding names, collecting replacements) ->
  // commit the replacements -> keep the inserted nodes only if something changed.
  absl::StatusOr<bool> Run() {
    torch::jit::Block* block = ctx_.anchor->owningBlock();
    Replacements replacements;
    bool changed = false;
    try {
      for (const RewriteStmt& s : rule_.ast.rewrite) {
        absl::StatusOr<bool> go_on = RunStatement(s, block, &replacements, &changed);
        if (!go_on.ok()) return Fail(go_on.status());
        if (!*go_on) return Fail(absl::OkStatus());
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
  using Replacements = std::vector<std::pair<Value*, Value*>>;
  using Kwargs = std::vector<std::pair<std::string, Datum>>;

  // Runs one statement. Returns false when the rewrite stops without a change (a builtin that
  // declined); a `call` that edited the graph sets `*changed`.
  absl::StatusOr<bool> RunStatement(const RewriteStmt& s, torch::jit::Block* block,
                                    Replacements* replacements, bool* changed) {
    absl::Status st;
    switch (s.kind) {
      case RewriteStmt::Kind::kInsert:
        st = RunInsert(s, block);
        break;
      case RewriteStmt::Kind::kEach:
        st = RunEach(s, block);
        break;
      case RewriteStmt::Kind::kScan:
        st = RunScan(s, block);
        break;
      case RewriteStmt::Kind::kConstants:
        st = RunConstants(s, block);
        break;
      case RewriteStmt::Kind::kUnpack:
        st = RunUnpack(s, block);
        break;
      case RewriteStmt::Kind::kReplace:
        st = CollectReplacements(s, replacements);
        break;
      case RewriteStmt::Kind::kCall: {
        absl::StatusOr<bool> did = RunCall(s);
        if (!did.ok()) return did.status();
        if (!*did) return false;
        *changed = true;
        break;
      }
    }
    if (!st.ok()) return st;
    return true;
  }

  // `insert`: one operator node, its output (or outputs) bound to the statement's names.
  absl::Status RunInsert(const RewriteStmt& s, torch::jit::Block* block) {
    absl::StatusOr<std::vector<Datum>> args = EvalAll(s.args, ctx_);
    if (!args.ok()) return args.status();
    absl::StatusOr<Kwargs> kwargs = EvalKwargs(s);
    if (!kwargs.ok()) return kwargs.status();
    absl::StatusOr<Value*> out = InsertOp(s.op, *args, *kwargs, block);
    if (!out.ok()) return out.status();
    if (s.outputs.empty()) {
      ctx_.bindings->values[s.output] = *out;
      return absl::OkStatus();
    }
    absl::StatusOr<std::vector<Value*>> outs = OutputsOf(*out, s.outputs.size(), s.op);
    if (!outs.ok()) return outs.status();
    for (size_t k = 0; k < s.outputs.size(); ++k) {
      if (!s.outputs[k].empty()) ctx_.bindings->values[s.outputs[k]] = (*outs)[k];
    }
    return absl::OkStatus();
  }

  // `each`: one node per member: every argument that is a value sequence gives its k-th value
  // to node k (all such sequences have one length); other arguments go to every node.
  absl::Status RunEach(const RewriteStmt& s, torch::jit::Block* block) {
    absl::StatusOr<std::vector<Datum>> args = EvalAll(s.args, ctx_);
    if (!args.ok()) return args.status();
    absl::StatusOr<Kwargs> kwargs = EvalKwargs(s);
    if (!kwargs.ok()) return kwargs.status();
    size_t count = 0;
    bool mismatch = false;
    auto measure = [&](const Datum& d) {
      if (d.kind != Datum::Kind::kValueSeq) return;
      if (count != 0 && d.values.size() != count) mismatch = true;
      count = d.values.size();
    };
    for (const Datum& d : *args) measure(d);
    for (const auto& kw : *kwargs) measure(kw.second);
    if (count == 0 || mismatch) {
      return absl::InvalidArgumentError(
          absl::StrCat("each ", s.op, " needs value sequences of one non-zero length"));
    }
    auto element = [](const Datum& d, size_t k) {
      return d.kind == Datum::Kind::kValueSeq ? Datum::Val(d.values[k]) : d;
    };
    std::vector<Value*> outs;
    for (size_t k = 0; k < count; ++k) {
      std::vector<Datum> a;
      for (const Datum& d : *args) a.push_back(element(d, k));
      Kwargs kw;
      for (const auto& [name, d] : *kwargs) kw.emplace_back(name, element(d, k));
      absl::StatusOr<Value*> out = InsertOp(s.op, a, kw, block);
      if (!out.ok()) return out.status();
      outs.push_back(*out);
    }
    ctx_.bindings->seqs[s.output] = std::move(outs);
    return absl::OkStatus();
  }

  // `scan`: a running operator over the first argument, a value sequence x_0..x_n-1: out_0 is
  // x_0 itself, and out_k = op(out_k-1, x_k, the other arguments) for k >= 1 (n - 1 nodes, each
  // placed as an inserted operator is). `scan aten::add(%n...)` gives the running sums of
  // runtime ints, e.g. where each member's data starts once the members are concatenated.
  absl::Status RunScan(const RewriteStmt& s, torch::jit::Block* block) {
    absl::StatusOr<std::vector<Datum>> args = EvalAll(s.args, ctx_);
    if (!args.ok()) return args.status();
    absl::StatusOr<Kwargs> kwargs = EvalKwargs(s);
    if (!kwargs.ok()) return kwargs.status();
    if (args->empty() || (*args)[0].kind != Datum::Kind::kValueSeq || (*args)[0].values.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "scan ", s.op, " needs a non-empty value sequence as its first argument"));
    }
    const std::vector<Value*>& xs = (*args)[0].values;
    std::vector<Value*> outs = {xs[0]};
    for (size_t k = 1; k < xs.size(); ++k) {
      std::vector<Datum> a = {Datum::Val(outs.back()), Datum::Val(xs[k])};
      a.insert(a.end(), args->begin() + 1, args->end());
      absl::StatusOr<Value*> out = InsertOp(s.op, a, *kwargs, block);
      if (!out.ok()) return out.status();
      outs.push_back(*out);
    }
    ctx_.bindings->seqs[s.output] = std::move(outs);
    return absl::OkStatus();
  }

  // `constants`: one prim::Constant per list element, at the top of the anchor's block.
  absl::Status RunConstants(const RewriteStmt& s, torch::jit::Block* block) {
    auto list = Eval(*s.args[0], ctx_);
    if (!list.ok()) return list.status();
    if (list->kind != Datum::Kind::kList || list->list.empty()) {
      return absl::InvalidArgumentError("constants(list) needs a non-empty list");
    }
    std::vector<Value*> outs;
    torch::jit::WithInsertPoint guard(block->nodes().front());
    for (const Datum& d : list->list) {
      auto iv = d.ToIValue();
      if (!iv.ok()) return iv.status();
      Value* c = ctx_.graph->insertConstant(*iv);
      Track(c->node());
      outs.push_back(c);
    }
    ctx_.bindings->seqs[s.output] = std::move(outs);
    return absl::OkStatus();
  }

  // `unpack`: a prim::ListUnpack of a list value into `count` values.
  absl::Status RunUnpack(const RewriteStmt& s, torch::jit::Block* block) {
    Graph* g = ctx_.graph;
    auto list = Eval(*s.args[0], ctx_);
    if (!list.ok()) return list.status();
    auto count = Eval(*s.args[1], ctx_);
    if (!count.ok()) return count.status();
    if (list->kind != Datum::Kind::kValue || count->kind != Datum::Kind::kInt || count->i < 0) {
      return absl::InvalidArgumentError("unpack(list, count) needs a list value and an int");
    }
    Node* point = InsertPointFor({*list}, block);
    torch::jit::WithInsertPoint guard(point);
    Node* un = g->insertNode(g->createListUnpack(list->value, static_cast<size_t>(count->i)));
    Track(un);
    ctx_.bindings->seqs[s.output] = std::vector<Value*>(un->outputs().begin(), un->outputs().end());
    return absl::OkStatus();
  }

  // `replace`: pairs of (from, to) graph values, applied together by Commit.
  absl::Status CollectReplacements(const RewriteStmt& s, Replacements* replacements) {
    auto from = Eval(*s.from, ctx_);
    if (!from.ok()) return from.status();
    auto to = Eval(*s.to, ctx_);
    if (!to.ok()) return to.status();
    std::vector<Value*> fs = AsValues(*from), ts = AsValues(*to);
    if (fs.size() != ts.size() || fs.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("replace: ", fs.size(), " values with ", ts.size()));
    }
    for (size_t k = 0; k < fs.size(); ++k) {
      if (fs[k] == nullptr || ts[k] == nullptr) {
        return absl::InvalidArgumentError("replace needs graph values");
      }
      if (fs[k] != ts[k]) replacements->emplace_back(fs[k], ts[k]);
    }
    return absl::OkStatus();
  }

  // `call`: builtins validate and edit on their own; returns whether the builtin changed the
  // graph. A call is a rule's last statement and no `replace` precedes it (checked when the rule
  // is compiled).
  absl::StatusOr<bool> RunCall(const RewriteStmt& s) {
    absl::StatusOr<std::vector<Datum>> args = EvalAll(s.args, ctx_);
    if (!args.ok()) return args.status();
    return Builtins().at(s.op).impl(*args, ctx_);
  }

  absl::StatusOr<Kwargs> EvalKwargs(const RewriteStmt& s) {
    Kwargs kwargs;
    for (const auto& [kw, a] : s.kwargs) {
      auto d = Eval(*a, ctx_);
      if (!d.ok()) return d.status();
      kwargs.emplace_back(kw, *d);
    }
    return kwargs;
  }

  // Inserts one `op` node on these arguments, right after the latest definition among them.
  absl::StatusOr<Value*> InsertOp(const std::string& op, const std::vector<Datum>& args,
                                  const Kwargs& kwargs, torch::jit::Block* block) {
    Graph* g = ctx_.graph;
    std::vector<Datum> all = args;
    for (const auto& kw : kwargs) all.push_back(kw.second);
    Node* point = InsertPointFor(all, block);
    torch::jit::WithInsertPoint guard(point);
    std::vector<torch::jit::NamedValue> named, kwnamed;
    for (const Datum& d : args) {
      auto nv = ToNamedValue(d, g);
      if (!nv.ok()) return nv.status();
      named.push_back(*nv);
    }
    for (const auto& [kw, d] : kwargs) {
      auto nv = ToNamedValue(d, g);
      if (!nv.ok()) return nv.status();
      kwnamed.emplace_back(kw, nv->value(*g));
    }
    // Everything Graph::insert creates (the operator, constants for literal arguments, the
    // tuple a many-output operator is packed in) lands right before `point`: all of it is
    // tracked, so that a rollback leaves nothing behind.
    // An overload reached only through an implicit conversion (a tensor passed where a Scalar
    // goes) computes something else: refuse it. The conversion is among the created nodes
    // (for a many-output operator the returned value is the tuple, not the operator).
    Node* before = point->prev();
    Value* out = g->insert(c10::Symbol::fromQualString(op), named, kwnamed);
    c10::optional<c10::Symbol> implicit;
    for (Node* n = before->next(); n != point; n = n->next()) {
      Track(n);
      const c10::Symbol k = n->kind();
      if (k == c10::aten::ScalarImplicit || k == c10::aten::IntImplicit ||
          k == c10::aten::FloatImplicit || k == c10::aten::ComplexImplicit) {
        implicit = k;
      }
    }
    if (implicit) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, " matched only through an implicit ", implicit->toQualString(),
          " (pass keyword-only arguments as name=value)"));
    }
    return out;
  }

  // The outputs of an inserted many-output operator. Graph::insert returns them packed in a
  // prim::TupleConstruct (as TorchScript does for a call); that tuple is dropped and the
  // operator's own outputs are returned, `count` of them, or an error naming the mismatch.
  absl::StatusOr<std::vector<Value*>> OutputsOf(Value* packed, size_t count, const std::string& op) {
    Node* tuple = packed->node();
    Node* node = tuple->inputs().empty() ? nullptr : tuple->input(0)->node();
    bool is_pack = tuple->kind() == c10::prim::TupleConstruct && node != nullptr &&
                   node->outputs().size() == tuple->inputs().size();
    for (size_t k = 0; is_pack && k < tuple->inputs().size(); ++k) {
      is_pack = tuple->input(k) == node->output(k);
    }
    const size_t has = is_pack ? node->outputs().size() : 1;
    if (has != count) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, " has ", has, " output", has == 1 ? "" : "s", "; the statement names ", count));
    }
    inserted_.erase(std::remove(inserted_.begin(), inserted_.end(), tuple), inserted_.end());
    tuple->destroy();  // (the operator itself was tracked by InsertOp)
    return std::vector<Value*>(node->outputs().begin(), node->outputs().end());
  }

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

  bool Commit(const Replacements& reps) {
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

Node* OwnerIn(Node* n, torch::jit::Block* block) {
  while (n != nullptr && n->owningBlock() != block) {
    torch::jit::Block* ob = n->owningBlock();
    if (ob == nullptr || ob->owningNode() == nullptr) return nullptr;
    n = ob->owningNode();
  }
  return n;
}

Node* DefinitionIn(Value* v, torch::jit::Block* block) {
  Node* n = OwnerIn(v->node(), block);
  if (n != nullptr && n->kind() == c10::prim::Param) return nullptr;
  return n;
}

EvalContext MakeContext(const CompiledRule& rule, Node* anchor, ShapeFacts* facts,
                        Bindings* bindings, const LegalityCheck* legal, const RuleEnvironment& env) {
  EvalContext ctx;
  ctx.env = env;
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

ApplyResult Rewrite(const CompiledRule& rule, EvalContext& ctx, std::string* error) {
  Rewriter rw(rule, ctx);
  auto done = rw.Run();
  if (!done.ok()) {
    if (error != nullptr) *error = std::string(done.status().message());
    return ApplyResult::kError;
  }
  return *done ? ApplyResult::kApplied : ApplyResult::kNoMatch;
}

}  // namespace internal
}  // namespace sentier
