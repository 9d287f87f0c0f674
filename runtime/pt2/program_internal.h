// program_internal.h — what the exported-program reader and writer share: the schema's enums as
// c10's, tensor metadata, weights and JSON access with messages that name the place.
#ifndef SENTIER_RUNTIME_PT2_PROGRAM_INTERNAL_H_
#define SENTIER_RUNTIME_PT2_PROGRAM_INTERNAL_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "runtime/pt2/pt2_archive.h"

namespace sentier::pt2 {

// The serialization schema's major version this reader knows.
constexpr int kSchemaMajor = 8;

// The schema's ScalarType, Layout and MemoryFormat numbers, as c10's.
std::optional<c10::ScalarType> ScalarTypeFromSchema(int64_t v);
int64_t SchemaScalarType(c10::ScalarType t);
std::optional<c10::MemoryFormat> MemoryFormatFromSchema(int64_t v);
int64_t SchemaMemoryFormat(c10::MemoryFormat f);
constexpr int64_t kSchemaStridedLayout = 7;

// TensorMetaJson: the schema's TensorMeta of `t` (sizes, strides and offset as plain ints).
nlohmann::json TensorMetaJson(const at::Tensor& t);

// Field: j[key] when present (and not null), an error naming `where` otherwise.
absl::StatusOr<const nlohmann::json*> Field(const nlohmann::json& j, const std::string& key,
                                            const std::string& where);
// IntOf: a plain int, or a SymInt {"as_int": n}; symbolic sizes are refused.
absl::StatusOr<int64_t> IntOf(const nlohmann::json& j, const std::string& where);

// ReadWeights: name -> tensor for every entry of a weights or constants config
// ("data/weights/model_weights_config.json" with entries in "data/weights/").
absl::StatusOr<std::map<std::string, at::Tensor>> ReadWeights(const Pt2Archive& archive,
                                                              const std::string& config_entry,
                                                              const std::string& folder);

// WriteWeights: the config and the entries of `tensors` (name -> tensor, parameters named in
// `params`) into `archive`, replacing what `folder` held.
absl::Status WriteWeights(const std::map<std::string, at::Tensor>& tensors, const std::vector<std::string>& params,
                          const std::string& config_entry, const std::string& folder, Pt2Archive& archive);

}  // namespace sentier::pt2

#endif  // SENTIER_RUNTIME_PT2_PROGRAM_INTERNAL_H_
