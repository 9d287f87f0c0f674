// pt2_archive.h — the container of an exported program: a `torch.export.save` archive (`.pt2`),
// read into memory entry by entry and written back, with no Python.
//
// A .pt2 is a zip whose entries share one root folder (`<root>/models/model.json`, the serialized
// ExportedProgram; `<root>/data/weights/...` with `model_weights_config.json`;
// `<root>/data/constants/...`; `<root>/data/sample_inputs/model.pt`; `archive_format`,
// `archive_version`, `byteorder`, `.data/version`). ReadPt2Archive refuses, naming the entry:
// bytes that are not a sound zip (runtime/archive_check.h: offsets, sizes, zip bombs), an entry
// outside the root or with `..` in its name, an archive whose `archive_format` is not `pt2`, one
// without `models/model.json`, and an entry over kMaxPt2EntryBytes.
//
//   absl::StatusOr<Pt2Archive> a = ReadPt2Archive(bytes, "ranker/3/model.pt2");
//   a->entries["models/model.json"] = new_json;
//   absl::StatusOr<std::string> zip = WritePt2Archive(*a);
#ifndef SENTIER_RUNTIME_PT2_PT2_ARCHIVE_H_
#define SENTIER_RUNTIME_PT2_PT2_ARCHIVE_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sentier {

// The largest single entry read (the weights of one tensor, the program's JSON): 8 GiB.
constexpr int64_t kMaxPt2EntryBytes = int64_t{8} << 30;

struct Pt2Archive {
  // Entry name below the root folder ("models/model.json") -> its bytes. The records the zip
  // writer makes itself (`.data/version`, `.data/serialization_id`) are not kept.
  std::map<std::string, std::string> entries;
};

// ReadPt2Archive: `bytes` of an archive; `what` names it in messages ("cannot read exported program
// 'what': entry 'x': ...").
absl::StatusOr<Pt2Archive> ReadPt2Archive(absl::string_view bytes, absl::string_view what);

// WritePt2Archive: the zip bytes of `archive` (root folder "archive", entries 64-byte aligned, as
// torch.export.save writes them).
absl::StatusOr<std::string> WritePt2Archive(const Pt2Archive& archive);

// The entries every program archive has.
constexpr absl::string_view kPt2ProgramEntry = "models/model.json";
constexpr absl::string_view kPt2WeightsConfigEntry = "data/weights/model_weights_config.json";
constexpr absl::string_view kPt2ConstantsConfigEntry = "data/constants/model_constants_config.json";
constexpr absl::string_view kPt2SampleInputsEntry = "data/sample_inputs/model.pt";
// A stacked parameter layout's record (passes/stacked_parameters.h: ParamLayout as JSON).
constexpr absl::string_view kPt2ParamLayoutEntry = "extra/sentier_param_layout.json";

}  // namespace sentier

#endif  // SENTIER_RUNTIME_PT2_PT2_ARCHIVE_H_
