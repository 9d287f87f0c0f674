// random_graph.cc — see random_graph.h.
#include "testing/random_graph.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/ir/irparser.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "passes/optimizer.h"
#include "runtime/equivalence_checker.h"
#include "runtime/graph_runner.h"

namespace sentier {
namespace difftest {
namespace {

using Shape = std::vector<int64_t>;

int64_t Numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

struct Val {
  std::string name;
  Shape shape;
  bool input = false;        // a graph input
  bool input_alias = false;  // a graph input or a view of one
  int64_t uses = 0;
};

class Gen {
 public:
  explicit Gen(uint64_t seed)
      : rng_(seed * 0x9E3779B97F4A7C15ull + 12345), aux_(seed * 0xD1B54A32D192ED03ull + 777) {}

  RandomGraph Build(int steps) {
    for (int i = 0; i < steps; ++i) Step();
    RandomGraph g;
    g.has_inplace = has_inplace_;
    g.inplace_on_leaf = inplace_on_leaf_;
    g.stacked_layout = stacked_layout_;
    // Outputs: every non-input value nothing uses, plus a few more (fan-out into the return).
    std::vector<std::string> outs;
    std::set<std::string> seen;
    for (const Val& v : pool_) {
      if (!v.input && v.uses == 0 && seen.insert(v.name).second) outs.push_back(v.name);
    }
    for (int k = R(0, 2); k > 0; --k) {
      const Val& v = pool_[R(0, pool_.size() - 1)];
      if (!v.input && seen.insert(v.name).second) outs.push_back(v.name);
    }
    if (outs.empty()) {
      Val& x = pool_[R(0, pool_.size() - 1)];
      outs.push_back(Unary("relu", x));
    }
    g.text = absl::StrCat("graph(", absl::StrJoin(header_, ", "), "):\n", body_.str(),
                          "  return (", absl::StrJoin(outs, ", "), ")\n");
    return g;
  }

 private:
  // ---- randomness ----
  int64_t R(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  bool P(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  // Choices added after the generator's first corpus of graphs draw from their own stream, so the
  // graphs every earlier choice made stay the same.
  bool Q(double p) { return std::uniform_real_distribution<double>(0, 1)(aux_) < p; }

  // ---- text ----
  std::string Fresh() { return absl::StrCat("%v", next_++); }
  void Emit(const std::string& lhs, const std::string& rhs) {
    body_ << "  " << lhs << " = " << rhs << "\n";
  }
  std::string Const(const std::string& type, const std::string& value) {
    std::string key = type + "|" + value;
    auto it = consts_.find(key);
    if (it != consts_.end()) return it->second;
    std::string name = absl::StrCat("%c", next_++);
    Emit(absl::StrCat(name, " : ", type),
         value.empty() ? "prim::Constant()" : absl::StrCat("prim::Constant[value=", value, "]()"));
    consts_[key] = name;
    return name;
  }
  std::string Int(int64_t v) { return Const("int", std::to_string(v)); }
  std::string None() { return Const("NoneType", ""); }
  std::string Bool(bool b) { return Const("bool", b ? "1" : "0"); }
  std::string Str(const std::string& s) { return Const("str", absl::StrCat("\"", s, "\"")); }
  std::string Float(double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.17g", v);
    std::string s = buf;
    if (s.find_first_of(".e") == std::string::npos) s += ".";
    return Const("float", s);
  }
  // An int[] argument: a list constant or a ListConstruct of int constants.
  std::string IntList(const Shape& v) {
    if (P(0.5)) return Const("int[]", absl::StrCat("[", absl::StrJoin(v, ", "), "]"));
    std::vector<std::string> items;
    for (int64_t x : v) items.push_back(Int(x));
    std::string name = Fresh();
    Emit(name + " : int[]", absl::StrCat("prim::ListConstruct(", absl::StrJoin(items, ", "), ")"));
    return name;
  }
  // A dim argument, spelled negative sometimes. `rank` is the range of valid dims.
  std::string Dim(int64_t d, int64_t rank) { return Int(P(0.3) ? d - rank : d); }
  std::string TensorList(const std::vector<std::string>& names) {
    std::string name = Fresh();
    Emit(name + " : Tensor[]", absl::StrCat("prim::ListConstruct(", absl::StrJoin(names, ", "), ")"));
    return name;
  }

  // ---- values ----
  Shape RandomShape(int64_t rank) {
    Shape s;
    for (int64_t i = 0; i < rank; ++i) s.push_back(i == 0 ? R(2, 4) : (P(0.15) ? 1 : R(2, 6)));
    return s;
  }
  std::string Param(const Shape& s) {
    std::string name = absl::StrCat("%param_", next_++);
    header_.push_back(absl::StrCat(name, " : Float(", absl::StrJoin(s, ", "), ")"));
    return name;
  }
  int NewInput(const Shape& s) {
    std::string name = absl::StrCat("%x", next_++);
    header_.push_back(absl::StrCat(name, " : Float(", absl::StrJoin(s, ", "), ")"));
    Val v;
    v.name = name;
    v.shape = s;
    v.input = v.input_alias = true;
    pool_.push_back(v);
    return pool_.size() - 1;
  }
  int Add(const std::string& name, const Shape& s, bool alias_of_input) {
    Val v;
    v.name = name;
    v.shape = s;
    v.input_alias = alias_of_input;
    pool_.push_back(v);
    return pool_.size() - 1;
  }
  const std::string& Use(int i) {
    pool_[i].uses++;
    return pool_[i].name;
  }
  // Pick: a pool value satisfying `ok`, most often a recent one; a new input when none does.
  template <typename F>
  int Pick(F ok, int64_t rank_for_new) {
    std::vector<int> cands;
    for (size_t i = 0; i < pool_.size(); ++i) {
      if (Numel(pool_[i].shape) > 0 && Numel(pool_[i].shape) <= 1024 && ok(pool_[i].shape)) {
        cands.push_back(i);
      }
    }
    if (cands.empty() || P(0.12)) {
      for (int tries = 0; tries < 20; ++tries) {
        Shape s = RandomShape(rank_for_new);
        if (ok(s)) return NewInput(s);
      }
      if (cands.empty()) return NewInput(RandomShape(rank_for_new));
    }
    if (P(0.6)) return cands[std::max<int64_t>(0, cands.size() - R(1, 3))];
    return cands[R(0, cands.size() - 1)];
  }
  int PickAny() {
    return Pick([](const Shape& s) { return !s.empty() && s.size() <= 4; }, R(2, 3));
  }
  // SameShape: another value of x's shape (or x itself, or a new input).
  int SameShape(int x) {
    Shape s = pool_[x].shape;
    std::vector<int> cands;
    for (size_t i = 0; i < pool_.size(); ++i) {
      if (pool_[i].shape == s) cands.push_back(i);
    }
    if (P(0.25)) return NewInput(s);
    return cands[R(0, cands.size() - 1)];
  }

  // ---- ops ----
  std::string Unary(const std::string& op, Val& x) {
    x.uses++;
    std::string y = Fresh();
    Emit(y + " : Tensor", absl::StrCat("aten::", op, "(", x.name, ")"));
    return y;
  }
  std::string Cat(const std::vector<std::string>& xs, int64_t d, int64_t rank, const char* op) {
    std::string l = TensorList(xs);
    std::string y = Fresh();
    Emit(y + " : Tensor", absl::StrCat("aten::", op, "(", l, ", ", Dim(d, rank), ")"));
    return y;
  }

  void Step() {
    int k = R(0, 99);
    if (k < 22) return SplitFamily();
    if (k < 28) return Selects();
    if (k < 36) return UnsqueezeSqueeze();
    if (k < 42) return Slice();
    if (k < 48) return CatMisc();
    if (k < 53) return Reshape();
    if (k < 57) return Permute();
    if (k < 66) return Linear();
    if (k < 71) return LayerNorm();
    if (k < 83) return UnaryGroup();
    if (k < 92) return BinaryGroup();
    if (k < 96) return Fused();
    if (k < 98) return Embedding();
    return Inplace();
  }

  void SplitFamily() {
    int x = Pick([](const Shape& s) {
      return !s.empty() && s.size() <= 3 && *std::max_element(s.begin(), s.end()) >= 2;
    }, R(2, 3));
    Shape xs = pool_[x].shape;
    int64_t rank = xs.size();
    int64_t d = R(0, rank - 1);
    for (int t = 0; t < 4 && xs[d] < 2; ++t) d = R(0, rank - 1);
    int64_t n = xs[d];
    bool alias = pool_[x].input_alias;
    int kind = R(0, 5);  // 0 split, 1 split_with_sizes, 2 chunk, 3 unbind, 4 equal sizes, 5 ones
    Shape sizes;
    std::string list = Fresh();
    std::string xn = Use(x);
    if (kind == 0) {
      int64_t s = R(1, n);
      for (int64_t left = n; left > 0; left -= s) sizes.push_back(std::min(s, left));
      Emit(list + " : Tensor[]", absl::StrCat("aten::split(", xn, ", ", Int(s), ", ", Dim(d, rank), ")"));
    } else if (kind == 2) {
      int64_t c = R(1, std::min<int64_t>(n, 4));
      int64_t each = (n + c - 1) / c;
      for (int64_t left = n; left > 0; left -= each) sizes.push_back(std::min(each, left));
      Emit(list + " : Tensor[]", absl::StrCat("aten::chunk(", xn, ", ", Int(c), ", ", Dim(d, rank), ")"));
    } else if (kind == 3) {
      Emit(list + " : Tensor[]", absl::StrCat("aten::unbind(", xn, ", ", Dim(d, rank), ")"));
    } else {
      if (kind == 1) {
        int64_t parts = R(1, std::min<int64_t>(n, 4));
        std::vector<int64_t> cuts;
        for (int64_t i = 1; i < n; ++i) cuts.push_back(i);
        std::shuffle(cuts.begin(), cuts.end(), rng_);
        cuts.resize(parts - 1);
        cuts.push_back(0);
        cuts.push_back(n);
        std::sort(cuts.begin(), cuts.end());
        for (size_t i = 0; i + 1 < cuts.size(); ++i) sizes.push_back(cuts[i + 1] - cuts[i]);
        if (P(0.05)) sizes.insert(sizes.begin() + R(0, sizes.size()), 0);  // an empty section
      } else if (kind == 4) {
        std::vector<int64_t> divs;
        for (int64_t s = 1; s <= n; ++s) {
          if (n % s == 0) divs.push_back(s);
        }
        int64_t s = divs[R(0, divs.size() - 1)];
        sizes.assign(n / s, s);
      } else {
        sizes.assign(n, 1);
      }
      Emit(list + " : Tensor[]", absl::StrCat("aten::split_with_sizes(", xn, ", ", IntList(sizes), ", ",
                                              Dim(d, rank), ")"));
    }
    // Pieces.
    std::vector<Shape> shapes;
    if (kind == 3) {
      Shape s = xs;
      s.erase(s.begin() + d);
      shapes.assign(n, s);
    } else {
      for (int64_t sz : sizes) {
        Shape s = xs;
        s[d] = sz;
        shapes.push_back(s);
      }
    }
    std::vector<std::string> pieces;
    std::vector<std::string> decls;
    for (size_t i = 0; i < shapes.size(); ++i) {
      pieces.push_back(Fresh());
      decls.push_back(pieces.back() + " : Tensor");
    }
    Emit(absl::StrJoin(decls, ", "), absl::StrCat("prim::ListUnpack(", list, ")"));
    std::vector<int> idx;
    for (size_t i = 0; i < pieces.size(); ++i) idx.push_back(Add(pieces[i], shapes[i], alias));
    bool equal = std::all_of(shapes.begin(), shapes.end(), [&](const Shape& s) { return s == shapes[0]; });
    int64_t prank = shapes[0].size();
    auto names = [&](const std::vector<int>& which) {
      std::vector<std::string> out;
      for (int i : which) out.push_back(Use(idx[i]));
      return out;
    };
    std::vector<int> all(pieces.size());
    std::iota(all.begin(), all.end(), 0);
    // Every piece (all of one shape), in order, joined on dim e, sometimes with another tensor
    // before or after them (split_pieces_across_dim_in_cat).
    auto cat_all_equal = [&](int64_t e) {
      Shape s = shapes[0];
      s[e] *= shapes.size();
      std::vector<std::string> ns = names(all);
      if (Q(0.5)) {
        int other = NewInput(shapes[0]);
        if (Q(0.5)) ns.insert(ns.begin(), Use(other)); else ns.push_back(Use(other));
        s[e] += shapes[0][e];
      }
      Add(Cat(ns, e, prank, "cat"), s, false);
    };
    int consumer = R(0, 7);
    if (kind == 5 && P(0.7)) consumer = 8;
    switch (consumer) {
      case 0:
      case 1: {  // every piece, in order, glued back (cat on d; stack for unbind pieces)
        if (kind == 3) {
          if (P(0.5)) {
            int64_t e = R(0, prank);
            Shape s = shapes[0];
            s.insert(s.begin() + e, n);
            Add(Cat(names(all), e, prank + 1, "stack"), s, false);
          } else if (prank > 0) {
            cat_all_equal(R(0, prank - 1));
          }
        } else {
          Add(Cat(names(all), d, rank, "cat"), xs, false);
        }
        break;
      }
      case 2: {  // equal pieces: stack on any dim
        if (!equal) break;
        int64_t e = R(0, prank);
        Shape s = shapes[0];
        s.insert(s.begin() + e, shapes.size());
        Add(Cat(names(all), e, prank + 1, "stack"), s, false);
        break;
      }
      case 3: {  // equal pieces: cat on another dim
        if (!equal || prank == 0) break;
        cat_all_equal(R(0, prank - 1));
        break;
      }
      case 4: {  // pieces out of order (negative for the vertical rules)
        if (kind == 3 || pieces.size() < 2) break;
        std::vector<int> order = all;
        std::shuffle(order.begin(), order.end(), rng_);
        Add(Cat(names(order), d, rank, "cat"), xs, false);
        break;
      }
      case 5: {  // a run of consecutive pieces inside a cat with other tensors
        if (kind == 3 || pieces.size() < 2) break;
        int64_t i = R(0, pieces.size() - 2), j = R(i + 1, pieces.size() - 1);
        std::vector<int> which;
        for (int64_t t = i; t <= j; ++t) which.push_back(t);
        std::vector<std::string> ns = names(which);
        Shape s = xs;
        s[d] = 0;
        for (int t : which) s[d] += shapes[t][d];
        if (P(0.7)) {  // another piece before or after the run
          int other = R(0, pieces.size() - 1);
          if (P(0.5)) ns.insert(ns.begin(), Use(idx[other])); else ns.push_back(Use(idx[other]));
          s[d] += shapes[other][d];
        }
        Add(Cat(ns, d, rank, "cat"), s, false);
        break;
      }
      case 6: {  // split one piece again on the same dim
        if (kind == 3) break;
        int64_t i = R(0, pieces.size() - 1);
        int64_t m = shapes[i][d];
        if (m < 2) break;
        Shape inner = {R(1, m - 1)};
        inner.push_back(m - inner[0]);
        std::string l2 = Fresh();
        Emit(l2 + " : Tensor[]", absl::StrCat("aten::split_with_sizes(", Use(idx[i]), ", ", IntList(inner),
                                              ", ", Dim(d, rank), ")"));
        std::string q0 = Fresh(), q1 = Fresh();
        Emit(absl::StrCat(q0, " : Tensor, ", q1, " : Tensor"), absl::StrCat("prim::ListUnpack(", l2, ")"));
        Shape s0 = shapes[i], s1 = shapes[i];
        s0[d] = inner[0];
        s1[d] = inner[1];
        int a = Add(q0, s0, alias), b = Add(q1, s1, alias);
        if (P(0.5)) {  // glue everything back
          std::vector<std::string> ns;
          for (size_t t = 0; t < pieces.size(); ++t) {
            if (static_cast<int64_t>(t) == i) {
              ns.push_back(Use(a));
              ns.push_back(Use(b));
            } else {
              ns.push_back(Use(idx[t]));
            }
          }
          Add(Cat(ns, d, rank, "cat"), xs, false);
        }
        break;
      }
      case 7: {  // a run of consecutive equal pieces (each maybe reshaped) in a stack among others
        if (pieces.size() < 2 || P(0.5)) break;
        int64_t i = R(0, pieces.size() - 2), j = R(i + 1, pieces.size() - 1);
        for (int64_t t = i + 1; t <= j; ++t) {
          if (shapes[t] != shapes[i]) j = t - 1;
        }
        if (j == i) break;
        std::vector<int> which;
        for (int64_t t = i; t <= j; ++t) which.push_back(t);
        std::vector<std::string> ns = names(which);
        Shape ps = shapes[i];
        if (P(0.3)) {  // every piece flattened (move_reshape_out_of_split_stack)
          int64_t numel = std::accumulate(ps.begin(), ps.end(), int64_t{1}, std::multiplies<int64_t>());
          for (std::string& y : ns) {
            std::string r = Fresh();
            Emit(r + " : Tensor", absl::StrCat("aten::reshape(", y, ", ", IntList({-1}), ")"));
            y = r;
          }
          ps = {numel};
        }
        int other = NewInput(ps);
        if (P(0.5)) ns.insert(ns.begin(), Use(other)); else ns.push_back(Use(other));
        int64_t e = R(0, ps.size());
        Shape s = ps;
        s.insert(s.begin() + e, ns.size());
        Add(Cat(ns, e, ps.size() + 1, "stack"), s, false);
        break;
      }
      case 8: {  // size-1 pieces squeezed on d
        for (size_t t = 0; t < pieces.size(); ++t) {
          int64_t sd = P(0.9) ? d : R(0, rank - 1);
          Shape s = shapes[t];
          if (s[sd] == 1) s.erase(s.begin() + sd);
          std::string y = Fresh();
          Emit(y + " : Tensor", absl::StrCat("aten::squeeze(", Use(idx[t]), ", ", Dim(sd, rank), ")"));
          Add(y, s, alias);
        }
        break;
      }
      default:
        break;  // pieces stay in the pool
    }
  }

  void Selects() {
    int x = Pick([](const Shape& s) { return !s.empty() && s.size() <= 3; }, R(2, 3));
    Shape xs = pool_[x].shape;
    int64_t rank = xs.size(), d = R(0, rank - 1), n = R(1, xs[d]);
    std::vector<int64_t> is(n);
    std::iota(is.begin(), is.end(), 0);
    bool in_order = true;
    if (P(0.2)) {
      std::shuffle(is.begin(), is.end(), rng_);
      in_order = std::is_sorted(is.begin(), is.end());
    }
    if (P(0.1) && n < xs[d]) {
      for (int64_t& i : is) ++i;
      in_order = false;
    }
    if (Q(0.25)) return UnitSlices(x, d, is);
    std::vector<std::string> sel;
    Shape s = xs;
    s.erase(s.begin() + d);
    for (int64_t i : is) {
      std::string y = Fresh();
      int64_t spelled = P(0.15) ? i - xs[d] : i;
      Emit(y + " : Tensor", absl::StrCat("aten::select(", Use(x), ", ", Dim(d, rank), ", ", Int(spelled), ")"));
      sel.push_back(y);
    }
    const bool glue = P(0.8);
    if (glue && d == 0 && rank >= 2 && in_order && n >= 2 && Q(0.4)) {
      // The leading rows, one by one, concatenated back (DLRM's lS_i[k] joined into one list);
      // 1-D rows sometimes joined with hstack, as the stored-table lookups join indices.
      Shape o = s;
      o[0] *= n;
      if (rank == 2 && P(0.5)) {
        std::string y = Fresh();
        Emit(y + " : Tensor", absl::StrCat("aten::hstack(", TensorList(sel), ")"));
        Add(y, o, false);
      } else {
        Add(Cat(sel, 0, rank - 1, "cat"), o, false);
      }
    } else if (glue) {
      int64_t e = P(0.8) ? d : R(0, rank - 1);
      Shape o = s;
      o.insert(o.begin() + e, n);
      Add(Cat(sel, e, rank, "stack"), o, false);
    } else {
      for (const std::string& y : sel) Add(y, s, pool_[x].input_alias);
    }
  }

  // UnitSlices: the columns `is` of x on dim d cut out one by one as one-wide slices
  // (`X[:, k:k+1]`), then stacked on d or d + 1 or left in the pool (stack_of_unit_slices).
  void UnitSlices(int x, int64_t d, const std::vector<int64_t>& is) {
    Shape xs = pool_[x].shape;
    const int64_t rank = xs.size();
    Shape s = xs;
    s[d] = 1;
    std::vector<std::string> cols;
    for (int64_t i : is) {
      std::string y = Fresh();
      Emit(y + " : Tensor", absl::StrCat("aten::slice(", Use(x), ", ", Dim(d, rank), ", ", Int(i), ", ",
                                         Int(i + 1), ", ", Int(1), ")"));
      cols.push_back(y);
    }
    if (Q(0.7)) {
      const int64_t e = Q(0.5) ? d : d + 1;
      Shape o = s;
      o.insert(o.begin() + e, cols.size());
      Add(Cat(cols, e, rank + 1, "stack"), o, false);
    } else {
      for (const std::string& y : cols) Add(y, s, pool_[x].input_alias);
    }
  }

  void UnsqueezeSqueeze() {
    int x = Pick([](const Shape& s) { return !s.empty() && s.size() <= 3; }, R(1, 3));
    Shape xs = pool_[x].shape;
    int64_t rank = xs.size();
    bool alias = pool_[x].input_alias;
    int kind = R(0, 3);
    if (kind == 3) {  // squeeze a size-1 dim (or a no-op squeeze)
      int64_t d = R(0, rank - 1);
      for (int64_t i = 0; i < rank; ++i) {
        if (xs[i] == 1) d = i;
      }
      Shape s = xs;
      if (s[d] == 1) s.erase(s.begin() + d);
      std::string y = Fresh();
      Emit(y + " : Tensor", absl::StrCat("aten::squeeze(", Use(x), ", ", Dim(d, rank), ")"));
      Add(y, s, alias);
      return;
    }
    int64_t d = R(0, rank);
    if (kind == 2) {  // cat of unsqueezes on the same dim == stack
      int64_t k = R(2, 4);
      std::vector<std::string> us;
      for (int64_t i = 0; i < k; ++i) {
        int o = i == 0 ? x : SameShape(x);
        std::string u = Fresh();
        int64_t dd = P(0.85) ? d : R(0, rank);
        Emit(u + " : Tensor", absl::StrCat("aten::unsqueeze(", Use(o), ", ", Dim(dd, rank + 1), ")"));
        us.push_back(u);
        if (dd != d) {  // shapes would not match on cat: keep it a plain piece instead
          Shape s = xs;
          s.insert(s.begin() + dd, 1);
          Add(u, s, alias);
          us.pop_back();
        }
      }
      if (us.empty()) return;
      // Sometimes a piece that is not an unsqueeze joins them (cat_of_unsqueeze_runs_to_stack).
      // Decided without a draw, so that the generator's other graphs stay as they were.
      if (us.size() >= 2 && next_ % 3 == 0) {
        std::string u = Fresh(), n = Fresh();
        Emit(u + " : Tensor", absl::StrCat("aten::unsqueeze(", Use(x), ", ", Int(d), ")"));
        Emit(n + " : Tensor", absl::StrCat("aten::neg(", u, ")"));
        us.insert(next_ % 2 == 0 ? us.begin() : us.end(), n);
      }
      Shape s = xs;
      s.insert(s.begin() + d, us.size());
      Add(Cat(us, d, rank + 1, "cat"), s, false);
      return;
    }
    std::string u = Fresh();
    Emit(u + " : Tensor", absl::StrCat("aten::unsqueeze(", Use(x), ", ", Dim(d, rank + 1), ")"));
    Shape s = xs;
    s.insert(s.begin() + d, 1);
    int ui = Add(u, s, alias);
    if (kind == 1) {
      int64_t e = P(0.8) ? d : R(0, rank);
      Shape o = s;
      if (o[e] == 1) o.erase(o.begin() + e);
      std::string y = Fresh();
      Emit(y + " : Tensor", absl::StrCat("aten::squeeze(", Use(ui), ", ", Dim(e, rank + 1), ")"));
      Add(y, o, alias);
    }
  }

  void Slice() {
    int x = PickAny();
    Shape xs = pool_[x].shape;
    int64_t rank = xs.size(), d = R(0, rank - 1), n = xs[d];
    int64_t start = 0, end = n;
    std::string sa, ea;
    switch (R(0, 2)) {
      case 0: sa = None(); break;
      case 1: sa = Int(0); break;
      default: start = R(0, n - 1); sa = Int(P(0.2) ? start - n : start);
    }
    switch (R(0, 3)) {
      case 0: ea = None(); break;
      case 1: ea = Int(INT64_MAX); break;
      case 2: end = n; ea = Int(n); break;
      default: end = R(start + 1, n); ea = Int(end);
    }
    int64_t step = P(0.8) ? 1 : 2;
    Shape s = xs;
    s[d] = (end - start + step - 1) / step;
    std::string y = Fresh();
    Emit(y + " : Tensor", absl::StrCat("aten::slice(", Use(x), ", ", Dim(d, rank), ", ", sa, ", ", ea, ", ",
                                       Int(step), ")"));
    Add(y, s, pool_[x].input_alias);
  }

  void CatMisc() {
    int x = PickAny();
    Shape xs = pool_[x].shape;
    int64_t rank = xs.size(), d = R(0, rank - 1);
    int kind = R(0, 2);
    if (kind == 0) {  // cat of one tensor
      Add(Cat({Use(x)}, d, rank, "cat"), xs, false);
    } else if (kind == 1) {  // nested cat
      int y = SameShape(x);
      std::string inner = Cat({Use(x), Use(y)}, d, rank, "cat");
      Shape s2 = xs;
      s2[d] *= 2;
      int ii = Add(inner, s2, false);
      Shape s4 = xs;
      s4[d] *= 4;
      Add(Cat({Use(y), inner, Use(x)}, d, rank, "cat"), s4, false);
      if (P(0.8)) pool_[ii].uses++;  // else the inner cat is also a graph output (a second use)
    } else {  // cat or stack of same-shaped tensors
      int64_t k = R(2, 4);
      std::vector<std::string> xsn = {Use(x)};
      for (int64_t i = 1; i < k; ++i) xsn.push_back(Use(SameShape(x)));
      if (P(0.5)) {
        Shape s = xs;
        s[d] *= k;
        Add(Cat(xsn, d, rank, "cat"), s, false);
      } else {
        int64_t e = R(0, rank);
        Shape s = xs;
        s.insert(s.begin() + e, k);
        Add(Cat(xsn, e, rank + 1, "stack"), s, false);
      }
    }
  }

  void Reshape() {
    int x = Pick([](const Shape& s) { return !s.empty() && s.size() <= 3; }, R(2, 3));
    Shape xs = pool_[x].shape;
    Shape s;
    if (xs.size() >= 2 && P(0.5)) {  // merge two adjacent dims
      int64_t i = R(0, xs.size() - 2);
      for (int64_t j = 0; j < static_cast<int64_t>(xs.size()); ++j) {
        if (j == i + 1) s.back() *= xs[j]; else s.push_back(xs[j]);
      }
    } else {  // split a dim into two factors
      int64_t i = R(0, xs.size() - 1);
      std::vector<int64_t> divs;
      for (int64_t f = 1; f <= xs[i]; ++f) {
        if (xs[i] % f == 0) divs.push_back(f);
      }
      int64_t f = divs[R(0, divs.size() - 1)];
      for (int64_t j = 0; j < static_cast<int64_t>(xs.size()); ++j) {
        if (j == i) {
          s.push_back(f);
          s.push_back(xs[j] / f);
        } else {
          s.push_back(xs[j]);
        }
      }
    }
    Shape spelled = s;
    if (P(0.5)) spelled[0] = -1; else if (P(0.3)) spelled[R(0, s.size() - 1)] = -1;
    std::string y = Fresh();
    Emit(y + " : Tensor", absl::StrCat("aten::reshape(", Use(x), ", ", IntList(spelled), ")"));
    Add(y, s, pool_[x].input_alias);
  }

  void Permute() {
    int x = Pick([](const Shape& s) { return s.size() >= 2 && s.size() <= 4; }, R(2, 3));
    Shape xs = pool_[x].shape;
    int64_t rank = xs.size();
    Shape perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng_);
    Shape s, spelled;
    for (int64_t p : perm) {
      s.push_back(xs[p]);
      spelled.push_back(P(0.2) ? p - rank : p);
    }
    std::string y = Fresh();
    Emit(y + " : Tensor", absl::StrCat("aten::permute(", Use(x), ", ", IntList(spelled), ")"));
    Add(y, s, pool_[x].input_alias);
  }

  // Linears accumulated into one sum (Optimus's test: 10 Linear(10, 10) added up): per-feature
  // inputs, one of them sometimes a [1, in] global feature that broadcasts against the batch;
  // the sum started as users write it: at the first term, at `0 + l0(x0)` (Python's sum()), or at
  // `zeros_like(x0)` (square weights). Sometimes a member without bias, of another width or a
  // term that is not a linear (the sum then stays). Drawn from the second stream only.
  void LinearSum() {
    auto A = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(aux_); };
    const int64_t k = A(2, 4), in = A(1, 6), bsz = A(2, 4);
    const int start = A(0, 2);  // 0: first term, 1: 0 + first term, 2: zeros_like(x0) + ...
    const int64_t out = start == 2 ? in : A(1, 6);
    std::vector<std::string> terms;
    std::string first_input;
    for (int64_t i = 0; i < k; ++i) {
      const bool global = i > 0 && Q(0.15);
      const int64_t width = i > 0 && Q(0.1) ? A(1, 6) : in;
      std::string x = global ? Param({1, width}) : pool_[NewInput({bsz, width})].name;
      if (!global) pool_.back().uses++;
      if (i == 0) first_input = x;
      std::string b = Q(0.9) ? Param({out}) : None();
      std::string y = Fresh();
      Emit(y + " : Tensor", absl::StrCat("aten::linear(", x, ", ", Param({out, width}), ", ", b, ")"));
      terms.push_back(y);
    }
    if (Q(0.1)) terms.push_back(pool_[NewInput({bsz, out})].name);
    const std::string one = Int(1);
    std::string sum;
    if (start == 2) {
      const std::string none = None();
      sum = Fresh();
      Emit(sum + " : Tensor", absl::StrCat("aten::zeros_like(", first_input, ", ", none, ", ", none, ", ", none,
                                           ", ", none, ", ", none, ")"));
    } else if (start == 1) {
      sum = Fresh();
      Emit(sum + " : Tensor", absl::StrCat("aten::add(", terms[0], ", ", Int(0), ", ", one, ")"));
    } else {
      sum = terms[0];
    }
    for (size_t i = start == 2 ? 0 : 1; i < terms.size(); ++i) {
      std::string s = Fresh();
      Emit(s + " : Tensor", absl::StrCat("aten::add(", sum, ", ", terms[i], ", ", one, ")"));
      sum = s;
    }
    Add(sum, {bsz, out}, false);
  }

  void Linear() {
    if (Q(0.25)) return LinearSum();
    bool same_input = P(0.5);
    int64_t k = P(0.8) ? R(2, 4) : 1;
    int x = Pick([&](const Shape& s) { return s.size() >= 1 && s.size() <= (same_input ? 3u : 2u) && s.back() <= 8; },
                 2);
    Shape xs = pool_[x].shape;
    int64_t in = xs.back(), out = R(1, 6);
    bool bias = P(0.75);
    // Per-feature inputs (`xs[i]` of a list input, separate arguments), one per member, whose
    // results are joined side by side (the group search proves their batch sizes equal from
    // that join) or, as a negative case, along dim 0.
    const bool per_feature = !same_input && k >= 2 && xs.size() == 2 && P(0.3);
    std::vector<std::string> joined;
    for (int64_t i = 0; i < k; ++i) {
      int xi = per_feature ? (i == 0 && pool_[x].input ? x : NewInput(xs))
                           : same_input || i == 0 ? x : SameShape(x);
      if (same_input && P(0.5)) out = R(1, 6);
      std::string w = Param({out, in});
      std::string b = bias ? Param({out}) : None();
      if (P(0.1)) b = None();  // mixed groups
      std::string y = Fresh();
      if (P(0.2)) {
        // Spelled out, as models write it: x @ w.t() (+ b), or addmm for a 2-D x.
        std::string wt = Fresh();
        Emit(wt + " : Tensor", absl::StrCat(P(0.8) ? "aten::t(" : "aten::numpy_T(", w, ")"));
        bool has_bias = b != None();
        if (has_bias && xs.size() == 2 && P(0.4)) {
          Emit(y + " : Tensor", absl::StrCat("aten::addmm(", b, ", ", Use(xi), ", ", wt, ", ", Int(1), ", ", Int(1), ")"));
        } else {
          std::string m = has_bias ? Fresh() : y;
          Emit(m + " : Tensor", absl::StrCat(xs.size() == 2 && P(0.3) ? "aten::mm(" : "aten::matmul(", Use(xi), ", ", wt, ")"));
          if (has_bias) {
            Emit(y + " : Tensor", P(0.5) ? absl::StrCat("aten::add(", m, ", ", b, ", ", Int(1), ")")
                                        : absl::StrCat("aten::add(", b, ", ", m, ", ", Int(1), ")"));
          }
        }
      } else {
        Emit(y + " : Tensor", absl::StrCat("aten::linear(", Use(xi), ", ", w, ", ", b, ")"));
      }
      Shape s = xs;
      s.back() = out;
      Add(y, s, false);
      if (per_feature) joined.push_back(Use(pool_.size() - 1));
    }
    if (per_feature) {
      const bool side_by_side = P(0.75);
      Shape s = xs;
      if (side_by_side) {
        s.back() = out * k;
      } else {
        s[0] *= k;
      }
      Add(Cat(joined, side_by_side ? 1 : 0, 2, "cat"), s, false);
    }
  }

  // Embedding lookups, one table per feature: the columns of one Long index input (as
  // `emb(sparse[:, i])` in a ModuleList loop, or the pieces of `unbind(sparse, 1)`), or one index
  // input per feature (bags of 1-3 ids; nothing proves their batch sizes equal). Mostly tables of
  // one width, some of another width or with a padding row (which the embedding rules must leave
  // alone). Bags of ids (one input per feature, or the [B, bag] columns of one [B, k, bag]
  // input) are often pooled over the bag, as `emb(ids).sum(1)` or `.mean(1)`, or weighted per id
  // before a sum, as `(emb(ids) * weights.unsqueeze(-1)).sum(1)`. Index inputs stay outside
  // the pool (no float op may read them); random inputs draw each column in 0..3, so every
  // table has at least 4 rows.
  void Embedding() {
    if (P(0.25)) return EmbeddingBags();
    if (Q(0.4)) stacked_layout_ = true;
    int64_t bsz = R(2, 4), k = R(2, 5), d = R(1, 6);
    const bool pool = P(0.6);  // pool the members whose indices are bags, by sum or by mean
    const bool mean = P(0.3);
    const bool weighted = pool && !mean && P(0.6);  // one weight per id: (emb * w.unsqueeze(-1)).sum(1)
    std::vector<std::string> cols, weights;
    std::vector<Shape> col_shapes;
    auto input = [&](const char* prefix, const char* type, const Shape& shape) {
      std::string name = absl::StrCat(prefix, next_++);
      header_.push_back(absl::StrCat(name, " : ", type, "(", absl::StrJoin(shape, ", "), ")"));
      return name;
    };
    auto long_input = [&](const Shape& shape) { return input("%idx", "Long", shape); };
    auto select_columns = [&](const std::string& t, std::vector<std::string>* out) {
      for (int64_t i = 0; i < k; ++i) {
        std::string c = Fresh();
        Emit(c + " : Tensor", absl::StrCat("aten::select(", t, ", ", Int(1), ", ", Int(i), ")"));
        out->push_back(c);
      }
    };
    if (Q(0.2)) {
      // Ids stored as floats in one [B, k] tensor, each column cut out and cast (`X[:, i:i+1]
      // .long()`, as CTR libraries read them; batch_cast_of_slices): clamped to 0..3 first.
      std::string xf = input("%xf", "Float", {bsz, k});
      std::string a = Fresh(), c = Fresh();
      Emit(a + " : Tensor", absl::StrCat("aten::abs(", xf, ")"));
      Emit(c + " : Tensor", absl::StrCat("aten::clamp(", a, ", ", Float(0.0), ", ", Float(3.5), ")"));
      for (int64_t i = 0; i < k; ++i) {
        std::string sl = Fresh(), t = Fresh();
        Emit(sl + " : Tensor", absl::StrCat("aten::slice(", c, ", ", Int(1), ", ", Int(i), ", ", Int(i + 1),
                                            ", ", Int(1), ")"));
        Emit(t + " : Tensor", absl::StrCat("aten::to(", sl, ", ", Int(4), ", ", Bool(false), ", ",
                                           Bool(false), ", ", None(), ")"));
        cols.push_back(t);
        col_shapes.push_back({bsz, 1});
        if (weighted) weights.push_back(input("%wt", "Float", {bsz, 1}));
      }
    } else if (P(0.3)) {
      int64_t bag = R(1, 3);
      for (int64_t i = 0; i < k; ++i) {
        cols.push_back(long_input({bsz, bag}));
        col_shapes.push_back({bsz, bag});
        if (weighted) weights.push_back(input("%wt", "Float", {bsz, bag}));
      }
    } else if (P(0.35)) {
      int64_t bag = R(1, 3);
      select_columns(long_input({bsz, k, bag}), &cols);
      col_shapes.assign(k, {bsz, bag});
      if (weighted) select_columns(input("%wt", "Float", {bsz, k, bag}), &weights);
    } else if (P(0.4)) {
      std::string idx = long_input({bsz, k});
      std::string l = Fresh();
      Emit(l + " : Tensor[]", absl::StrCat("aten::unbind(", idx, ", ", Int(1), ")"));
      std::vector<std::string> typed;
      for (int64_t i = 0; i < k; ++i) {
        cols.push_back(Fresh());
        typed.push_back(cols.back() + " : Tensor");
        col_shapes.push_back({bsz});
      }
      Emit(absl::StrJoin(typed, ", "), absl::StrCat("prim::ListUnpack(", l, ")"));
    } else {
      std::string idx = long_input({bsz, k});
      for (int64_t i = 0; i < k; ++i) {
        std::string c = Fresh();
        Emit(c + " : Tensor", absl::StrCat("aten::select(", idx, ", ", Int(1), ", ", Int(i), ")"));
        cols.push_back(c);
        col_shapes.push_back({bsz});
      }
    }
    // Lookups on ids of one field each ([B]) are sometimes unsqueezed on dim 1 and joined into
    // [B, k, d], as CTR libraries write them (cat_of_unsqueezed_lookups). Decided without a draw,
    // so that the graphs drawn after stay those of the other motifs.
    // Where next_ % 4 == 2 instead, they are a factorization machine's first-order part: 1-wide
    // lookups joined on dim 2 ([B, 1, k]), beside dense features read as columns
    // (`x.view(-1, 1)`) and joined (cat_of_unsqueezed_width1_lookups, column_view_is_unsqueeze).
    const bool first_order = !pool && k >= 2 && next_ % 4 == 2;
    bool joined = !pool && k >= 2 && (next_ % 4 == 0 || first_order);
    for (const Shape& c : col_shapes) joined = joined && c.size() == 1;
    std::vector<std::string> looked_up;
    for (int64_t i = 0; i < k; ++i) {
      int64_t width = P(0.85) ? d : R(1, 6);
      if (joined) width = first_order ? 1 : d;  // (first_order counts only where joined)
      std::string w = Param({R(4, 9), width});
      std::string pad = Int(P(0.9) || joined ? -1 : 0);
      std::string y = Fresh();
      Emit(y + " : Tensor", absl::StrCat("aten::embedding(", w, ", ", cols[i], ", ", pad, ", ",
                                        Bool(false), ", ", Bool(false), ")"));
      if (pool && col_shapes[i].size() == 2) {
        if (weighted) {
          std::string u = Fresh(), m = Fresh();
          Emit(u + " : Tensor", absl::StrCat("aten::unsqueeze(", weights[i], ", ", Int(-1), ")"));
          // Either operand order: lookup_first_in_weighted_bag turns scores-first products around.
          Emit(m + " : Tensor", P(0.5) ? absl::StrCat("aten::mul(", y, ", ", u, ")")
                                       : absl::StrCat("aten::mul(", u, ", ", y, ")"));
          y = m;
        }
        std::string p = Fresh();
        Emit(p + " : Tensor", absl::StrCat(mean ? "aten::mean(" : "aten::sum(", y, ", ", IntList({1}), ", ",
                                          Bool(false), ", ", None(), ")"));
        Add(p, {col_shapes[i][0], width}, false);
        continue;
      }
      if (joined) {
        looked_up.push_back(y);
        continue;
      }
      Shape out = col_shapes[i];
      out.push_back(width);
      if (i == 0 && next_ % 5 == 0) {  // flattened by its batch size read off the lookup
        ViewByLookupSize(y, out);
        continue;
      }
      Add(y, out, false);
    }
    if (joined) JoinLookups(looked_up, col_shapes[0][0], first_order ? 1 : d, first_order ? 2 : 1);
    if (joined && first_order) {
      std::vector<std::string> columns;
      for (int64_t i = 0; i < k; ++i) {
        std::string x = input("%dv", "Float", {col_shapes[0][0]});
        columns.push_back(Fresh());
        Emit(columns.back() + " : Tensor", absl::StrCat("aten::view(", x, ", ", IntList({-1, 1}), ")"));
      }
      std::string l = Fresh(), c = Fresh();
      Emit(l + " : Tensor[]", absl::StrCat("prim::ListConstruct(", absl::StrJoin(columns, ", "), ")"));
      Emit(c + " : Tensor", absl::StrCat("aten::cat(", l, ", ", Int(1), ")"));
      Add(c, {col_shapes[0][0], k}, false);
    }
  }

  // ViewByLookupSize: view(y, [size(y, 0), -1]), the batch size read off the lookup (decided
  // without a draw, as JoinLookups).
  void ViewByLookupSize(const std::string& y, const Shape& shape) {
    std::string b = Fresh(), dims = Fresh(), v = Fresh();
    Emit(b + " : int", absl::StrCat("aten::size(", y, ", ", Int(0), ")"));
    Emit(dims + " : int[]", absl::StrCat("prim::ListConstruct(", b, ", ", Int(-1), ")"));
    Emit(v + " : Tensor", absl::StrCat("aten::view(", y, ", ", dims, ")"));
    int64_t rest = 1;
    for (size_t k = 1; k < shape.size(); ++k) rest *= shape[k];
    Add(v, {shape[0], rest}, false);
  }

  // JoinLookups: cat([unsqueeze(y, 1) for y in looked_up], cat_dim): a [batch, n, width] value
  // (cat_dim 1), or [batch, 1, n] (cat_dim 2, 1-wide lookups).
  void JoinLookups(const std::vector<std::string>& looked_up, int64_t batch, int64_t width,
                   int64_t cat_dim) {
    std::vector<std::string> unsqueezed;
    for (const std::string& y : looked_up) {
      unsqueezed.push_back(Fresh());
      Emit(unsqueezed.back() + " : Tensor", absl::StrCat("aten::unsqueeze(", y, ", ", Int(1), ")"));
    }
    std::string l = Fresh(), c = Fresh();
    Emit(l + " : Tensor[]", absl::StrCat("prim::ListConstruct(", absl::StrJoin(unsqueezed, ", "), ")"));
    Emit(c + " : Tensor", absl::StrCat("aten::cat(", l, ", ", Int(cat_dim), ")"));
    const int64_t n = static_cast<int64_t>(looked_up.size());
    Add(c, cat_dim == 1 ? Shape{batch, n, width} : Shape{batch, 1, n}, false);
  }

  // embedding_bag calls over 1-D indices and offsets, one per feature (nn.EmbeddingBag in a
  // ModuleList over List[Tensor] inputs): each feature has its own index input of 3 ids per bag
  // and a lengths input (0..3 per bag, drawn at random), whose exclusive running sum is the
  // offsets, so bags have 0-3 ids and the last one takes the rest. Batch sizes may differ per
  // feature; one mode (sum, mean or max) for all, or a mix; mostly one width.
  void EmbeddingBags() {
    int64_t k = R(2, 5), d = R(1, 6);
    const bool same_batch = P(0.6);
    const int64_t mode = R(0, 2);
    int64_t bsz = R(2, 4);
    // Some groups as id-score features (per-sample weights, sum), some optimized as the stacked
    // layout would (the stored-table lookups).
    const bool weighted = Q(0.3);
    if (Q(0.5)) stacked_layout_ = true;
    for (int64_t i = 0; i < k; ++i) {
      if (!same_batch) bsz = R(2, 4);
      std::string idx = absl::StrCat("%idx", next_++), len = absl::StrCat("%len", next_++);
      header_.push_back(absl::StrCat(idx, " : Long(", 3 * bsz, ")"));
      header_.push_back(absl::StrCat(len, " : Long(", bsz, ")"));
      const std::string zero = Int(0), one = Int(1), no_dtype = None();
      std::string c = Fresh(), off = Fresh();
      Emit(c + " : Tensor", absl::StrCat("aten::cumsum(", len, ", ", zero, ", ", no_dtype, ")"));
      Emit(off + " : Tensor", absl::StrCat("aten::sub(", c, ", ", len, ", ", one, ")"));
      int64_t width = P(0.85) ? d : R(1, 6);
      std::string w = Param({R(4, 9), width});
      const int64_t member_mode = P(0.85) ? mode : R(0, 2);
      const std::string f = Bool(false), none = None(), m = Int(weighted ? 0 : member_mode);
      std::string psw = none;
      if (weighted) {
        psw = absl::StrCat("%psw", next_++);
        header_.push_back(absl::StrCat(psw, " : Float(", 3 * bsz, ")"));
      }
      std::string y = Fresh(), o2b = Fresh(), sizes = Fresh(), maxi = Fresh();
      Emit(absl::StrCat(y, " : Tensor, ", o2b, " : Tensor, ", sizes, " : Tensor, ", maxi, " : Tensor"),
           absl::StrCat("aten::embedding_bag(", w, ", ", idx, ", ", off, ", ", f, ", ", m, ", ", f, ", ",
                        psw, ", ", f, ", ", none, ")"));
      Add(y, {bsz, width}, false);
    }
  }

  // Layer norms over the pieces of a 3-D input split along its last dim (Optimus's
  // batch_layernorm test: x [B, m, k * n] into k pieces [B, m, n], one nn.LayerNorm(n) or
  // nn.LayerNorm((m, n)) each), sometimes concatenated back. Drawn from the second stream only,
  // so the rest of the graph is what it would have been without it.
  void LayerNormPieces() {
    auto A = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(aux_); };
    const int64_t k = A(2, 4), m = A(1, 4), n = A(2, 5);
    const bool two_dims = Q(0.3);
    const Shape whole = {A(2, 4), m, k * n};
    const int x = NewInput(whole);
    const Shape norm = two_dims ? Shape{m, n} : Shape{n};
    const std::string d = Int(Q(0.5) ? -1 : 2);
    std::string list = Fresh();
    Emit(list + " : Tensor[]", absl::StrCat("aten::split(", Use(x), ", ", Int(n), ", ", d, ")"));
    std::vector<std::string> pieces, decls;
    for (int64_t i = 0; i < k; ++i) {
      pieces.push_back(Fresh());
      decls.push_back(pieces.back() + " : Tensor");
    }
    Emit(absl::StrJoin(decls, ", "), absl::StrCat("prim::ListUnpack(", list, ")"));
    const std::string shape = Const("int[]", absl::StrCat("[", absl::StrJoin(norm, ", "), "]"));
    const std::string eps = Float(1e-5);
    std::vector<std::string> ys;
    for (int64_t i = 0; i < k; ++i) {
      std::string w = Param(norm), b = Param(norm);
      std::string y = Fresh();
      Emit(y + " : Tensor", absl::StrCat("aten::layer_norm(", pieces[i], ", ", shape, ", ", w, ", ", b, ", ",
                                         Q(0.9) ? eps : Float(1e-3), ", ", Bool(true), ")"));
      ys.push_back(y);
    }
    if (Q(0.6)) {
      std::string l = TensorList(ys), y = Fresh();
      Emit(y + " : Tensor", absl::StrCat("aten::cat(", l, ", ", d, ")"));
      Add(y, whole, false);
      return;
    }
    for (const std::string& y : ys) Add(y, {whole[0], m, n}, false);
  }

  void LayerNorm() {
    if (Q(0.3)) return LayerNormPieces();
    int64_t k = P(0.8) ? R(2, 4) : 1;
    // (A normalized size of 1 is left out: its gradient is pure rounding noise scaled by
    // 1/sqrt(eps), which float32 comparisons cannot judge.)
    int x = Pick([](const Shape& s) { return s.size() >= 2 && s.size() <= 3 && s.back() >= 2; }, 2);
    Shape xs = pool_[x].shape;
    Shape norm = {xs.back()};
    if (xs.size() == 3 && P(0.15)) norm = {xs[1], xs[2]};
    double eps = P(0.85) ? 1e-5 : 1e-3;
    for (int64_t i = 0; i < k; ++i) {
      int xi = i == 0 ? x : SameShape(x);
      std::string w = P(0.9) ? Param(norm) : None();
      std::string b = P(0.9) ? Param(norm) : None();
      std::string y = Fresh();
      Emit(y + " : Tensor", absl::StrCat("aten::layer_norm(", Use(xi), ", ", IntList(norm), ", ", w, ", ", b,
                                         ", ", Float(eps), ", ", Bool(true), ")"));
      Add(y, xs, false);
    }
  }

  void UnaryGroup() {
    static const char* kOps[] = {"relu", "tanh", "sigmoid", "silu", "gelu",
                                 "clamp", "nan_to_num", "dropout", "detach", "to"};
    std::string op = kOps[R(0, 9)];
    int64_t k = P(0.75) ? R(3, 4) : R(1, 2);
    int x = PickAny();
    std::string approx = P(0.7) ? "none" : "tanh";
    double lo = P(0.8) ? -0.5 : -1.0;
    for (int64_t i = 0; i < k; ++i) {
      int xi = i == 0 ? x : SameShape(x);
      std::string args = Use(xi);
      bool view = false;
      if (op == "gelu") {
        absl::StrAppend(&args, ", ", Str(P(0.9) ? approx : "tanh"));
      } else if (op == "clamp") {
        absl::StrAppend(&args, ", ", Float(lo), ", ", P(0.2) ? None() : Float(0.5));
      } else if (op == "nan_to_num") {
        absl::StrAppend(&args, ", ", Float(0.0), ", ", None(), ", ", P(0.8) ? None() : Float(1.0));
      } else if (op == "dropout") {
        absl::StrAppend(&args, ", ", Float(P(0.25) ? 0.0 : 0.5), ", ", Bool(false));
        view = true;
      } else if (op == "detach") {
        view = true;
      } else if (op == "to") {  // a cast to the dtype the value has (float32): x itself
        absl::StrAppend(&args, ", ", Int(6), ", ", Bool(false), ", ", Bool(false), ", ", None());
        view = true;
      }
      std::string y = Fresh();
      Emit(y + " : Tensor", absl::StrCat("aten::", op, "(", args, ")"));
      Add(y, pool_[xi].shape, view && pool_[xi].input_alias);
    }
  }

  void BinaryGroup() {
    static const char* kOps[] = {"add", "sub", "mul", "div"};
    std::string op = kOps[R(0, 3)];
    int64_t k = P(0.75) ? R(3, 5) : 1;  // the batch_* rules take groups of 3 or more
    int x = PickAny();
    int64_t alpha = P(0.85) ? 1 : 2;
    // Sometimes a mul by one number (a scale before each branch's activation; batch_mul_scalar).
    const bool by_number = op == std::string("mul") && P(0.4);
    for (int64_t i = 0; i < k; ++i) {
      int a = i == 0 ? x : SameShape(x);
      int b = by_number ? a : SameShape(x);
      // A divisor drawn from N(0, 1) comes near zero and a chain of such divisions amplifies
      // rounding beyond what any tolerance judges (and a / a has a gradient of exactly zero,
      // rounded to noise): divide by exp(b), a divisor of the same batch, so groups still form.
      if (op == "div") {
        std::string e = Fresh();
        Emit(e + " : Tensor", absl::StrCat("aten::exp(", Use(b), ")"));
        b = Add(e, pool_[x].shape, false);
      }
      std::string args = by_number ? absl::StrCat(Use(a), ", ", Float(1.5)) : absl::StrCat(Use(a), ", ", Use(b));
      if (op == "add" || op == "sub") absl::StrAppend(&args, ", ", Int(alpha));
      std::string y = Fresh();
      Emit(y + " : Tensor", absl::StrCat("aten::", op, "(", args, ")"));
      Add(y, pool_[x].shape, false);
    }
  }

  // Spelled-out forms of ops LibTorch also has fused: a + b * c, a highway gate's mix
  // g * x + (1 - g) * y, bmm(a, b) + bias, mm(a, b) + bias, relus joined by one cat (which the
  // CUDA fuser runs as one kernel); sometimes with the operands in an order the fused rules do
  // not match.
  void Fused() {
    std::string one = Int(1);
    std::string y = Fresh();
    switch (R(0, 5)) {
      case 0: {  // a + b * c (c sometimes a broadcast parameter)
        int a = PickAny();
        Shape s = pool_[a].shape;
        int b = SameShape(a);
        std::string c = P(0.3) ? Param({s.back()}) : Use(SameShape(a));
        std::string m = Fresh();
        Emit(m + " : Tensor", absl::StrCat("aten::mul(", Use(b), ", ", c, ")"));
        Emit(y + " : Tensor", P(0.5) ? absl::StrCat("aten::add(", Use(a), ", ", m, ", ", one, ")")
                                    : absl::StrCat("aten::add(", m, ", ", Use(a), ", ", one, ")"));
        Add(y, s, false);
        return;
      }
      case 1: {  // g * x + (1 - g) * y with g = sigmoid(z)
        int x = PickAny();
        Shape s = pool_[x].shape;
        int other = SameShape(x);
        std::string g = Fresh(), gx = Fresh(), h = Fresh(), hy = Fresh();
        Emit(g + " : Tensor", absl::StrCat("aten::sigmoid(", Use(SameShape(x)), ")"));
        bool swapped = P(0.2);  // x * g: not the rule's spelling
        Emit(gx + " : Tensor", swapped ? absl::StrCat("aten::mul(", Use(x), ", ", g, ")")
                                       : absl::StrCat("aten::mul(", g, ", ", Use(x), ")"));
        if (P(0.3)) {  // 1 - g as scripted models spell it: neg(g) + 1
          std::string n = Fresh();
          Emit(n + " : Tensor", absl::StrCat("aten::neg(", g, ")"));
          Emit(h + " : Tensor", absl::StrCat("aten::add(", n, ", ", one, ", ", one, ")"));
        } else {
          Emit(h + " : Tensor", absl::StrCat("aten::rsub(", g, ", ", one, ", ", one, ")"));
        }
        Emit(hy + " : Tensor", absl::StrCat("aten::mul(", h, ", ", Use(other), ")"));
        Emit(y + " : Tensor", absl::StrCat("aten::add(", gx, ", ", hy, ", ", one, ")"));
        Add(y, s, false);
        return;
      }
      case 2: {  // bmm(a, b) + bias; a and b follow the batch
        int64_t bsz = R(2, 4), n = R(1, 5), k = R(1, 6), m = R(1, 6);
        std::string a = Use(NewInput({bsz, n, k})), b = Use(NewInput({bsz, k, m}));
        std::string c = P(0.6) ? Param({m}) : Param({n, m});
        std::string p = Fresh();
        Emit(p + " : Tensor", absl::StrCat("aten::bmm(", a, ", ", b, ")"));
        Emit(y + " : Tensor", absl::StrCat("aten::add(", p, ", ", c, ", ", one, ")"));
        Add(y, {bsz, n, m}, false);
        return;
      }
      case 3: {  // a batched layer norm's affine step feeding a batched linear:
        // baddbmm(c, addcmul(b, n, w), W) with n = permute(x) [G, batch, H]; the shift is
        // sometimes shared by all members and the bias sometimes 1-D (the fold does not apply).
        int64_t bsz = R(2, 4), g = R(2, 4), h = R(1, 5), o = R(1, 5);
        std::string x = Use(NewInput({bsz, g, h}));
        std::string n = Fresh(), a = Fresh(), r = Fresh();
        Emit(n + " : Tensor", absl::StrCat("aten::permute(", x, ", ", IntList({1, 0, 2}), ")"));
        std::string w = P(0.8) ? Param({g, 1, h}) : Param({g, 1, 1});
        std::string b = P(0.8) ? Param({g, 1, h}) : Param({1, 1, h});
        std::string c = P(0.8) ? Param({g, 1, o}) : Param({o});
        Emit(a + " : Tensor", absl::StrCat("aten::addcmul(", b, ", ", n, ", ", w, ", ", one, ")"));
        Emit(r + " : Tensor", absl::StrCat("aten::baddbmm(", c, ", ", a, ", ", Param({g, h, o}), ", ",
                                           one, ", ", one, ")"));
        // Back to the batch on dim 0, as every pool value has it.
        Emit(y + " : Tensor", absl::StrCat("aten::permute(", r, ", ", IntList({1, 0, 2}), ")"));
        Add(y, {bsz, g, o}, false);
        return;
      }
      case 4: {  // cat([relu(a_1), ..., relu(a_k)], d); sometimes one piece a tanh instead
        int a = PickAny();
        Shape s = pool_[a].shape;
        int64_t rank = s.size(), d = R(0, rank - 1), k = R(2, 4);
        std::vector<std::string> pieces;
        std::vector<int> used = {a};  // distinct operands: one value's relu twice sums its gradient
        const int64_t odd = P(0.2) ? R(0, k - 1) : -1;
        for (int64_t i = 0; i < k; ++i) {
          int operand = a;
          if (i > 0) {
            operand = SameShape(a);
            if (std::find(used.begin(), used.end(), operand) != used.end()) operand = NewInput(s);
            used.push_back(operand);
          }
          std::string r = Fresh();
          Emit(r + " : Tensor", absl::StrCat(i == odd ? "aten::tanh(" : "aten::relu(", Use(operand), ")"));
          pieces.push_back(r);
        }
        Shape out = s;
        out[d] *= k;
        Add(Cat(pieces, d, rank, "cat"), out, false);
        return;
      }
      default: {  // mm(a, w) + bias
        int a = Pick([](const Shape& s) { return s.size() == 2 && s.back() <= 8; }, 2);
        Shape s = pool_[a].shape;
        int64_t m = R(1, 6);
        std::string w = Param({s.back(), m});
        std::string c = P(0.7) ? Param({m}) : Param({1, m});
        std::string p = Fresh();
        Emit(p + " : Tensor", absl::StrCat("aten::mm(", Use(a), ", ", w, ")"));
        Emit(y + " : Tensor", P(0.7) ? absl::StrCat("aten::add(", p, ", ", c, ", ", one, ")")
                                    : absl::StrCat("aten::add(", c, ", ", p, ", ", one, ")"));
        Add(y, {s[0], m}, false);
        return;
      }
    }
  }

  // In-place ops on a value or on a view of it; the base is used again afterwards.
  void Inplace() {
    has_inplace_ = true;
    int t = PickAny();
    if (pool_[t].input_alias && P(0.7)) {
      // Mostly mutate intermediates: copy the input through a pointwise op first.
      std::string y = Unary("tanh", pool_[t]);
      t = Add(y, pool_[t].shape, false);
    }
    int base = t;
    if (P(0.5)) {  // mutate a view of it
      Shape bs = pool_[base].shape;
      int64_t rank = bs.size(), d = R(0, rank - 1);
      std::string v = Fresh();
      Shape s = bs;
      if (P(0.5)) {
        s.erase(s.begin() + d);
        Emit(v + " : Tensor", absl::StrCat("aten::select(", Use(base), ", ", Dim(d, rank), ", ",
                                           Int(R(0, bs[d] - 1)), ")"));
      } else {
        s[d] = R(1, bs[d]);
        Emit(v + " : Tensor", absl::StrCat("aten::slice(", Use(base), ", ", Dim(d, rank), ", ", Int(0), ", ",
                                           Int(s[d]), ", ", Int(1), ")"));
      }
      t = Add(v, s, pool_[base].input_alias);
    }
    if (pool_[t].input_alias) inplace_on_leaf_ = true;
    std::string r = Fresh();
    if (P(0.5)) {
      Emit(r + " : Tensor", absl::StrCat("aten::relu_(", Use(t), ")"));
    } else {
      int o = SameShape(t);
      if (o == t) o = NewInput(pool_[t].shape);
      Emit(r + " : Tensor", absl::StrCat("aten::add_(", Use(t), ", ", Use(o), ", ", Int(1), ")"));
    }
    Add(r, pool_[t].shape, pool_[t].input_alias);
    // Read the (mutated) base afterwards.
    if (P(0.7)) {
      std::string y = Unary(P(0.5) ? "sigmoid" : "relu", pool_[base]);
      Add(y, pool_[base].shape, false);
    }
  }

  std::mt19937_64 rng_;
  int64_t next_ = 0;
  std::vector<std::string> header_;
  std::ostringstream body_;
  std::map<std::string, std::string> consts_;
  std::vector<Val> pool_;
  bool has_inplace_ = false, inplace_on_leaf_ = false;
  bool stacked_layout_ = false;  // optimized as --param_layout=stacked (RandomGraph::stacked_layout)
  std::mt19937_64 aux_;
};

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

void Flatten(const c10::IValue& iv, std::vector<at::Tensor>* out) {
  if (iv.isTensor()) {
    out->push_back(iv.toTensor());
  } else if (iv.isTuple()) {
    for (const c10::IValue& e : iv.toTupleRef().elements()) Flatten(e, out);
  } else if (iv.isList()) {
    for (const c10::IValue& e : iv.toListRef()) Flatten(e, out);
  }
}

// GradsOf: runs `g` on copies of `inputs` (floating ones cast to `dtype` and made leaves) and
// returns the outputs and the gradients of every floating input for a fixed random projection
// of every floating output; the projection of output k does not depend on which other outputs
// Judge: EquivalenceChecker::CheckGraphs, the judgement sentier_check and sentierd use —
// outputs and the gradients of every floating input against a float64 run of the original, on
// the generated inputs and at twice the batch (parameters passed as inputs keep their size).
// A graph whose original cannot be differentiated (an in-place op on a leaf, say) is judged on
// its outputs; *grads says whether gradients were compared, *batch2 whether the batch x2 trial
// ran. Generated graphs divide by near-zero values and subtract equal terms (x / x, x - x), where
// a gradient is a cancellation of large contributions whose rounding depends on the order they
// are summed in: a verdict whose only failures are gradients within 1e-3 of the float64
// reference, or gradients that cancel to about zero (the float32 original is itself off by more
// than the float64 gradient's size, so both float32 graphs carry only rounding) with an absolute
// error under 1e-4, is accepted and counted (*gradient_rounding); outputs get no such allowance.
absl::Status Judge(const std::shared_ptr<torch::jit::Graph>& original,
                   const std::shared_ptr<torch::jit::Graph>& optimized,
                   const std::vector<c10::IValue>& inputs, bool* grads, bool* batch2,
                   bool* gradient_rounding) {
  CheckOptions check;
  check.trials = 1;
  check.count_ops = false;
  check.training = *grads;
  check.fixed_inputs = ParamInputs(*original);
  auto r = EquivalenceChecker(check).CheckGraphs(original, optimized, inputs);
  if (!r.ok() && check.training) {
    check.training = false;
    *grads = false;
    r = EquivalenceChecker(check).CheckGraphs(original, optimized, inputs);
  }
  if (!r.ok()) return r.status();
  *batch2 = true;
  for (const std::string& t : r->skipped_trials) *batch2 &= t.rfind("batch x2", 0) != 0;
  if (!r->equivalent) {
    bool rounding = true;
    for (const CheckFinding& f : r->findings) {
      if (f.ok) continue;
      const bool cancelled = f.ref_rel_error > 1.0 && f.max_abs_error <= 1e-4;
      rounding &= f.note.empty() && f.what.rfind("grad of ", 0) == 0 &&
                  (f.rel_error <= 1e-3 || cancelled);
    }
    if (!rounding) return absl::FailedPreconditionError(r->first_failure);
    *gradient_rounding = true;
  }
  return absl::OkStatus();
}

}  // namespace

RandomGraph GenerateRandomGraph(uint64_t seed, int steps) { return Gen(seed).Build(steps); }

int StepsForSeed(uint64_t seed) { return 4 + static_cast<int>((seed * 2654435761u >> 7) % 11); }

DiffResult RunDifferential(const RuleSet& rules, uint64_t seed, int steps) {
  DiffResult r;
  r.seed = seed;
  r.steps = steps;
  RandomGraph g = GenerateRandomGraph(seed, steps);
  r.original_text = g.text;
  auto graph = std::make_shared<torch::jit::Graph>();
  try {
    torch::jit::parseIR(g.text, graph.get());
  } catch (const std::exception& e) {
    r.valid = false;
    r.invalid_reason = absl::StrCat("parseIR: ", FirstLine(e.what()));
    return r;
  }
  std::shared_ptr<torch::jit::Graph> original = graph->copy();
  auto inputs = RandomInputsFor(*original, seed, 1);
  if (!inputs.ok()) {
    r.valid = false;
    r.invalid_reason = std::string(inputs.status().message());
    return r;
  }
  auto ran = RunGraph(original, *inputs);
  if (!ran.ok()) {
    r.valid = false;
    r.invalid_reason = std::string(ran.status().message());
    return r;
  }
  OptimizeOptions opts;
  opts.sample_inputs = &*inputs;
  opts.fixed_inputs = ParamInputs(*original);
  if (g.stacked_layout) {
    opts.stacked_parameters = true;
    opts.storable_parameter = [](const torch::jit::Value* v) {  // the %param_* inputs
      return v->node()->kind() == c10::prim::Param && absl::StartsWith(v->debugName(), "param_");
    };
  }
  try {
    auto rep = OptimizeGraph(graph, rules, opts);
    if (!rep.ok()) {
      r.failure = absl::StrCat("OptimizeGraph failed: ", rep.status().ToString());
      return r;
    }
    r.applications = rep->stats.applications;
    r.errors = rep->stats.errors;
  } catch (const std::exception& e) {
    r.failure = absl::StrCat("OptimizeGraph threw: ", FirstLine(e.what()));
    return r;
  }
  try {
    r.optimized_text = graph->toString();
    graph->lint();
  } catch (const std::exception& e) {
    r.failure = absl::StrCat("optimized graph fails lint: ", FirstLine(e.what()));
    return r;
  }
  try {
    auto again = std::make_shared<torch::jit::Graph>();
    torch::jit::parseIR(r.optimized_text, again.get());
  } catch (const std::exception& e) {
    r.failure = absl::StrCat("optimized graph text does not parse back: ", FirstLine(e.what()));
    return r;
  }
  bool grads = !g.inplace_on_leaf;
  bool batch2 = false;
  absl::Status st = Judge(original, graph, *inputs, &grads, &batch2, &r.gradient_rounding);
  r.grads_checked = grads;
  r.batch2_checked = batch2;
  if (!st.ok()) r.failure = st.ToString();
  return r;
}

DiffResult Minimize(const RuleSet& rules, const DiffResult& r) {
  for (int s = 1; s < r.steps; ++s) {
    DiffResult m = RunDifferential(rules, r.seed, s);
    if (m.valid && !m.ok()) return m;
  }
  return r;
}

std::string FormatFailure(const DiffResult& r) {
  std::string fired;
  for (const auto& [name, n] : r.applications) {
    if (n > 0) absl::StrAppend(&fired, " ", name, "=", n);
  }
  return absl::StrCat("MISMATCH seed=", r.seed, " steps=", r.steps, ": ", r.failure, "\nrules fired:", fired,
                      "\n--- original ---\n", r.original_text, "--- optimized ---\n", r.optimized_text);
}

}  // namespace difftest
}  // namespace sentier
