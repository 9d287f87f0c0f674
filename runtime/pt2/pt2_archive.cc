// pt2_archive.cc — reading and writing the zip container of an exported program (pt2_archive.h)
// with LibTorch's own zip reader and writer, after archive_check has vouched for the bytes.
#include "runtime/pt2/pt2_archive.h"

#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "passes/torch_error.h"
#include "runtime/archive_check.h"

namespace sentier {
namespace {

// The zip reader reads through this view of bytes the caller keeps alive.
class BytesReader : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BytesReader(absl::string_view bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    size_t take = std::min<uint64_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, take);
    return take;
  }

 private:
  absl::string_view bytes_;
};

bool IsWriterRecord(const std::string& name) {
  return name == ".data/version" || name == ".data/serialization_id" || name == "version";
}

absl::Status CheckEntryName(const std::string& name) {
  if (name.empty() || name[0] == '/' || absl::StrContains(name, "..") || absl::StrContains(name, "\\")) {
    return absl::InvalidArgumentError(absl::StrCat("entry '", name, "' escapes the archive's root folder"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Pt2Archive> ReadEntries(caffe2::serialize::PyTorchStreamReader& reader) {
  Pt2Archive archive;
  for (const std::string& name : reader.getAllRecords()) {
    if (absl::Status ok = CheckEntryName(name); !ok.ok()) return ok;
    if (IsWriterRecord(name)) continue;
    size_t size = reader.getRecordSize(name);
    if (static_cast<int64_t>(size) > kMaxPt2EntryBytes) {
      return absl::InvalidArgumentError(absl::StrCat("entry '", name, "' holds ", size, " bytes, over the limit of ",
                                                     kMaxPt2EntryBytes));
    }
    auto [data, n] = reader.getRecord(name);
    archive.entries[name] = std::string(static_cast<const char*>(data.get()), n);
  }
  return archive;
}

absl::Status CheckProgramEntries(const Pt2Archive& archive) {
  auto format = archive.entries.find("archive_format");
  if (format == archive.entries.end()) return absl::InvalidArgumentError("entry 'archive_format' is missing");
  if (format->second != "pt2") {
    return absl::InvalidArgumentError(
        absl::StrCat("entry 'archive_format' says '", format->second.substr(0, 40), "', not 'pt2'"));
  }
  if (!archive.entries.count(std::string(kPt2ProgramEntry))) {
    return absl::InvalidArgumentError(absl::StrCat("entry '", kPt2ProgramEntry, "' is missing"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Pt2Archive> ReadPt2Archive(absl::string_view bytes, absl::string_view what) {
  std::string prefix = absl::StrCat("cannot read exported program '", what, "': ");
  int64_t limit = std::max<int64_t>(4 * static_cast<int64_t>(bytes.size()) + (int64_t{1} << 20), 1 << 20);
  if (absl::Status sound = CheckArchive(bytes, limit); !sound.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, sound.message()));
  }
  absl::StatusOr<Pt2Archive> archive;
  try {
    caffe2::serialize::PyTorchStreamReader reader(std::make_shared<BytesReader>(bytes));
    archive = ReadEntries(reader);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, TorchErrorMessage(e.what())));
  }
  if (archive.ok()) {
    if (absl::Status ok = CheckProgramEntries(*archive); !ok.ok()) archive = ok;
  }
  if (!archive.ok()) return absl::InvalidArgumentError(absl::StrCat(prefix, archive.status().message()));
  return archive;
}

absl::StatusOr<std::string> WritePt2Archive(const Pt2Archive& archive) {
  std::string out;
  try {
    caffe2::serialize::PyTorchStreamWriter writer([&out](const void* data, size_t n) -> size_t {
      if (data != nullptr) out.append(static_cast<const char*>(data), n);
      else out.append(n, '\0');
      return n;
    });
    for (const auto& [name, bytes] : archive.entries) {
      if (absl::Status ok = CheckEntryName(name); !ok.ok()) return ok;
      if (IsWriterRecord(name)) continue;
      writer.writeRecord(name, bytes.data(), bytes.size());
    }
    writer.writeEndOfFile();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("cannot write exported program: ", TorchErrorMessage(e.what())));
  }
  return out;
}

}  // namespace sentier
