// shard_spec.cc — --shard=i/n and --shard=auto (see shard_spec.h).
#include "runtime/daemon/shard_spec.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/daemon/registry_watcher.h"

namespace sentier {
namespace {

// ParseCount: a non-negative decimal of at most 9 digits (no sign, no spaces).
std::optional<int> ParseNonNegative(absl::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  int v = 0;
  if (!absl::SimpleAtoi(s, &v)) return std::nullopt;
  return v;
}

std::optional<std::string> NonEmptyEnv(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

}  // namespace

ShardEnv ShardEnvFromProcess() {
  ShardEnv env;
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) == 0) env.hostname = host;
  env.shard_index = NonEmptyEnv("SENTIER_SHARD_INDEX");
  env.shard_count = NonEmptyEnv("SENTIER_SHARD_COUNT");
  return env;
}

std::optional<int> OrdinalFromHostname(absl::string_view hostname) {
  // A fully qualified name: the ordinal ends the first label ("sentierd-2.sentierd.ns.svc").
  hostname = hostname.substr(0, hostname.find('.'));
  size_t dash = hostname.rfind('-');
  if (dash == absl::string_view::npos) return std::nullopt;
  return ParseNonNegative(hostname.substr(dash + 1));
}

absl::StatusOr<ShardSpec> ResolveShard(absl::string_view shard_flag, int shard_count_flag,
                                       const ShardEnv& env) {
  if (shard_count_flag < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shard_count=", shard_count_flag, " must be positive"));
  }
  if (shard_flag != "auto") {
    if (shard_count_flag != 0) {
      return absl::InvalidArgumentError(
          "--shard_count is only read with --shard=auto (--shard=i/n names the count itself)");
    }
    ShardSpec spec;
    if (!shard_flag.empty() && !ParseShard(shard_flag, &spec.index, &spec.count)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--shard='", shard_flag, "' must be i/n with 0 <= i < n, or auto"));
    }
    return spec;
  }

  // The index: SENTIER_SHARD_INDEX, else the host name's ordinal.
  std::string index_source;
  std::optional<int> index;
  if (env.shard_index.has_value()) {
    index = ParseNonNegative(*env.shard_index);
    if (!index.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--shard=auto: SENTIER_SHARD_INDEX='", *env.shard_index,
          "' must be a non-negative integer"));
    }
    index_source = "SENTIER_SHARD_INDEX";
  } else {
    index = OrdinalFromHostname(env.hostname);
    if (!index.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--shard=auto: no shard index: the host name '", env.hostname,
          "' does not end in -<ordinal> (as StatefulSet pods' names do) and SENTIER_SHARD_INDEX "
          "is not set"));
    }
    index_source = absl::StrCat("host name '", env.hostname, "'");
  }

  // The count: --shard_count, else SENTIER_SHARD_COUNT.
  std::string count_source;
  int count = 0;
  if (shard_count_flag > 0) {
    count = shard_count_flag;
    count_source = "--shard_count";
  } else if (env.shard_count.has_value()) {
    std::optional<int> c = ParseNonNegative(*env.shard_count);
    if (!c.has_value() || *c == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--shard=auto: SENTIER_SHARD_COUNT='", *env.shard_count, "' must be a positive integer"));
    }
    count = *c;
    count_source = "SENTIER_SHARD_COUNT";
  } else {
    return absl::InvalidArgumentError(
        "--shard=auto: no shard count: pass --shard_count=N or set SENTIER_SHARD_COUNT (the "
        "number of replicas)");
  }

  if (*index >= count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shard=auto: shard index ", *index, " (from ", index_source,
        ") is out of range for a shard count of ", count, " (from ", count_source,
        "); the replica count and the shard count must agree"));
  }
  return ShardSpec{*index, count};
}

}  // namespace sentier
