// sample_inputs.cc — structure-preserving walks, schema conformance, batch doubling and random
// draws over a forward's arguments (see the header).
#include "passes/sample_inputs.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <ATen/ATen.h>
#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/core/jit_type.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace sentier {
namespace {

using PathFn = std::function<at::Tensor(const std::string&, const at::Tensor&)>;

std::string KeyString(const c10::IValue& key) {
  if (key.isString()) return key.toStringRef();
  if (key.isInt()) return std::to_string(key.toInt());
  return c10::str(key);
}

c10::IValue MapWithPath(const c10::IValue& v, const std::string& path, const PathFn& fn) {
  if (v.isTensor()) return fn(path, v.toTensor());
  if (v.isTuple()) {
    const auto& el = v.toTupleRef().elements();
    std::vector<c10::IValue> out;
    out.reserve(el.size());
    for (size_t i = 0; i < el.size(); ++i) out.push_back(MapWithPath(el[i], absl::StrCat(path, "[", i, "]"), fn));
    auto type = v.toTupleRef().type();
    if (type != nullptr && type->schema() != nullptr) {
      return c10::ivalue::Tuple::createNamed(std::move(out), type);
    }
    return c10::ivalue::Tuple::create(std::move(out));
  }
  if (v.isList()) {
    c10::List<c10::IValue> list = v.toList();
    c10::impl::GenericList out(list.elementType());
    out.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      out.push_back(MapWithPath(list.get(i), absl::StrCat(path, "[", i, "]"), fn));
    }
    return out;
  }
  if (v.isGenericDict()) {
    c10::impl::GenericDict dict = v.toGenericDict();
    c10::impl::GenericDict out(dict.keyType(), dict.valueType());
    for (const auto& kv : dict) {
      out.insert(kv.key(), MapWithPath(kv.value(), absl::StrCat(path, "[", KeyString(kv.key()), "]"), fn));
    }
    return out;
  }
  return v;
}

std::vector<c10::IValue> MapAllWithPath(const std::vector<c10::IValue>& vs, const std::string& prefix,
                                        const PathFn& fn) {
  std::vector<c10::IValue> out;
  out.reserve(vs.size());
  for (size_t i = 0; i < vs.size(); ++i) out.push_back(MapWithPath(vs[i], absl::StrCat(prefix, "[", i, "]"), fn));
  return out;
}

absl::StatusOr<c10::IValue> Conform(const c10::IValue& v, const c10::TypePtr& type,
                                    const std::string& where);

absl::Status Mismatch(const c10::IValue& v, const c10::TypePtr& type, const std::string& where) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": expected ", type->repr_str(),
                                                 ", found ", v.tagKind()));
}

// The elements of a list or a tuple.
std::vector<c10::IValue> ElementsOf(const c10::IValue& v) {
  std::vector<c10::IValue> items;
  if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) items.push_back(e);
  } else {
    for (const c10::IValue& e : v.toTupleRef().elements()) items.push_back(e);
  }
  return items;
}

// A list or tuple as a typed list, each element conformed.
absl::StatusOr<c10::IValue> ConformList(const c10::IValue& v, const c10::TypePtr& type,
                                        const std::string& where) {
  if (!v.isList() && !v.isTuple()) return Mismatch(v, type, where);
  c10::TypePtr elem = type->expectRef<c10::ListType>().getElementType();
  std::vector<c10::IValue> items = ElementsOf(v);
  c10::impl::GenericList out(elem);
  out.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    auto e = Conform(items[i], elem, absl::StrCat(where, "[", i, "]"));
    if (!e.ok()) return e.status();
    out.push_back(*e);
  }
  return c10::IValue(out);
}

// A dict as a typed dict, each key and value conformed.
absl::StatusOr<c10::IValue> ConformDict(const c10::IValue& v, const c10::TypePtr& type,
                                        const std::string& where) {
  if (!v.isGenericDict()) return Mismatch(v, type, where);
  const auto& dt = type->expectRef<c10::DictType>();
  c10::impl::GenericDict out(dt.getKeyType(), dt.getValueType());
  for (const auto& kv : v.toGenericDict()) {
    std::string at = absl::StrCat(where, "[", KeyString(kv.key()), "]");
    auto key = Conform(kv.key(), dt.getKeyType(), at);
    if (!key.ok()) return key.status();
    auto val = Conform(kv.value(), dt.getValueType(), at);
    if (!val.ok()) return val.status();
    out.insert(*key, *val);
  }
  return c10::IValue(out);
}

// A tuple or list of the right length as a tuple (named when the type is), each element conformed.
absl::StatusOr<c10::IValue> ConformTuple(const c10::IValue& v, const c10::TypePtr& type,
                                         const std::string& where) {
  const auto& tt = type->expectRef<c10::TupleType>();
  if (!v.isTuple() && !v.isList()) return Mismatch(v, type, where);
  std::vector<c10::IValue> items = ElementsOf(v);
  if (items.size() != tt.elements().size()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": expected a tuple of ",
                                                   tt.elements().size(), " elements, found ",
                                                   items.size()));
  }
  std::vector<c10::IValue> out;
  for (size_t i = 0; i < items.size(); ++i) {
    auto e = Conform(items[i], tt.elements()[i], absl::StrCat(where, "[", i, "]"));
    if (!e.ok()) return e.status();
    out.push_back(*e);
  }
  if (tt.schema() != nullptr) {
    return c10::IValue(c10::ivalue::Tuple::createNamed(std::move(out), type->cast<c10::TupleType>()));
  }
  return c10::IValue(c10::ivalue::Tuple::create(std::move(out)));
}

// A dispatch on the expected type's kind; containers have their steps above.
absl::StatusOr<c10::IValue> Conform(const c10::IValue& v, const c10::TypePtr& type,
                                    const std::string& where) {
  switch (type->kind()) {
    case c10::TypeKind::TensorType:
      if (!v.isTensor()) return Mismatch(v, type, where);
      return v;
    case c10::TypeKind::OptionalType:
      if (v.isNone()) return v;
      return Conform(v, type->expectRef<c10::OptionalType>().getElementType(), where);
    case c10::TypeKind::ListType:
      return ConformList(v, type, where);
    case c10::TypeKind::DictType:
      return ConformDict(v, type, where);
    case c10::TypeKind::TupleType:
      return ConformTuple(v, type, where);
    case c10::TypeKind::FloatType:
      if (v.isInt()) return c10::IValue(static_cast<double>(v.toInt()));
      if (!v.isDouble()) return Mismatch(v, type, where);
      return v;
    default:
      if (!v.type()->isSubtypeOf(*type)) return Mismatch(v, type, where);
      return v;
  }
}

bool IsIndexTensor(const at::Tensor& t) {
  return t.dim() == 1 && c10::isIntegralType(t.scalar_type(), /*includeBool=*/false);
}

bool LooksLikeOffsets(const at::Tensor& t) {
  if (!IsIndexTensor(t) || t.numel() == 0) return false;
  at::Tensor c = t.cpu();
  if (c[0].item<int64_t>() != 0) return false;
  return t.numel() == 1 || (c.slice(0, 1) - c.slice(0, 0, -1)).min().item<int64_t>() >= 0;
}

std::vector<std::string> PathParts(const std::string& path) {
  std::vector<std::string> parts = absl::StrSplit(path, '[', absl::SkipEmpty());
  return parts;
}

size_t CommonSuffix(const std::string& a, const std::string& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[a.size() - 1 - n] == b[b.size() - 1 - n]) ++n;
  return n;
}

// The key of a path with part k left out: paths that differ only in part k share it.
std::string SiblingKey(const std::vector<std::string>& parts, size_t k) {
  std::string key = absl::StrCat(k, "|");
  for (size_t i = 0; i < parts.size(); ++i) absl::StrAppend(&key, i == k ? "*" : parts[i], "[");
  return key;
}

// offsets path -> length of the indices tensor it indexes: for each tensor that looks like
// offsets, the index tensor whose path differs from its own in one part (a sibling: ids[k] for
// offsets[k]), with the longest common suffix in that part, nearest before it on a tie; where
// it has no sibling, the best of all index tensors by the same order. Paths are split, tensors
// classified and siblings indexed once (a model with 500 features passes 1,500 tensors).
std::map<std::string, int64_t> FindOffsets(const NamedTensors& flat) {
  std::vector<std::vector<std::string>> parts(flat.size());
  std::vector<bool> index(flat.size());
  absl::flat_hash_map<std::string, std::vector<size_t>> siblings;
  for (size_t j = 0; j < flat.size(); ++j) {
    parts[j] = PathParts(flat[j].first);
    index[j] = IsIndexTensor(flat[j].second);
    if (!index[j]) continue;
    for (size_t k = 0; k < parts[j].size(); ++k) siblings[SiblingKey(parts[j], k)].push_back(j);
  }
  std::map<std::string, int64_t> out;
  for (size_t i = 0; i < flat.size(); ++i) {
    const std::string& path = flat[i].first;
    const at::Tensor& o = flat[i].second;  // (named, not bound: the lambda below reads it)
    if (!LooksLikeOffsets(o)) continue;
    int64_t last = o.cpu()[-1].item<int64_t>();
    const std::vector<std::string>& op = parts[i];
    int best = -1;
    std::tuple<int, size_t, int64_t> best_score{-1, 0, 0};
    auto consider = [&](size_t j) {
      const at::Tensor& p = flat[j].second;
      if (j == i || !index[j] || p.numel() < last || p.numel() + 1 < o.numel()) return;
      const std::vector<std::string>& pp = parts[j];
      int differing = 0;
      size_t suffix = 0;
      if (pp.size() == op.size()) {
        for (size_t k = 0; k < pp.size() && differing < 2; ++k) {
          if (pp[k] != op[k]) {
            ++differing;
            suffix = CommonSuffix(pp[k], op[k]);
          }
        }
      }
      int sibling = differing == 1 ? 1 : 0;
      // Nearest before the offsets wins a tie (EmbeddingBag(indices, offsets) order).
      int64_t nearness = j < i ? -static_cast<int64_t>(i - j) : -static_cast<int64_t>(flat.size() + j);
      std::tuple<int, size_t, int64_t> score{sibling, suffix, nearness};
      if (best < 0 || score > best_score) {
        best = static_cast<int>(j);
        best_score = score;
      }
    };
    for (size_t k = 0; k < op.size(); ++k) {
      auto it = siblings.find(SiblingKey(op, k));
      if (it == siblings.end()) continue;
      for (size_t j : it->second) consider(j);
    }
    if (best < 0 || std::get<0>(best_score) == 0) {  // no sibling: every index tensor competes
      for (size_t j = 0; j < flat.size(); ++j) consider(j);
    }
    if (best >= 0) out[path] = flat[best].second.numel();
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<c10::IValue>> ConformToTypes(const std::vector<c10::TypePtr>& types,
                                                        const std::vector<c10::IValue>& args) {
  if (args.size() != types.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", types.size(), " inputs, found ", args.size()));
  }
  std::vector<c10::IValue> out;
  for (size_t i = 0; i < args.size(); ++i) {
    auto v = Conform(args[i], types[i], absl::StrCat("input ", i));
    if (!v.ok()) return v.status();
    out.push_back(*v);
  }
  return out;
}

absl::StatusOr<std::vector<c10::IValue>> ConformToSchema(const c10::FunctionSchema& schema,
                                                         const std::vector<c10::IValue>& args) {
  const auto& params = schema.arguments();
  size_t first = 0;
  if (!params.empty() && params[0].name() == "self" &&
      params[0].type()->kind() == c10::TypeKind::ClassType) {
    first = 1;
  }
  size_t declared = params.size() - first;
  if (args.size() > declared) {
    return absl::InvalidArgumentError(absl::StrCat(schema.name(), " takes ", declared,
                                                   " arguments, the sample inputs give ",
                                                   args.size()));
  }
  std::vector<c10::IValue> out;
  for (size_t i = 0; i < declared; ++i) {
    const c10::Argument& p = params[first + i];
    if (i >= args.size()) {
      if (!p.default_value()) {
        return absl::InvalidArgumentError(absl::StrCat(
            schema.name(), " takes ", declared, " arguments, the sample inputs give ", args.size(),
            " (argument '", p.name(), "' has no default)"));
      }
      out.push_back(*p.default_value());
      continue;
    }
    auto v = Conform(args[i], p.type(), absl::StrCat("argument '", p.name(), "'"));
    if (!v.ok()) return v.status();
    out.push_back(*v);
  }
  return out;
}

c10::IValue MapTensors(const c10::IValue& v, const std::function<at::Tensor(const at::Tensor&)>& fn) {
  return MapWithPath(v, "", [&](const std::string&, const at::Tensor& t) { return fn(t); });
}

std::vector<c10::IValue> MapTensors(const std::vector<c10::IValue>& vs,
                                    const std::function<at::Tensor(const at::Tensor&)>& fn) {
  std::vector<c10::IValue> out;
  out.reserve(vs.size());
  for (const c10::IValue& v : vs) out.push_back(MapTensors(v, fn));
  return out;
}

void FlattenTensors(const c10::IValue& v, const std::string& path, NamedTensors* out) {
  if (v.isTensor()) {
    out->emplace_back(path, v.toTensor());
  } else if (v.isTuple()) {
    const auto& el = v.toTupleRef().elements();
    for (size_t i = 0; i < el.size(); ++i) FlattenTensors(el[i], absl::StrCat(path, "[", i, "]"), out);
  } else if (v.isList()) {
    auto list = v.toListRef();
    for (size_t i = 0; i < list.size(); ++i) FlattenTensors(list[i], absl::StrCat(path, "[", i, "]"), out);
  } else if (v.isGenericDict()) {
    std::vector<std::pair<std::string, c10::IValue>> items;
    for (const auto& kv : v.toGenericDict()) items.emplace_back(KeyString(kv.key()), kv.value());
    std::sort(items.begin(), items.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [k, val] : items) FlattenTensors(val, absl::StrCat(path, "[", k, "]"), out);
  }
}

NamedTensors FlattenTensors(const std::vector<c10::IValue>& vs, const std::string& prefix) {
  NamedTensors out;
  for (size_t i = 0; i < vs.size(); ++i) FlattenTensors(vs[i], absl::StrCat(prefix, "[", i, "]"), &out);
  return out;
}

std::vector<c10::IValue> DoubleBatch(const std::vector<c10::IValue>& samples,
                                     const std::vector<bool>& fixed) {
  std::map<std::string, int64_t> offsets = FindOffsets(FlattenTensors(samples, ""));
  std::vector<std::string> fixed_prefixes;
  for (size_t i = 0; i < fixed.size(); ++i) {
    if (fixed[i]) fixed_prefixes.push_back(absl::StrCat("[", i, "]"));
  }
  return MapAllWithPath(samples, "", [&](const std::string& path, const at::Tensor& t) {
    if (t.dim() == 0) return t;
    for (const std::string& p : fixed_prefixes) {
      if (path.compare(0, p.size(), p) == 0) return t;
    }
    auto it = offsets.find(path);
    if (it == offsets.end()) return at::cat({t, t}, 0);
    int64_t n = it->second;  // indices per copy
    bool include_last = t.numel() >= 2 && t[-1].item<int64_t>() == n;
    at::Tensor head = include_last ? t.slice(0, 0, -1) : t;
    return at::cat({head, t + n}, 0);
  });
}

c10::optional<std::vector<c10::IValue>> ShrinkBatch(const std::vector<c10::IValue>& samples,
                                                    int64_t rows, const std::vector<bool>& fixed) {
  std::vector<std::string> fixed_prefixes;
  for (size_t i = 0; i < fixed.size(); ++i) {
    if (fixed[i]) fixed_prefixes.push_back(absl::StrCat("[", i, "]"));
  }
  auto is_fixed = [&](const std::string& path) {
    for (const std::string& p : fixed_prefixes) {
      if (path.compare(0, p.size(), p) == 0) return true;
    }
    return false;
  };
  NamedTensors flat = FlattenTensors(samples, "");
  if (!FindOffsets(flat).empty()) return c10::nullopt;
  int64_t batch = -1;
  for (const auto& [path, t] : flat) {
    if (is_fixed(path)) continue;
    if (t.dim() == 0) return c10::nullopt;
    if (batch < 0) batch = t.size(0);
    if (t.size(0) != batch) return c10::nullopt;
  }
  if (batch <= rows) return c10::nullopt;
  return MapAllWithPath(samples, "", [&](const std::string& path, const at::Tensor& t) {
    return is_fixed(path) ? t : t.slice(0, 0, rows).clone();
  });
}

std::vector<c10::IValue> RandomInputsLike(const std::vector<c10::IValue>& samples, at::Generator& gen,
                                          int64_t batch_scale, const std::vector<bool>& fixed) {
  std::vector<c10::IValue> base = batch_scale == 2 ? DoubleBatch(samples, fixed) : samples;
  NamedTensors flat = FlattenTensors(base, "");
  std::map<std::string, int64_t> offsets = FindOffsets(flat);
  std::map<std::string, at::Tensor> drawn;
  for (const auto& [path, t0] : flat) {
    at::Tensor t = t0.detach().cpu();
    std::vector<int64_t> shape = t.sizes().vec();
    at::Tensor r;
    if (c10::isFloatingType(t.scalar_type())) {
      double mean = t.numel() ? t.to(at::kDouble).mean().item<double>() : 0.0;
      double std = t.numel() > 1 ? t.to(at::kDouble).std().item<double>() : 1.0;
      if (!(std > 0)) std = 1.0;
      r = (at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble)) * std + mean).to(t.scalar_type());
      if (t.dim() >= 2 && t.size(0) > 1) {
        // A (batch, columns...) float tensor whose columns may hold ids stored as floats (one
        // input tensor, a column per feature, cut out and cast with `.long()` per feature): a
        // column whose sample values are all whole and non-negative is drawn as whole numbers
        // within its observed range, like an index column; the others stay normal.
        at::Tensor td = t.to(at::kDouble);
        at::Tensor ids = at::logical_and(td == at::floor(td), td >= 0).all(0, /*keepdim=*/true);
        at::Tensor lo = std::get<0>(td.min(0, /*keepdim=*/true));
        at::Tensor hi = std::get<0>(td.max(0, /*keepdim=*/true));
        at::Tensor u = at::rand(shape, gen, at::TensorOptions().dtype(at::kDouble));
        at::Tensor whole = at::minimum(at::floor(u * (hi - lo + 1)) + lo, hi);
        r = at::where(ids, whole.to(t.scalar_type()), r);
      }
    } else if (t.scalar_type() == at::kBool) {
      r = at::randint(0, 2, shape, gen, at::TensorOptions().dtype(at::kLong)).to(at::kBool);
    } else if (offsets.count(path) != 0 || !c10::isIntegralType(t.scalar_type(), false)) {
      r = t.clone();  // offsets stay monotone; other dtypes (complex, quantized) are kept
    } else if (t.dim() == 2 && t.numel() > 0) {
      // A 2-D index tensor: (batch, features) or (features, batch), as DLRM's stacked lS_i is
      // passed. Each element is drawn within both its column's and its row's observed range, so
      // it stays inside its own table whichever dim is the batch (where the two ranges do not
      // meet, the sample's value stays).
      at::Tensor td = t.to(at::kDouble);
      at::Tensor lo = at::maximum(std::get<0>(td.min(0, true)), std::get<0>(td.min(1, true)));
      at::Tensor hi = at::minimum(std::get<0>(td.max(0, true)), std::get<0>(td.max(1, true)));
      at::Tensor u = at::rand(shape, gen, at::TensorOptions().dtype(at::kDouble));
      at::Tensor drawn_values = at::minimum(at::floor(u * (hi - lo + 1)) + lo, hi);
      r = at::where(lo <= hi, drawn_values, td).to(t.scalar_type());
    } else if (t.dim() >= 2 && t.size(0) > 0) {
      // A (batch, features...) index tensor: each feature's column has its own table, so each is
      // drawn within its own observed range.
      at::Tensor lo = std::get<0>(t.min(0, /*keepdim=*/true)).to(at::kDouble);
      at::Tensor hi = std::get<0>(t.max(0, /*keepdim=*/true)).to(at::kDouble);
      at::Tensor u = at::rand(shape, gen, at::TensorOptions().dtype(at::kDouble));
      r = at::minimum(at::floor(u * (hi - lo + 1)) + lo, hi).to(t.scalar_type());
    } else {
      int64_t lo = t.numel() ? t.min().item<int64_t>() : 0;
      int64_t hi = t.numel() ? t.max().item<int64_t>() : 0;
      r = at::randint(lo, hi + 1, shape, gen, at::TensorOptions().dtype(t.scalar_type()));
    }
    drawn[path] = r.to(t0.device());
  }
  return MapAllWithPath(base, "", [&](const std::string& path, const at::Tensor& t) {
    auto it = drawn.find(path);
    return it == drawn.end() ? t : it->second;
  });
}

}  // namespace sentier
