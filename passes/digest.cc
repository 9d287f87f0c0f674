// digest.cc — sha256 through OpenSSL's EVP interface.
#include "passes/digest.h"

#include <openssl/evp.h>

namespace sentier {

std::string Sha256Hex(absl::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int k = 0; k < len; ++k) {
    out.push_back(kHex[md[k] >> 4]);
    out.push_back(kHex[md[k] & 15]);
  }
  return out;
}

}  // namespace sentier
