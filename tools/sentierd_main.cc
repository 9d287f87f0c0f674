// sentierd_main.cc — sentierd's main (usage, exit codes and messages: tools/sentierd.cc).
//
// This file parses and checks the flags, builds ManagerOptions, serves /metrics, /healthz and
// /readyz (MetricsServer), forwards signals through a self-pipe and maps the manager's status to
// the exit code (ExitCodeFor); the work is runtime/daemon/daemon_manager.h's.
#include "tools/sentierd_main.h"

#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gflags/gflags.h>
#include <glog/logging.h>
#include <nlohmann/json.hpp>
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
#include "runtime/daemon/shard_spec.h"
#include "runtime/options_enums.h"
#include "runtime/pipeline/options.h"
#include "runtime/progress_deadline.h"
#include "tools/flags.h"
#include "tools/option_flags.h"

DEFINE_string(registry, "", "model registry root: REG/<model>/<version>/{model.pt,inputs.pt}");
DEFINE_string(output, "", "output root (owned by this daemon)");
DEFINE_string(rules, "", "comma-separated rule files or directories (default: shipped library)");
DEFINE_int32(poll_interval_ms, 2000, "registry poll interval");
DEFINE_bool(once, false, "process everything pending, print a per-model summary, exit");
DEFINE_int32(workers, 1, "job processes run at the same time");
DEFINE_int32(job_timeout_s, 600, "a job running longer is killed and rejected");
DEFINE_int32(metrics_port, 0, "serve /metrics, /healthz and /readyz on this port (0: off)");
DEFINE_string(metrics_address, "127.0.0.1",
              "the address /metrics, /healthz and /readyz listen on (only there; 0.0.0.0: all)");
DEFINE_string(shard, "",
              "i/n: one of n replicas sharing --output: only models whose name hashes to shard i "
              "(each version claimed before its job, published once; see README, Replicas); "
              "auto: i is the replica's "
              "ordinal (SENTIER_SHARD_INDEX, else the host name's trailing -N, as StatefulSet "
              "pods are named) and n is --shard_count (else SENTIER_SHARD_COUNT)");
DEFINE_int32(shard_count, 0,
             "with --shard=auto: the number of shards (replicas); 0: SENTIER_SHARD_COUNT");
DEFINE_int64(max_model_bytes, 4LL << 30, "refuse model.pt/inputs.pt above this size (0: none)");
DEFINE_int32(shutdown_grace_s, 30, "on SIGTERM/SIGINT, how long running jobs may finish");
DEFINE_string(job_command, "",
              "program that runs one job, given sentierd's --job flags (a wrapper that ends by "
              "exec'ing sentierd); default: this binary");
// Hidden: the job child.
DEFINE_bool(job, false, "(internal) run one job");
DEFINE_string(job_model, "", "(internal)");
DEFINE_int64(job_version, 0, "(internal)");
DEFINE_string(job_source, "", "(internal)");
DEFINE_string(job_stage, "", "(internal)");
DEFINE_string(job_rules, "", "(internal)");
DEFINE_string(job_options, "{}", "(internal) the pipeline options, as EncodeOptions writes them");
DEFINE_string(job_reuse_report, "", "(internal)");
DEFINE_int64(job_reuse_version, 0, "(internal)");

namespace sentier {
namespace {

constexpr int kOk = 0;
constexpr int kInternal = 1;
constexpr int kBadFlags = 2;
constexpr int kLocked = 3;
constexpr int kUnavailable = 4;
constexpr int kMetricsUnavailable = 5;

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

// OptionsFromFlags: checks the flags and builds the manager's options; exit code 2 on a bad flag.
int OptionsFromFlags(ManagerOptions* o) {
  absl::StatusOr<ShardSpec> shard =
      ResolveShard(FLAGS_shard, FLAGS_shard_count, ShardEnvFromProcess());
  if (!shard.ok()) return Fail(kBadFlags, std::string(shard.status().message()));
  if (FLAGS_registry.empty()) return Fail(kBadFlags, "--registry is required (see --help)");
  if (FLAGS_output.empty()) return Fail(kBadFlags, "--output is required (see --help)");
  absl::StatusOr<FlagOptions> pipeline = PipelineOptionsFromFlags(Tool::kSentierd, CudaAvailable());
  if (!pipeline.ok()) return Fail(kBadFlags, std::string(pipeline.status().message()));
  for (const std::string& notice : pipeline->notices) LOG(WARNING) << notice;
  static_cast<PipelineOptions&>(*o) = pipeline->options;
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
  o->shard_index = shard->index;
  o->shard_count = shard->count;
  o->replica = !FLAGS_shard.empty();
  o->job_command = FLAGS_job_command;
  return kOk;
}

// MetricsServer: /metrics, /healthz and /readyz on --metrics_address:--metrics_port (cpp-httplib,
// its own threads), when --metrics_port is set. The handlers read only DaemonMetrics, which is
// thread-safe.
class MetricsServer {
 public:
  ~MetricsServer() { Stop(); }

  // Start: binds and starts serving; kMetricsUnavailable with "cannot serve metrics on ADDR:PORT:
  // <why>" when the address cannot be bound (taken, not an address of this machine, a bad name).
  int Start(DaemonMetrics* metrics) {
    if (FLAGS_metrics_port == 0) return kOk;
    const std::string where = absl::StrCat(FLAGS_metrics_address, ":", FLAGS_metrics_port);
#ifndef SENTIER_NO_HTTPLIB
    // Resolved here first, so that a bad name is reported as such (the server only says false).
    struct addrinfo hints;
    std::memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    struct addrinfo* found = nullptr;
    const int gai = ::getaddrinfo(FLAGS_metrics_address.c_str(),
                                  std::to_string(FLAGS_metrics_port).c_str(), &hints, &found);
    if (gai != 0) {
      return Fail(kMetricsUnavailable,
                  absl::StrCat("cannot serve metrics on ", where, ": ", ::gai_strerror(gai)));
    }
    ::freeaddrinfo(found);
    server_ = std::make_unique<httplib::Server>();
    // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, with which a second daemon
    // would bind a port already in use and share its scrapes instead of failing.
    server_->set_socket_options([](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    server_->Get("/metrics", [metrics](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics->Render(), "text/plain; version=0.0.4; charset=utf-8");
    });
    server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok\n", "text/plain");
    });
    server_->Get("/readyz", [metrics](const httplib::Request&, httplib::Response& res) {
      const std::string why = metrics->NotReadyReason();
      res.status = why.empty() ? 200 : 503;
      res.set_content(why.empty() ? "ready\n" : why + "\n", "text/plain");
    });
    errno = 0;
    if (!server_->bind_to_port(FLAGS_metrics_address, FLAGS_metrics_port)) {
      const int err = errno;
      server_.reset();
      return Fail(kMetricsUnavailable,
                  absl::StrCat("cannot serve metrics on ", where, ": ",
                               err != 0 ? std::strerror(err) : "the address cannot be bound"));
    }
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    // cpp-httplib's stop() does nothing before the listening loop runs (and join would wait for
    // ever): wait until it does (bounded; it starts at once).
    for (int i = 0; i < 10000 && !server_->is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    LOG(INFO) << "metrics: serving /metrics, /healthz and /readyz on " << where;
    return kOk;
#else
    (void)metrics;
    return Fail(kMetricsUnavailable, absl::StrCat("cannot serve metrics on ", where,
                                                  ": this build has no HTTP server (built "
                                                  "without cpp-httplib)"));
#endif
  }

  void Stop() {
#ifndef SENTIER_NO_HTTPLIB
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
    server_.reset();
#endif
  }

 private:
#ifndef SENTIER_NO_HTTPLIB
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
#endif
};

int RunDaemon(const OptionsHook& customize) {
  // Before anything is written (the lock, state, stale temp entries at start-up): a file-size
  // limit must fail a write (EFBIG), not kill the daemon, from its first write on.
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGXFSZ, SIG_IGN);
  ManagerOptions options;
  int rc = OptionsFromFlags(&options);
  if (rc != kOk) return rc;
  if (customize) customize(&options);
  DaemonManager manager(options);
  // The endpoints listen before Start (which may take long over a large output): /healthz answers
  // from the start, /readyz says why the daemon is not ready yet.
  MetricsServer server;
  rc = server.Start(&manager.metrics());
  if (rc != kOk) return rc;
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

  st = manager.Run(g_pipe[0]);
  server.Stop();
  if (FLAGS_once && st.ok()) {
    std::cout << manager.Summary();
    std::cout.flush();
  }
  return ExitCodeFor(st);
}

}  // namespace

int SentierdMain(int argc, char** argv, const OptionsHook& customize) {
  gflags::SetUsageMessage(
      "sentierd --registry=REG --output=OUT [--once] [--rules=...] (see the header of "
      "tools/sentierd.cc)\nExit codes: 0 ok, 1 internal, 2 bad flags, 3 output locked, 4 registry "
      "unreadable or output unwritable, 5 metrics address:port cannot be bound.");
  std::string unknown = FindUnknownFlag(argc, argv);
  if (!unknown.empty()) {
    return Fail(kBadFlags, absl::StrCat("unknown flag '", unknown, "' (see --help)"));
  }
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (argc > 1) {
    return Fail(kBadFlags, absl::StrCat("unexpected argument '", argv[1], "'"));
  }
  FLAGS_logtostderr = true;
  google::InitGoogleLogging("sentierd");
  if (FLAGS_job) {
    // The daemon (ExecJobLauncher) spells these; a bad one is a bad flag all the same.
    nlohmann::json encoded = nlohmann::json::parse(FLAGS_job_options, nullptr, /*allow_exceptions=*/false);
    absl::StatusOr<PipelineOptions> options =
        encoded.is_discarded() ? absl::InvalidArgumentError("--job_options is not valid JSON") : DecodeOptions(encoded);
    if (!options.ok()) return Fail(kBadFlags, absl::StrCat("--job_options: ", options.status().message()));
    JobSpec spec;
    static_cast<PipelineOptions&>(spec) = *options;
    spec.model = FLAGS_job_model;
    spec.version = FLAGS_job_version;
    spec.source_dir = FLAGS_job_source;
    spec.stage_dir = FLAGS_job_stage;
    spec.rules_dir = FLAGS_job_rules;
    spec.reuse_report = FLAGS_job_reuse_report;
    spec.reuse_version = FLAGS_job_reuse_version;
    // A timing thread left behind (runtime/progress_deadline.h) ends the job through _exit.
    return FinishProcess(RunOptimizeJob(spec));
  }
  try {
    return RunDaemon(customize);
  } catch (const std::exception& e) {
    return Fail(kInternal, absl::StrCat("internal error: ", e.what()));
  }
}

}  // namespace sentier
