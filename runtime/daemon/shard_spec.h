// shard_spec.h — which shard of the registry one sentierd replica takes (--shard, --shard_count).
//
// Replicas over one registry split its models by a hash of the model name (RegistryWatcher's
// shard_index/shard_count). The spec is either explicit, `--shard=i/n`, or `--shard=auto`: the
// index from SENTIER_SHARD_INDEX when set, else from the trailing `-<ordinal>` of the host name
// (Kubernetes StatefulSet pods are named `<name>-<ordinal>`), and the count from
// `--shard_count` when given, else SENTIER_SHARD_COUNT. Example:
//
//   absl::StatusOr<ShardSpec> s = ResolveShard("auto", 0, ShardEnvFromProcess());
//   // host "sentierd-2", SENTIER_SHARD_COUNT=4  ->  {index 2, count 4}
#ifndef SENTIER_RUNTIME_DAEMON_SHARD_SPEC_H_
#define SENTIER_RUNTIME_DAEMON_SHARD_SPEC_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sentier {

struct ShardSpec {
  int index = 0;
  int count = 1;
};

// ShardEnv: what --shard=auto reads from the process (ShardEnvFromProcess) or a test.
struct ShardEnv {
  std::string hostname;
  std::optional<std::string> shard_index;  // SENTIER_SHARD_INDEX
  std::optional<std::string> shard_count;  // SENTIER_SHARD_COUNT
};

// ShardEnvFromProcess: gethostname() and the two environment variables (empty ones count as
// unset).
ShardEnv ShardEnvFromProcess();

// OrdinalFromHostname: N of a host name ending in "-N" (N decimal, at most 9 digits), else
// nullopt ("sentierd-3" -> 3, "sentierd" -> nullopt, "web-03" -> 3).
std::optional<int> OrdinalFromHostname(absl::string_view hostname);

// ResolveShard: the shard of this replica from --shard (`shard_flag`: "", "i/n" or "auto") and
// --shard_count (`shard_count_flag`, 0 = not given).
// "" -> {0, 1}; "i/n" -> as given (0 <= i < n). "auto" -> as described above.
// Errors (InvalidArgumentError, the message names the source of each number and a hint):
// a malformed spec or variable, --shard_count without --shard=auto, no index or no count for
// auto, an index out of range of the count.
absl::StatusOr<ShardSpec> ResolveShard(absl::string_view shard_flag, int shard_count_flag,
                                       const ShardEnv& env);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_DAEMON_SHARD_SPEC_H_
