// sentierd — the Sentier daemon: watches a model registry, optimizes every new version in a
// child process, validates it and publishes it crash-safely.
//
//   sentierd --registry=REG --output=OUT [--rules=PATH[,PATH...]] [--poll_interval_ms=2000]
//            [--once] [--workers=1] [--device=auto|cpu|cuda] [--mode=inference|training|both]
//            [--job_timeout_s=600] [--metrics_port=0] [--shard=i/n] [--max_model_bytes=N]
//            [--shutdown_grace_s=30] [--select_rules=auto|on|off] [--memory_margin=0.01]
//            [--param_layout=original|stacked]
//
// Registry (read-only): REG/<model>/<version>/{model.pt,inputs.pt}; see
// runtime/daemon/registry_watcher.h for names, settling and refusals. An optional
// REG/<model>/sentier.json sets per-model options over the flags: {"param_layout": "stacked"}
// (or "original"); any other key or value rejects the model's versions with the reason.
// Output: OUT/<model>/<version>/{model.pt,report.json} (no model.pt when rejected),
// OUT/.sentierd/state.json (progress), OUT/.sentierd/rules-<fp>/ (snapshots of the good rule
// sets the jobs load), OUT/LOCK (flock; one daemon per OUT), OUT/.tmp-* (staging; removed at
// start-up).
//
// Exit codes:
//   0  --once pass completed (whatever the outcomes), or stopped by SIGTERM/SIGINT
//   1  internal error
//   2  bad flags: unknown flag, missing --registry/--output, bad --shard/--mode/--device/
//      --select_rules/--param_layout/--workers/--poll_interval_ms, --device=cuda on a build without CUDA, or
//      the rule set fails to load at start-up (there is no previous good rule set)
//   3  OUT is locked by another sentierd ("output '<OUT>' is locked by another sentierd")
//   4  registry unreadable ("registry unreadable: cannot read '<REG>': ...") or output
//      unwritable ("output unwritable: ...")
//
// Messages (glog on stderr; every line about a version starts with "[model/version]"):
//   [m/v] published <status>: <reason> (…)                one line per job
//   [m/v] job: rejected: <reason>                          from the job process
//   [m/v] rejected: job process crashed (signal N: …) / exited with status N / timed out after Ns
//   [m/v] kept the earlier artifact '…': the re-run was rejected
//   [m/v] job: cannot write the output: <path>: No space left on device (or another errno)
//   [m/v] output not written (…); retried in N s             nothing recorded or published;
//   [m/v] publish failed: …; retried in N s                  N = 1 s, doubling up to 60 s
//   [m/v] refused: <file> is not readable (Permission denied) | is a symlink leading outside
//         the registry | has N bytes, above
//         --max_model_bytes=M | is not a regular file
//   registry: ignoring '<path>': model names must match … / version directories must be named
//         by a positive number without leading zeros / a symlink leading outside the registry
//   rules: <file>:<line>:<col>: <message>; keeping the previous rule set <fp>
//   rules: loaded N rules, fingerprint <fp>
//   state: corrupt state file '<path>': …; rebuilding from published reports
// Job reasons (report.json "reason"): "load failure: …" (names the file), "validation failure
// on sample_inputs|random_inputs (outputs|outputs and gradients): …", "optimizer error: …",
// "crash: …", "job process crashed …", "timed out after N s", "rule selection failed: …",
// "refused: …", "bad sentier.json: …"; unchanged (original published): "No rule applied …", "No set of rules made the
// model faster on cuda[ within the peak-memory bound] …", "The optimized model was not faster on
// the GPU …", "The optimized model needed more peak GPU memory …".
// At the end of --once, one line per model on stdout:
//   sentierd: <model>: v1 optimized, v2 unchanged, …; latest v2 (architecture changed)
//
// Hidden flags (job child): --job --job_model --job_version --job_source --job_stage
// --job_rules --job_device (and --mode, --select_rules=on|off, --memory_margin). Test hooks
// (env): SENTIERD_TEST_CRASH_MODEL=<model> aborts that model's job,
// SENTIERD_TEST_HANG_MODEL=<model> hangs it, SENTIERD_TEST_PUBLISH_DELAY_MS=<ms> sleeps before
// each publishing rename (read here, passed to the manager as an option).
//
// This file parses and checks the flags, builds ManagerOptions, serves /metrics, forwards
// signals through a self-pipe and maps the manager's status to the exit code (ExitCodeFor); the
// work is runtime/daemon/daemon_manager.h's.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gflags/gflags.h>
#include <glog/logging.h>
#ifndef SENTIER_NO_HTTPLIB
#include <httplib.h>
#endif

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/daemon/daemon_manager.h"
#include "runtime/daemon/optimize_job.h"
#include "runtime/daemon/registry_watcher.h"
#include "tools/flags.h"

DEFINE_string(registry, "", "model registry root: REG/<model>/<version>/{model.pt,inputs.pt}");
DEFINE_string(output, "", "output root (owned by this daemon)");
DEFINE_string(rules, "", "comma-separated rule files or directories (default: shipped library)");
DEFINE_int32(poll_interval_ms, 2000, "registry poll interval");
DEFINE_bool(once, false, "process everything pending, print a per-model summary, exit");
DEFINE_int32(workers, 1, "job processes run at the same time");
DEFINE_string(device, "auto", "auto|cpu|cuda");
DEFINE_string(mode, "both", "validation mode: inference|training|both");
DEFINE_string(select_rules, "auto",
              "auto|on|off: before optimizing, keep only the rules that make a step faster on the "
              "device within --memory_margin (timed ablation); auto = on with cuda");
DEFINE_string(param_layout, "original",
              "original|stacked: how published artifacts store the parameters the batching rules "
              "stack (see sentier_opt --param_layout); REG/<model>/sentier.json overrides it");
DEFINE_double(memory_margin, 0.01,
              "on cuda: an optimized model whose timed step needs more peak memory than the "
              "original's by more than this fraction is not published (negative: not weighed)");
DEFINE_int32(job_timeout_s, 600, "a job running longer is killed and rejected");
DEFINE_int32(metrics_port, 0, "serve /metrics and /healthz on this port (0: off)");
DEFINE_string(shard, "", "i/n: only models whose name hashes to shard i of n");
DEFINE_int64(max_model_bytes, 4LL << 30, "refuse model.pt/inputs.pt above this size (0: none)");
DEFINE_int32(shutdown_grace_s, 30, "on SIGTERM/SIGINT, how long running jobs may finish");
// Hidden: the job child.
DEFINE_bool(job, false, "(internal) run one job");
DEFINE_string(job_model, "", "(internal)");
DEFINE_int64(job_version, 0, "(internal)");
DEFINE_string(job_source, "", "(internal)");
DEFINE_string(job_stage, "", "(internal)");
DEFINE_string(job_rules, "", "(internal)");
DEFINE_string(job_device, "cpu", "(internal)");

namespace sentier {
namespace {

constexpr int kOk = 0;
constexpr int kInternal = 1;
constexpr int kBadFlags = 2;
constexpr int kLocked = 3;
constexpr int kUnavailable = 4;

int Fail(int code, const std::string& msg) {
  std::cerr << "sentierd: " << msg << "\n";
  return code;
}

// ExitCodeFor: the manager's documented status codes (DaemonManager::Start and Run) -> exit code.
int ExitCodeFor(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kOk: return kOk;
    case absl::StatusCode::kInvalidArgument: return kBadFlags;
    case absl::StatusCode::kFailedPrecondition: return kLocked;
    case absl::StatusCode::kUnavailable: return kUnavailable;
    default: return kInternal;
  }
}

// ---- signals: a self-pipe; the handler only writes one byte.
int g_pipe[2] = {-1, -1};
void OnSignal(int sig) {
  int saved = errno;
  char c = static_cast<char>(sig);
  (void)!::write(g_pipe[1], &c, 1);
  errno = saved;
}

// ResolvedDevice: where jobs validate and time: --device, with auto = cuda when available.
std::string ResolvedDevice() {
  if (FLAGS_device == "cuda") return "cuda";
  if (FLAGS_device == "auto" && CudaAvailable()) return "cuda";
  return "cpu";
}

// OptionsFromFlags: checks the flags and builds the manager's options; exit code 2 on a bad flag.
int OptionsFromFlags(ManagerOptions* o) {
  int shard_index = 0, shard_count = 1;
  if (!FLAGS_shard.empty() && !ParseShard(FLAGS_shard, &shard_index, &shard_count)) {
    return Fail(kBadFlags, absl::StrCat("--shard='", FLAGS_shard, "' must be i/n with 0 <= i < n"));
  }
  if (FLAGS_registry.empty()) return Fail(kBadFlags, "--registry is required (see --help)");
  if (FLAGS_output.empty()) return Fail(kBadFlags, "--output is required (see --help)");
  if (FLAGS_mode != "inference" && FLAGS_mode != "training" && FLAGS_mode != "both") {
    return Fail(kBadFlags, absl::StrCat("--mode='", FLAGS_mode,
                                        "' must be inference, training or both"));
  }
  if (FLAGS_param_layout != "original" && FLAGS_param_layout != "stacked") {
    return Fail(kBadFlags, absl::StrCat("--param_layout='", FLAGS_param_layout, "' must be original or stacked"));
  }
  if (FLAGS_select_rules != "auto" && FLAGS_select_rules != "on" && FLAGS_select_rules != "off") {
    return Fail(kBadFlags, absl::StrCat("--select_rules='", FLAGS_select_rules, "' must be auto, on or off"));
  }
  if (FLAGS_device != "auto" && FLAGS_device != "cpu" && FLAGS_device != "cuda") {
    return Fail(kBadFlags, absl::StrCat("--device='", FLAGS_device, "' must be auto, cpu or cuda"));
  }
  if (FLAGS_device == "cuda" && !CudaAvailable()) {
    return Fail(kBadFlags,
                "--device=cuda: this build of LibTorch has no CUDA support (or no GPU is "
                "visible); use --device=cpu or auto");
  }
  if (FLAGS_workers < 1) return Fail(kBadFlags, "--workers must be at least 1");
  if (FLAGS_poll_interval_ms < 1) return Fail(kBadFlags, "--poll_interval_ms must be positive");
  if (FLAGS_job_timeout_s < 1) return Fail(kBadFlags, "--job_timeout_s must be positive");
  if (FLAGS_max_model_bytes < 0) return Fail(kBadFlags, "--max_model_bytes must be >= 0");
  if (FLAGS_metrics_port < 0 || FLAGS_metrics_port > 65535) {
    return Fail(kBadFlags, "--metrics_port must be in 0..65535");
  }
  o->registry = FLAGS_registry;
  o->output = FLAGS_output;
  if (FLAGS_rules.empty()) {
    o->rule_paths.push_back(ShippedRulesDir());
  } else {
    o->rule_paths = absl::StrSplit(FLAGS_rules, ',', absl::SkipEmpty());
  }
  o->once = FLAGS_once;
  o->workers = FLAGS_workers;
  o->poll_interval_ms = FLAGS_poll_interval_ms;
  o->job_timeout_s = FLAGS_job_timeout_s;
  o->shutdown_grace_s = FLAGS_shutdown_grace_s;
  o->max_model_bytes = FLAGS_max_model_bytes;
  o->shard_index = shard_index;
  o->shard_count = shard_count;
  o->mode = FLAGS_mode;
  o->job_device = ResolvedDevice();
  o->memory_margin = FLAGS_memory_margin;
  o->select_rules = FLAGS_select_rules == "auto" ? o->job_device == "cuda" : FLAGS_select_rules == "on";
  o->param_layout = FLAGS_param_layout;
  if (const char* d = std::getenv("SENTIERD_TEST_PUBLISH_DELAY_MS")) {
    if (!absl::SimpleAtoi(d, &o->publish_delay_ms)) o->publish_delay_ms = 0;
  }
  return kOk;
}

int RunDaemon() {
  ManagerOptions options;
  int rc = OptionsFromFlags(&options);
  if (rc != kOk) return rc;
  DaemonManager manager(options);
  absl::Status st = manager.Start();
  if (!st.ok()) return Fail(ExitCodeFor(st), std::string(st.message()));

  if (::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return Fail(kInternal, "pipe failed");
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnSignal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGCHLD, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGXFSZ, SIG_IGN);  // a file-size limit fails the write (EFBIG) instead of killing

#ifndef SENTIER_NO_HTTPLIB
  std::unique_ptr<httplib::Server> server;
  std::thread server_thread;
  if (FLAGS_metrics_port > 0) {
    server = std::make_unique<httplib::Server>();
    server->Get("/metrics", [&manager](const httplib::Request&, httplib::Response& res) {
      res.set_content(manager.metrics().Render(), "text/plain; version=0.0.4");
    });
    server->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok\n", "text/plain");
    });
    if (!server->bind_to_port("0.0.0.0", FLAGS_metrics_port)) {
      LOG(ERROR) << "metrics: cannot listen on port " << FLAGS_metrics_port;
      server.reset();
    } else {
      server_thread = std::thread([&server] { server->listen_after_bind(); });
      LOG(INFO) << "metrics: serving /metrics and /healthz on port " << FLAGS_metrics_port;
    }
  }
#else
  if (FLAGS_metrics_port > 0) {
    LOG(ERROR) << "metrics: this build has no HTTP server (built without cpp-httplib)";
  }
#endif

  st = manager.Run(g_pipe[0]);
#ifndef SENTIER_NO_HTTPLIB
  if (server) {
    server->stop();
    server_thread.join();
  }
#endif
  if (FLAGS_once && st.ok()) {
    std::cout << manager.Summary();
    std::cout.flush();
  }
  return ExitCodeFor(st);
}

}  // namespace
}  // namespace sentier

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "sentierd --registry=REG --output=OUT [--once] [--rules=...] (see the header of "
      "tools/sentierd.cc)\nExit codes: 0 ok, 1 internal, 2 bad flags, 3 output locked, 4 registry "
      "unreadable or output unwritable.");
  std::string unknown = sentier::FindUnknownFlag(argc, argv);
  if (!unknown.empty()) {
    return sentier::Fail(sentier::kBadFlags, absl::StrCat("unknown flag '", unknown, "' (see --help)"));
  }
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (argc > 1) {
    return sentier::Fail(sentier::kBadFlags, absl::StrCat("unexpected argument '", argv[1], "'"));
  }
  FLAGS_logtostderr = true;
  google::InitGoogleLogging("sentierd");
  if (FLAGS_job) {
    sentier::JobSpec spec;
    spec.model = FLAGS_job_model;
    spec.version = FLAGS_job_version;
    spec.source_dir = FLAGS_job_source;
    spec.stage_dir = FLAGS_job_stage;
    spec.rules_dir = FLAGS_job_rules;
    spec.device = FLAGS_job_device;
    spec.memory_margin = FLAGS_memory_margin;
    spec.select_rules = FLAGS_select_rules == "on";
    spec.param_layout = FLAGS_param_layout;
    spec.mode = FLAGS_mode;
    return sentier::RunOptimizeJob(spec);
  }
  try {
    return sentier::RunDaemon();
  } catch (const std::exception& e) {
    return sentier::Fail(sentier::kInternal, absl::StrCat("internal error: ", e.what()));
  }
}
