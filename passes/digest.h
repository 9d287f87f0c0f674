// digest.h — sha256 of bytes, as lowercase hex (OpenSSL EVP). Used for rule-set fingerprints
// and artifact digests.
#ifndef SENTIER_PASSES_DIGEST_H_
#define SENTIER_PASSES_DIGEST_H_

#include <string>

#include "absl/strings/string_view.h"

namespace sentier {

// Sha256Hex: the sha256 digest of `data`, 64 lowercase hex characters.
std::string Sha256Hex(absl::string_view data);

}  // namespace sentier

#endif  // SENTIER_PASSES_DIGEST_H_
