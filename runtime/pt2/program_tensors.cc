// program_tensors.cc — tensors of an exported program: the schema's enums, tensor metadata and
// the weights and constants entries (raw storage bytes described by a JSON config).
#include <cstring>

#include <ATen/ATen.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/pt2/program_internal.h"

namespace sentier::pt2 {
namespace {

struct ScalarTypeNumber {
  int64_t schema;
  c10::ScalarType type;
};

constexpr ScalarTypeNumber kScalarTypes[] = {
    {1, c10::kByte},  {2, c10::kChar},         {3, c10::kShort},        {4, c10::kInt},
    {5, c10::kLong},  {6, c10::kHalf},         {7, c10::kFloat},        {8, c10::kDouble},
    {9, c10::kComplexHalf}, {10, c10::kComplexFloat}, {11, c10::kComplexDouble}, {12, c10::kBool},
    {13, c10::kBFloat16},
};

absl::StatusOr<at::Tensor> TensorFromBytes(const std::string& bytes, const nlohmann::json& meta,
                                           const std::string& where) {
  auto dtype_field = Field(meta, "dtype", where);
  if (!dtype_field.ok()) return dtype_field.status();
  std::optional<c10::ScalarType> dtype =
      (*dtype_field)->is_number_integer() ? ScalarTypeFromSchema((*dtype_field)->get<int64_t>()) : std::nullopt;
  if (!dtype) return absl::InvalidArgumentError(absl::StrCat(where, ": unknown dtype ", (*dtype_field)->dump()));
  std::vector<int64_t> sizes, strides;
  for (const char* key : {"sizes", "strides"}) {
    auto list = Field(meta, key, where);
    if (!list.ok()) return list.status();
    if (!(*list)->is_array() || (*list)->size() > 64) return absl::InvalidArgumentError(absl::StrCat(where, ": bad ", key));
    for (const auto& v : **list) {
      auto n = IntOf(v, absl::StrCat(where, ".", key));
      if (!n.ok()) return n.status();
      if (*n < 0) return absl::InvalidArgumentError(absl::StrCat(where, ": negative ", key));
      (std::string(key) == "sizes" ? sizes : strides).push_back(*n);
    }
  }
  if (sizes.size() != strides.size()) return absl::InvalidArgumentError(absl::StrCat(where, ": sizes and strides differ in rank"));
  int64_t offset = 0;
  if (meta.contains("storage_offset")) {
    auto o = IntOf(meta["storage_offset"], where + ".storage_offset");
    if (!o.ok()) return o.status();
    offset = *o;
  }
  const int64_t item = c10::elementSize(*dtype);
  int64_t extent = offset + 1;  // elements the view reaches
  bool empty = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) empty = true;
    if (sizes[i] > (int64_t{1} << 40) || strides[i] > (int64_t{1} << 40)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": sizes out of range"));
    }
    extent += (sizes[i] - 1) * strides[i];
  }
  if (empty) extent = 0;
  if (static_cast<int64_t>(bytes.size()) % item != 0 || extent * item > static_cast<int64_t>(bytes.size())) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": the entry holds ", bytes.size(), " bytes; the tensor needs ",
                                                   extent * item, " (truncated)"));
  }
  at::Tensor storage = at::empty({static_cast<int64_t>(bytes.size()) / item}, at::TensorOptions().dtype(*dtype));
  if (!bytes.empty()) std::memcpy(storage.data_ptr(), bytes.data(), bytes.size());
  return storage.as_strided(sizes, strides, offset).clone();
}

}  // namespace

std::optional<c10::ScalarType> ScalarTypeFromSchema(int64_t v) {
  for (const auto& s : kScalarTypes) {
    if (s.schema == v) return s.type;
  }
  return std::nullopt;
}

int64_t SchemaScalarType(c10::ScalarType t) {
  for (const auto& s : kScalarTypes) {
    if (s.type == t) return s.schema;
  }
  return 0;  // UNKNOWN
}

std::optional<c10::MemoryFormat> MemoryFormatFromSchema(int64_t v) {
  switch (v) {
    case 1: return c10::MemoryFormat::Contiguous;
    case 2: return c10::MemoryFormat::ChannelsLast;
    case 3: return c10::MemoryFormat::ChannelsLast3d;
    case 4: return c10::MemoryFormat::Preserve;
    default: return std::nullopt;
  }
}

int64_t SchemaMemoryFormat(c10::MemoryFormat f) {
  switch (f) {
    case c10::MemoryFormat::Contiguous: return 1;
    case c10::MemoryFormat::ChannelsLast: return 2;
    case c10::MemoryFormat::ChannelsLast3d: return 3;
    case c10::MemoryFormat::Preserve: return 4;
    default: return 0;
  }
}

nlohmann::json TensorMetaJson(const at::Tensor& t) {
  nlohmann::json sizes = nlohmann::json::array(), strides = nlohmann::json::array();
  for (int64_t s : t.sizes()) sizes.push_back({{"as_int", s}});
  for (int64_t s : t.strides()) strides.push_back({{"as_int", s}});
  nlohmann::json device = {{"type", t.device().is_cuda() ? "cuda" : "cpu"}, {"index", nullptr}};
  if (t.device().has_index()) device["index"] = t.device().index();
  return {{"dtype", SchemaScalarType(t.scalar_type())},
          {"sizes", sizes},
          {"requires_grad", t.requires_grad()},
          {"device", device},
          {"strides", strides},
          {"storage_offset", {{"as_int", t.storage_offset()}}},
          {"layout", kSchemaStridedLayout}};
}

absl::StatusOr<const nlohmann::json*> Field(const nlohmann::json& j, const std::string& key,
                                            const std::string& where) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": '", key, "' is missing"));
  }
  return &j[key];
}

absl::StatusOr<int64_t> IntOf(const nlohmann::json& j, const std::string& where) {
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_object() && j.contains("as_int") && j["as_int"].is_number_integer()) return j["as_int"].get<int64_t>();
  if (j.is_object() && (j.contains("as_expr") || j.contains("as_name"))) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": a symbolic size (the program was exported with dynamic shapes; export it with static shapes)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(where, ": not an int: ", j.dump().substr(0, 80)));
}

absl::StatusOr<std::map<std::string, at::Tensor>> ReadWeights(const Pt2Archive& archive,
                                                              const std::string& config_entry,
                                                              const std::string& folder) {
  std::map<std::string, at::Tensor> out;
  auto it = archive.entries.find(config_entry);
  if (it == archive.entries.end()) return out;
  nlohmann::json config = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  std::string where = absl::StrCat("entry '", config_entry, "'");
  if (config.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(where, ": malformed JSON"));
  auto entries = Field(config, "config", where);
  if (!entries.ok()) return entries.status();
  if (!(*entries)->is_object()) return absl::InvalidArgumentError(absl::StrCat(where, ": 'config' is not an object"));
  for (const auto& [name, spec] : (*entries)->items()) {
    std::string at = absl::StrCat(where, ": '", name, "'");
    if (spec.value("use_pickle", false)) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": pickled tensors are not read (only raw storage entries)"));
    }
    auto path = Field(spec, "path_name", at);
    if (!path.ok()) return path.status();
    if (!(*path)->is_string()) return absl::InvalidArgumentError(absl::StrCat(at, ": 'path_name' is not a string"));
    std::string entry = folder + (*path)->get<std::string>();
    auto bytes = archive.entries.find(entry);
    if (bytes == archive.entries.end()) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": entry '", entry, "' is missing"));
    }
    auto meta = Field(spec, "tensor_meta", at);
    if (!meta.ok()) return meta.status();
    auto t = TensorFromBytes(bytes->second, **meta, absl::StrCat("entry '", entry, "'"));
    if (!t.ok()) return t.status();
    out[name] = *t;
  }
  return out;
}

absl::Status WriteWeights(const std::map<std::string, at::Tensor>& tensors, const std::vector<std::string>& params,
                          const std::string& config_entry, const std::string& folder, Pt2Archive& archive) {
  for (auto it = archive.entries.begin(); it != archive.entries.end();) {
    it = absl::StartsWith(it->first, folder) ? archive.entries.erase(it) : std::next(it);
  }
  nlohmann::json config = nlohmann::json::object();
  int n = 0;
  for (const auto& [name, tensor] : tensors) {
    at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
    std::string file = absl::StrCat(absl::StrContains(folder, "constants") ? "tensor_" : "weight_", n++);
    archive.entries[folder + file] = std::string(static_cast<const char*>(t.data_ptr()), t.nbytes());
    nlohmann::json meta = TensorMetaJson(t);
    bool is_param = std::find(params.begin(), params.end(), name) != params.end();
    meta["requires_grad"] = is_param && tensor.requires_grad();
    config[name] = {{"path_name", file}, {"is_param", is_param}, {"use_pickle", false}, {"tensor_meta", meta}};
  }
  archive.entries[config_entry] = nlohmann::json({{"config", config}}).dump();
  return absl::OkStatus();
}

}  // namespace sentier::pt2
