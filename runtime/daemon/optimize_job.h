// optimize_job.h — the work of one daemon job (load, optimize, validate, save), run inside the
// job child process, plus the few torch-backed queries the daemon parent needs. This header has
// no torch includes: optimize_job.cc is the daemon's only translation unit that includes torch.
//
//   JobSpec spec;  // PipelineOptions: mode, device, gate, memory policy, ...
//   spec.model = "ranker"; spec.version = 2; spec.source_dir = ".../ranker/2";
//   spec.stage_dir = "OUT/.tmp-ranker-2-…"; spec.rules_dir = "OUT/.sentierd/rules-…";
//   int rc = RunOptimizeJob(spec);   // writes stage_dir/job.json (+ model.pt unless rejected)
#ifndef SENTIER_RUNTIME_DAEMON_OPTIMIZE_JOB_H_
#define SENTIER_RUNTIME_DAEMON_OPTIMIZE_JOB_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/options_enums.h"
#include "runtime/pipeline/options.h"

namespace sentier {

// JobSpec: one job: which version, where it writes, and the pipeline options it runs with
// (runtime/pipeline/options.h: the daemon's flags; the job lays REG/<model>/sentier.json over
// them). The child gets the options as one JSON value (--job_options: EncodeOptions).
struct JobSpec : PipelineOptions {
  std::string model;
  int64_t version = 0;
  std::string source_dir;  // REGISTRY/<model>/<version>
  std::string stage_dir;   // where to write model.pt and job.json
  std::string rules_dir;   // snapshot of the rule set to use
  // The published report.json of the latest earlier version decided under the same rules (empty:
  // none): its decision is reused where the architecture and options are the same.
  std::string reuse_report;
  int64_t reuse_version = 0;
};

// kJobExitOutputFailed: the job's exit status when it could not write its output (model.pt or
// job.json in the staging directory: disk full, quota, I/O error). The daemon records nothing for
// the version then and retries it at a later poll.
constexpr int kJobExitOutputFailed = 75;

// RunOptimizeJob: does the job and writes stage_dir/job.json with at least "status" (optimized |
// unchanged | rejected) and "reason"; model.pt only when not rejected. Returns 0 when job.json
// was written, kJobExitOutputFailed when the output could not be written. (Crashing or hanging
// jobs are simulated outside this function: a fake JobLauncher in daemon_manager_test, a
// --job_command wrapper in the end-to-end tests.)
int RunOptimizeJob(const JobSpec& spec);

// LoadRulesFingerprint: parses and compiles the rule files; the rule set's fingerprint and
// rule count, or the parse error (file:line:col: message).
struct RulesInfo {
  std::string fingerprint;
  int64_t rules = 0;
};
absl::StatusOr<RulesInfo> LoadRulesFingerprint(const std::vector<std::string>& paths);

// ShippedRulesDir: the rule library shipped with the binary (see DefaultRulesDir).
std::string ShippedRulesDir();

// CudaAvailable: whether this LibTorch build can use a CUDA device.
bool CudaAvailable();

}  // namespace sentier

#endif  // SENTIER_RUNTIME_DAEMON_OPTIMIZE_JOB_H_
