// model_config.h — per-model options in the registry: REG/<model>/sentier.json, an overlay on the
// daemon's pipeline options (runtime/pipeline/options.h, ApplyModelConfigJson):
//   {"param_layout": "stacked", "mode": "training", "timing": "executor"}
// The keys a model's owner may set, what each means and the file's strictness: docs/daemon.md
// and docs/options.md. A key left out keeps the daemon's flag.
//
//   ModelConfig config = daemon_options;                   // the daemon's flags
//   absl::Status s = ApplyModelConfigJson(text, &config);  // InvalidArgument: "unknown key ..."
#ifndef SENTIER_RUNTIME_DAEMON_MODEL_CONFIG_H_
#define SENTIER_RUNTIME_DAEMON_MODEL_CONFIG_H_

#include "runtime/pipeline/options.h"

namespace sentier {

// The file's name inside REG/<model>/.
constexpr char kModelConfigFile[] = "sentier.json";

// ModelConfig: the options one model's versions are built with.
using ModelConfig = PipelineOptions;

}  // namespace sentier

#endif  // SENTIER_RUNTIME_DAEMON_MODEL_CONFIG_H_
