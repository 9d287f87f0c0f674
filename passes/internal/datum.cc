// internal/datum.cc — the values of the rule language: equality, printing and conversion of a
// Datum to and from LibTorch's IValue, the value of a scalar literal of the rule language, and
// reading a Datum from a graph constant (a prim::Constant, or a prim::ListConstruct of
// constants).
#include "passes/internal/datum.h"

#include <torch/csrc/jit/ir/constants.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace sentier {
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

c10::optional<Datum> ScalarLiteral(const Expr& e) {
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
    default:
      return c10::nullopt;
  }
}

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
}  // namespace sentier
