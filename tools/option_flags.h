// option_flags.h — the one flag set of the pipeline options (runtime/pipeline/options.h), shared
// by sentier_opt, sentierd and model_bench: one flag per option, named as the option (--mode,
// --gate, --param_layout, --device, the memory policy, --timing, ...; docs/options.md). A tool's
// own flags stay in its own file.
//
// The gate's older flags are aliases: sentier_opt's --cost=measure|none is --gate=on|off and
// sentierd's --select_rules=auto|on|off is --gate; each use adds a notice, which the tool logs once.
//
//   auto flags = PipelineOptionsFromFlags(Tool::kSentierd, CudaAvailable());
//   if (!flags.ok()) return Fail(2, flags.status().message());   // "--mode must be ..."
//   for (const std::string& n : flags->notices) LOG(WARNING) << n;
#ifndef SENTIER_TOOLS_OPTION_FLAGS_H_
#define SENTIER_TOOLS_OPTION_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/pipeline/options.h"

namespace sentier {

struct FlagOptions {
  PipelineOptions options;
  std::vector<std::string> notices;  // an old flag name was used: what to use instead
};

// PipelineOptionsFromFlags: the shared flags over DefaultOptions(tool), with "auto" device and
// timing resolved for this LibTorch (`cuda_available`). InvalidArgument naming the flag:
// "--mode must be training or inference, not 'bogus'", "--max_memory_share must be in (0, 1]",
// ...
absl::StatusOr<FlagOptions> PipelineOptionsFromFlags(Tool tool, bool cuda_available);

}  // namespace sentier

#endif  // SENTIER_TOOLS_OPTION_FLAGS_H_
