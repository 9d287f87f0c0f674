// archive_check.h — structural check of a TorchScript / torch.save archive (a zip file) before
// its bytes reach LibTorch's reader.
//
// LibTorch 1.13's archive reader (miniz, via caffe2::serialize::PyTorchStreamReader) trusts the
// offsets and sizes written in the file: a crafted archive made it read past a heap buffer
// (found by //testing/fuzz:sample_inputs_fuzz), and an entry may claim any uncompressed size (a
// zip bomb; the reader allocates what the entry claims). CheckArchive walks the end-of-central-
// directory record (zip64 too), every central directory entry and its local header, and accepts
// the archive only when every offset and size lies inside the file, every entry is stored or
// deflated, a stored entry's two sizes agree, and the claimed uncompressed total stays within a
// limit. Stored `.pkl` entries (what LibTorch unpickles) are walked opcode by opcode: every
// length-prefixed argument must fit in the pickle, since LibTorch's unpickler reserves the length
// a string claims before reading it (4 GiB from a 1 KiB file, found by the same fuzzer). It
// decompresses nothing and does not depend on LibTorch.
//
//   absl::Status st = CheckArchive(bytes, /*max_uncompressed_bytes=*/int64_t{16} << 30);
//   if (!st.ok()) ...  // InvalidArgumentError: what is wrong, with the byte offset
#ifndef SENTIER_RUNTIME_ARCHIVE_CHECK_H_
#define SENTIER_RUNTIME_ARCHIVE_CHECK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace sentier {

// The default limit on the sum of the entries' uncompressed sizes.
constexpr int64_t kDefaultMaxUncompressedBytes = int64_t{16} << 30;

absl::Status CheckArchive(absl::string_view bytes,
                          int64_t max_uncompressed_bytes = kDefaultMaxUncompressedBytes);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_ARCHIVE_CHECK_H_
