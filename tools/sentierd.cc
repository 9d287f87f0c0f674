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
// each publishing rename.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gflags/gflags.h>
#include <glog/logging.h>
#ifndef SENTIER_NO_HTTPLIB
#include <httplib.h>
#endif
#include <nlohmann/json.hpp>

#include "tools/flags.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "passes/digest.h"
#include "runtime/daemon/daemon_state.h"
#include "runtime/file_util.h"
#include "runtime/report_schema.h"
#include "runtime/daemon/job_planner.h"
#include "runtime/daemon/optimize_job.h"
#include "runtime/daemon/publisher.h"
#include "runtime/daemon/registry_watcher.h"

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

using Clock = std::chrono::steady_clock;

int Fail(int code, const std::string& msg) {
  std::cerr << "sentierd: " << msg << "\n";
  return code;
}

std::string Tag(const std::string& model, int64_t version) {
  return absl::StrCat("[", model, "/", version, "] ");
}

// ---- signals: a self-pipe; the handler only writes one byte.
int g_pipe[2] = {-1, -1};
void OnSignal(int sig) {
  int saved = errno;
  char c = static_cast<char>(sig);
  (void)!::write(g_pipe[1], &c, 1);
  errno = saved;
}

// ---- metrics
struct Metrics {
  std::mutex mu;
  int64_t seen = 0, optimized = 0, unchanged = 0, rejected = 0, output_errors = 0;
  double job_seconds_sum = 0;
  int64_t job_count = 0;
  int64_t queue_depth = 0, in_flight = 0;
  double last_poll_unix = 0;
  std::string Render() {
    std::lock_guard<std::mutex> l(mu);
    std::string s;
    auto counter = [&](const char* name, const char* help, int64_t v) {
      absl::StrAppend(&s, "# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n", name, " ",
                      v, "\n");
    };
    // Doubles at full precision (StrAppend's 6 digits would give Unix times a 1,000 s grain).
    auto number = [](double v) { return absl::StrFormat("%.17g", v); };
    auto gauge = [&](const char* name, const char* help, double v) {
      absl::StrAppend(&s, "# HELP ", name, " ", help, "\n# TYPE ", name, " gauge\n", name, " ",
                      number(v), "\n");
    };
    counter("sentierd_versions_seen_total", "Versions taken for processing.", seen);
    counter("sentierd_versions_optimized_total", "Versions published optimized.", optimized);
    counter("sentierd_versions_unchanged_total", "Versions published unchanged.", unchanged);
    counter("sentierd_versions_rejected_total", "Versions rejected.", rejected);
    counter("sentierd_output_errors_total",
            "Jobs whose output could not be written (disk full, I/O error); retried.", output_errors);
    absl::StrAppend(&s,
                    "# HELP sentierd_job_duration_seconds Job wall time.\n"
                    "# TYPE sentierd_job_duration_seconds summary\n"
                    "sentierd_job_duration_seconds_sum ",
                    number(job_seconds_sum), "\nsentierd_job_duration_seconds_count ", job_count, "\n");
    gauge("sentierd_queue_depth", "Jobs waiting for a worker.", queue_depth);
    gauge("sentierd_jobs_in_flight", "Job processes running.", in_flight);
    gauge("sentierd_last_poll_timestamp_seconds", "Unix time of the last registry poll.",
          last_poll_unix);
    return s;
  }
};

// ---- rules: re-read when the files change; the last good set stays.
class RulesTracker {
 public:
  RulesTracker(std::vector<std::string> paths, std::string snapshot_root)
      : paths_(std::move(paths)), snapshot_root_(std::move(snapshot_root)) {}

  // Files: the *.rules files, in the order LoadRules reads them.
  std::vector<std::string> Files() const {
    std::vector<std::string> files;
    for (const std::string& p : paths_) {
      std::error_code ec;
      if (std::filesystem::is_directory(p, ec)) {
        std::vector<std::string> in_dir;
        for (const auto& e : std::filesystem::directory_iterator(p, ec)) {
          if (e.path().extension() == ".rules") in_dir.push_back(e.path().string());
        }
        std::sort(in_dir.begin(), in_dir.end());
        files.insert(files.end(), in_dir.begin(), in_dir.end());
      } else {
        files.push_back(p);
      }
    }
    return files;
  }

  std::string Signature() const {
    std::string sig;
    for (const std::string& f : Files()) {
      struct stat st;
      if (::stat(f.c_str(), &st) != 0) {
        absl::StrAppend(&sig, f, ":missing;");
      } else {
        absl::StrAppend(&sig, f, ":", static_cast<int64_t>(st.st_size), ":",
                        static_cast<int64_t>(st.st_mtim.tv_sec), ".", st.st_mtim.tv_nsec, ";");
      }
    }
    return sig;
  }

  // MaybeReload: true when the rule set is usable (fp_ set). Logs errors.
  bool MaybeReload() {
    std::string sig = Signature();
    if (sig == signature_) return !fp_.empty();
    signature_ = sig;
    auto info = LoadRulesFingerprint(paths_);
    if (!info.ok()) {
      LOG(ERROR) << "rules: " << info.status().message()
                 << (fp_.empty() ? "" : absl::StrCat("; keeping the previous rule set ", fp_));
      return !fp_.empty();
    }
    if (info->fingerprint == fp_) return true;
    // Snapshot the files the fingerprint was computed from, for the jobs to load.
    std::string dir = absl::StrCat(snapshot_root_, "/rules-", info->fingerprint);
    std::string tmp = absl::StrCat(snapshot_root_, "/.tmp-rules-", ::getpid());
    RemoveTree(tmp).IgnoreError();
    std::error_code ec;
    std::filesystem::create_directories(tmp, ec);
    int i = 0;
    for (const std::string& f : Files()) {
      auto text = ReadFile(f);
      if (!text.ok()) {
        LOG(ERROR) << "rules: " << text.status().message();
        return !fp_.empty();
      }
      char prefix[16];
      snprintf(prefix, sizeof(prefix), "%04d-", i++);
      WriteFileSynced(absl::StrCat(tmp, "/", prefix,
                                   std::filesystem::path(f).filename().string()),
                      *text)
          .IgnoreError();
    }
    auto snap = LoadRulesFingerprint({tmp});
    if (!snap.ok()) {
      LOG(ERROR) << "rules: changed while being read: " << snap.status().message();
      signature_.clear();
      RemoveTree(tmp).IgnoreError();
      return !fp_.empty();
    }
    RemoveTree(dir).IgnoreError();
    if (::rename(tmp.c_str(), dir.c_str()) != 0) {
      LOG(ERROR) << "rules: cannot create snapshot '" << dir << "': " << std::strerror(errno);
      return !fp_.empty();
    }
    fp_ = snap->fingerprint;
    dir_ = dir;
    LOG(INFO) << "rules: loaded " << snap->rules << " rules, fingerprint " << fp_;
    return true;
  }

  const std::string& fingerprint() const { return fp_; }
  const std::string& dir() const { return dir_; }

 private:
  std::vector<std::string> paths_;
  std::string snapshot_root_;
  std::string signature_ = "\x01";
  std::string fp_, dir_;
};

struct Running {
  Job job;
  pid_t pid = -1;
  std::string stage;
  std::string rules_fp;
  Clock::time_point start;
  bool timed_out = false;
};

// ResolvedDevice: where jobs validate and time: --device, with auto = cuda when available.
std::string ResolvedDevice() {
  if (FLAGS_device == "cuda") return "cuda";
  if (FLAGS_device == "auto" && sentier::CudaAvailable()) return "cuda";
  return "cpu";
}

// SelectRules: whether jobs time the rules and keep only those that pay (--select_rules).
bool SelectRules() {
  if (FLAGS_select_rules == "auto") return ResolvedDevice() == "cuda";
  return FLAGS_select_rules == "on";
}

class Daemon {
 public:
  int Run();

 private:
  void Reconcile();
  void Dispatch(Job job);
  void Finish(Running r, int wait_status);
  void PublishResult(const Job& job, const std::string& stage, nlohmann::json report,
                     double seconds);
  void PrintSummary();

  std::unique_ptr<RegistryWatcher> watcher_;
  std::unique_ptr<Publisher> publisher_;
  std::unique_ptr<RulesTracker> rules_;
  DaemonState state_;
  std::string state_path_;
  std::deque<Job> queue_;
  std::map<pid_t, Running> running_;
  std::set<std::string> busy_;
  Metrics metrics_;
  std::set<std::string> models_seen_;
  // Versions whose output could not be written wait before they are tried again: 1 s, doubling
  // up to 60 s, per version; forgotten once the version is recorded.
  struct Backoff {
    Clock::time_point next;
    double delay_s = 0;
  };
  std::map<std::string, Backoff> backoff_;
  double RetryLater(const std::string& key);
};

double Daemon::RetryLater(const std::string& key) {
  Backoff& b = backoff_[key];
  b.delay_s = b.delay_s == 0 ? 1.0 : std::min(2 * b.delay_s, 60.0);
  b.next = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(b.delay_s * 1000));
  return b.delay_s;
}

void Daemon::Reconcile() {
  // A publish whose state update was lost (crash between rename and state write) is adopted.
  std::error_code ec;
  for (const auto& m : std::filesystem::directory_iterator(publisher_->root(), ec)) {
    std::string model = m.path().filename().string();
    if (!IsValidModelName(model) || !m.is_directory()) continue;
    for (const auto& v : std::filesystem::directory_iterator(m.path(), ec)) {
      int64_t version = 0;
      if (!ParseVersionName(v.path().filename().string(), &version)) continue;
      auto text = ReadFile((v.path() / "report.json").string());
      if (!text.ok()) continue;
      try {
        nlohmann::json r = nlohmann::json::parse(*text);
        const VersionRecord* have = state_.Find(model, version);
        std::string sig = r.value("source_signature", "");
        std::string fp = r.value("rules_fingerprint", "");
        if (have != nullptr && have->signature == sig && have->rules_fp == fp) continue;
        VersionRecord rec;
        rec.status = r.value("status", "");
        rec.reason = r.value("reason", "");
        rec.signature = sig;
        rec.rules_fp = fp;
        rec.arch_fp = r.value("architecture_fingerprint", "");
        rec.artifact_sha = r.value("artifact_sha256", "");
        state_.Set(model, version, rec);
        LOG(INFO) << Tag(model, version) << "state: adopted the published report";
      } catch (const std::exception& e) {
        LOG(WARNING) << Tag(model, version) << "state: unreadable report.json: " << e.what();
      }
    }
  }
}

void Daemon::Dispatch(Job job) {
  const VersionInfo& v = job.source;
  {
    std::lock_guard<std::mutex> l(metrics_.mu);
    ++metrics_.seen;
  }
  auto stage = publisher_->MakeStagingDir(v.model, v.version);
  if (!stage.ok()) {
    LOG(ERROR) << Tag(v.model, v.version) << stage.status().message();
    return;
  }
  if (!v.refused_reason.empty()) {
    LOG(WARNING) << Tag(v.model, v.version) << "refused: " << v.refused_reason;
    nlohmann::json r = {{"status", "rejected"},
                        {"reason", absl::StrCat("refused: ", v.refused_reason, ".")}};
    PublishResult(job, *stage, r, 0);
    return;
  }
  LOG(INFO) << Tag(v.model, v.version) << "job started (" << job.why << ")";
  std::vector<std::string> args = {
      "sentierd", "--job", absl::StrCat("--job_model=", v.model),
      absl::StrCat("--job_version=", v.version), absl::StrCat("--job_source=", v.dir),
      absl::StrCat("--job_stage=", *stage), absl::StrCat("--job_rules=", rules_->dir()),
      absl::StrCat("--mode=", FLAGS_mode), absl::StrCat("--job_device=", ResolvedDevice()),
      absl::StrCat("--memory_margin=", FLAGS_memory_margin),
      absl::StrCat("--select_rules=", SelectRules() ? "on" : "off"),
      absl::StrCat("--param_layout=", FLAGS_param_layout)};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);  // a terminal's ^C goes to the daemon, which decides
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGCHLD, SIG_DFL);
    ::signal(SIGPIPE, SIG_DFL);
    ::signal(SIGXFSZ, SIG_IGN);  // a file-size limit fails the write (EFBIG) instead of killing
    ::execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  if (pid < 0) {
    LOG(ERROR) << Tag(v.model, v.version) << "fork failed: " << std::strerror(errno);
    publisher_->Discard(*stage);
    return;
  }
  Running r;
  r.job = std::move(job);
  r.pid = pid;
  r.stage = *stage;
  r.rules_fp = rules_->fingerprint();
  r.start = Clock::now();
  busy_.insert(r.job.Key());
  running_[pid] = std::move(r);
}

void Daemon::Finish(Running r, int wait_status) {
  double seconds = std::chrono::duration<double>(Clock::now() - r.start).count();
  if (!r.timed_out && WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == kJobExitOutputFailed) {
    // The output could not be written (the job logged why): nothing is recorded, nothing is
    // published, and the version is planned again at the next poll.
    double delay = RetryLater(r.job.Key());
    LOG(ERROR) << Tag(r.job.source.model, r.job.source.version)
               << "output not written (see the job's error above); retried in " << delay << " s";
    publisher_->Discard(r.stage);
    std::lock_guard<std::mutex> l(metrics_.mu);
    ++metrics_.output_errors;
    return;
  }
  nlohmann::json report;
  auto text = ReadFile(r.stage + "/job.json");
  bool clean_exit = WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
  if (r.timed_out) {
    report = {{"status", "rejected"},
              {"reason", absl::StrCat("timed out after ", FLAGS_job_timeout_s,
                                      " s (--job_timeout_s); the job process was killed.")}};
  } else if (!clean_exit || !text.ok()) {
    std::string how = WIFSIGNALED(wait_status)
                          ? absl::StrCat("job process crashed (signal ", WTERMSIG(wait_status),
                                         ": ", strsignal(WTERMSIG(wait_status)), ").")
                          : absl::StrCat("job process exited with status ",
                                         WEXITSTATUS(wait_status), " without a result.");
    report = {{"status", "rejected"}, {"reason", how}};
  } else {
    try {
      report = nlohmann::json::parse(*text);
    } catch (const std::exception& e) {
      report = {{"status", "rejected"}, {"reason", "job result unreadable."}};
    }
  }
  ::unlink((r.stage + "/job.json").c_str());
  if (report.value("status", "") == "rejected") ::unlink((r.stage + "/model.pt").c_str());
  report["rules_fingerprint"] = r.rules_fp;
  PublishResult(r.job, r.stage, report, seconds);
}

void Daemon::PublishResult(const Job& job, const std::string& stage, nlohmann::json report,
                           double seconds) {
  const VersionInfo& v = job.source;
  // The job writes the report (runtime/report.h); reports the daemon makes itself (a crash, a
  // time-out) get the same header, so every report.json follows runtime/report_schema.json.
  report["schema_version"] = kReportSchemaVersion;
  report["tool"] = "sentierd";
  if (!report.contains("rules_fingerprint")) report["rules_fingerprint"] = rules_->fingerprint();
  report["model"] = v.model;
  report["version"] = v.version;
  report["source_signature"] = v.signature;
  report["trigger"] = job.why;
  report["mode"] = FLAGS_mode;
  std::string arch = report.value("architecture_fingerprint", "");
  std::string prev = state_.PreviousArchFp(v.model, v.version);
  if (!arch.empty()) {
    if (prev.empty()) {
      report["architecture_changed"] = nullptr;  // no earlier version to compare with
    } else {
      report["architecture_changed"] = prev != arch;
    }
  }
  if (!report.contains("timings_ms")) report["timings_ms"] = nlohmann::json::object();
  report["timings_ms"]["job_total"] = seconds * 1000.0;
  std::string status = report.value("status", "rejected");
  std::string reason = report.value("reason", "");
  absl::Status st = WriteFileSynced(stage + "/report.json", report.dump(2) + "\n");
  if (st.ok()) {
    static int delay = [] {
      const char* d = std::getenv("SENTIERD_TEST_PUBLISH_DELAY_MS");
      int ms = 0;
      return d != nullptr && absl::SimpleAtoi(d, &ms) ? ms : 0;
    }();
    publisher_->set_delay_before_rename_ms(delay);
    st = publisher_->Publish(stage, v.model, v.version, status == "rejected");
  }
  VersionRecord rec;
  rec.status = status;
  rec.reason = reason;
  rec.signature = v.signature;
  rec.rules_fp = report.value("rules_fingerprint", "");
  rec.arch_fp = arch;
  rec.artifact_sha = report.value("artifact_sha256", "");
  if (absl::IsFailedPrecondition(st)) {
    LOG(WARNING) << Tag(v.model, v.version) << st.message() << ": " << reason;
    rec.kept_earlier = true;
    const VersionRecord* old = state_.Find(v.model, v.version);
    if (old != nullptr) {
      rec.arch_fp = old->arch_fp;
      rec.artifact_sha = old->artifact_sha;
    }
  } else if (!st.ok()) {
    double delay = RetryLater(job.Key());
    LOG(ERROR) << Tag(v.model, v.version) << "publish failed: " << st.message() << "; retried in "
               << delay << " s";
    publisher_->Discard(stage);
    return;  // not recorded: retried later
  }
  state_.Set(v.model, v.version, rec);
  backoff_.erase(job.Key());
  absl::Status saved = state_.Save(state_path_);
  if (!saved.ok()) LOG(ERROR) << "state: " << saved.message();
  {
    std::lock_guard<std::mutex> l(metrics_.mu);
    if (status == "optimized") ++metrics_.optimized;
    else if (status == "unchanged") ++metrics_.unchanged;
    else ++metrics_.rejected;
    metrics_.job_seconds_sum += seconds;
    ++metrics_.job_count;
  }
  std::string detail;
  if (report.contains("nodes_before")) {
    detail = absl::StrCat(" (", report.value("rewrites", 0), " rewrites; nodes ",
                          report.value("nodes_before", 0), " -> ", report.value("nodes_after", 0),
                          "; aten ops per forward ", report.value("aten_ops_per_forward_before", 0),
                          " -> ", report.value("aten_ops_per_forward_after", 0), ")");
  }
  LOG(INFO) << Tag(v.model, v.version) << "published " << status << ": " << reason << detail
            << " in " << static_cast<int64_t>(seconds * 1000) << " ms";
}

void Daemon::PrintSummary() {
  for (const auto& [model, versions] : state_.models()) {
    if (!models_seen_.count(model)) continue;
    std::vector<std::string> parts;
    for (const auto& [v, r] : versions) {
      parts.push_back(absl::StrCat("v", v, " ", r.status, r.kept_earlier ? " (kept earlier)" : ""));
    }
    const auto& last = *versions.rbegin();
    std::string arch;
    std::string prev = state_.PreviousArchFp(model, last.first);
    if (!prev.empty() && !last.second.arch_fp.empty()) {
      arch = prev != last.second.arch_fp ? " (architecture changed)" : " (same architecture)";
    }
    std::cout << "sentierd: " << model << ": " << absl::StrJoin(parts, ", ") << "; latest v"
              << last.first << arch << "\n";
  }
  std::cout.flush();
}

int Daemon::Run() {
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

  auto pub = Publisher::Create(FLAGS_output);
  if (!pub.ok()) return Fail(kUnavailable, std::string(pub.status().message()));
  publisher_ = std::move(*pub);
  std::string lock_path = FLAGS_output + "/LOCK";
  int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0) {
    return Fail(kUnavailable, absl::StrCat("output unwritable: cannot open '", lock_path, "': ",
                                           std::strerror(errno)));
  }
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return Fail(kLocked, absl::StrCat("output '", FLAGS_output,
                                        "' is locked by another sentierd (", lock_path, ")"));
    }
    return Fail(kUnavailable, absl::StrCat("cannot lock '", lock_path, "': ", std::strerror(errno)));
  }
  std::string pid_text = absl::StrCat(::getpid(), "\n");
  (void)!::ftruncate(lock_fd, 0);
  (void)!::pwrite(lock_fd, pid_text.data(), pid_text.size(), 0);

  WatcherOptions wopts;
  wopts.root = FLAGS_registry;
  wopts.max_model_bytes = FLAGS_max_model_bytes;
  wopts.shard_index = shard_index;
  wopts.shard_count = shard_count;
  auto watcher = RegistryWatcher::Create(wopts);
  if (!watcher.ok()) return Fail(kUnavailable, std::string(watcher.status().message()));
  watcher_ = std::move(*watcher);

  auto cleaned = publisher_->CleanStaleTemps();
  if (!cleaned.ok()) return Fail(kUnavailable, absl::StrCat("output unwritable: ", cleaned.status().message()));
  if (*cleaned > 0) LOG(INFO) << "start-up: removed " << *cleaned << " stale temp entries";
  std::string meta = FLAGS_output + "/.sentierd";
  if (::mkdir(meta.c_str(), 0755) != 0 && errno != EEXIST) {
    return Fail(kUnavailable, absl::StrCat("output unwritable: cannot create '", meta, "': ",
                                           std::strerror(errno)));
  }
  for (const auto& e : std::filesystem::directory_iterator(meta)) {
    if (absl::StartsWith(e.path().filename().string(), ".tmp-")) RemoveTree(e.path()).IgnoreError();
  }
  state_path_ = meta + "/state.json";
  auto state = DaemonState::Load(state_path_);
  if (!state.ok()) {
    LOG(ERROR) << "state: " << state.status().message() << "; rebuilding from published reports";
  } else {
    state_ = std::move(*state);
  }
  Reconcile();

  std::vector<std::string> rule_paths;
  if (FLAGS_rules.empty()) {
    rule_paths.push_back(ShippedRulesDir());
  } else {
    rule_paths = absl::StrSplit(FLAGS_rules, ',', absl::SkipEmpty());
  }
  rules_ = std::make_unique<RulesTracker>(rule_paths, meta);
  if (!rules_->MaybeReload()) return Fail(kBadFlags, "no usable rule set (see the error above)");

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
    server->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_.Render(), "text/plain; version=0.0.4");
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

  bool stopping = false;
  Clock::time_point stop_deadline;
  Clock::time_point next_poll = Clock::now();
  int polls = 0;
  bool once_planned = false;
  int exit_code = kOk;
  for (;;) {
    Clock::time_point now = Clock::now();
    if (!stopping && now >= next_poll && !(FLAGS_once && once_planned)) {
      next_poll = now + std::chrono::milliseconds(FLAGS_poll_interval_ms);
      rules_->MaybeReload();
      auto snap = watcher_->PollOnce();
      ++polls;
      {
        std::lock_guard<std::mutex> l(metrics_.mu);
        metrics_.last_poll_unix =
            std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                .count();
      }
      if (!snap.ok()) {
        LOG(ERROR) << snap.status().message();
        if (FLAGS_once) {
          exit_code = kUnavailable;
          break;
        }
      } else {
        for (const auto& [m, vs] : snap->models) models_seen_.insert(m);
        // --once: wait (a bounded number of polls) until every version has settled.
        bool plan = !FLAGS_once || (polls >= 2 && (snap->unsettled == 0 || polls >= 30));
        if (plan) {
          std::set<std::string> busy = busy_;
          for (const Job& q : queue_) busy.insert(q.Key());
          for (const auto& [key, b] : backoff_) {
            if (b.next > Clock::now()) busy.insert(key);
          }
          for (Job& j : JobPlanner::Plan(*snap, state_, rules_->fingerprint(), busy)) {
            queue_.push_back(std::move(j));
          }
          if (FLAGS_once) {
            once_planned = true;
            if (snap->unsettled > 0) {
              LOG(WARNING) << snap->unsettled << " version(s) still changing; left for a later run";
            }
          }
        }
      }
    }
    while (!stopping && !queue_.empty() && static_cast<int>(running_.size()) < FLAGS_workers) {
      Job j = std::move(queue_.front());
      queue_.pop_front();
      Dispatch(std::move(j));
    }
    {
      std::lock_guard<std::mutex> l(metrics_.mu);
      metrics_.queue_depth = static_cast<int64_t>(queue_.size());
      metrics_.in_flight = static_cast<int64_t>(running_.size());
    }
    if (FLAGS_once && once_planned && queue_.empty() && running_.empty()) break;
    if (stopping && running_.empty()) break;

    int wait_ms = 100;
    if (!FLAGS_once || !once_planned) {
      auto until = std::chrono::duration_cast<std::chrono::milliseconds>(next_poll - Clock::now());
      wait_ms = std::max<int>(1, std::min<int>(wait_ms, static_cast<int>(until.count()) + 1));
    }
    struct pollfd pfd = {g_pipe[0], POLLIN, 0};
    ::poll(&pfd, 1, wait_ms);
    char buf[64];
    ssize_t n;
    while ((n = ::read(g_pipe[0], buf, sizeof(buf))) > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        if ((buf[i] == SIGTERM || buf[i] == SIGINT) && !stopping) {
          stopping = true;
          stop_deadline = Clock::now() + std::chrono::seconds(FLAGS_shutdown_grace_s);
          LOG(INFO) << "signal " << static_cast<int>(buf[i]) << ": taking no new work; "
                    << running_.size() << " job(s) running";
        }
      }
    }
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      auto it = running_.find(pid);
      if (it == running_.end()) continue;
      Running r = std::move(it->second);
      running_.erase(it);
      busy_.erase(r.job.Key());
      Finish(std::move(r), status);
    }
    now = Clock::now();
    for (auto& [p, r] : running_) {
      if (!r.timed_out && now - r.start > std::chrono::seconds(FLAGS_job_timeout_s)) {
        r.timed_out = true;
        LOG(WARNING) << Tag(r.job.source.model, r.job.source.version) << "timed out after "
                     << FLAGS_job_timeout_s << " s; killing the job process";
        ::kill(p, SIGKILL);
      }
    }
    if (stopping && now > stop_deadline) {
      for (auto& [p, r] : running_) {
        LOG(WARNING) << Tag(r.job.source.model, r.job.source.version)
                     << "grace period over; abandoning the job (redone at the next start)";
        ::kill(p, SIGKILL);
        ::waitpid(p, nullptr, 0);
        publisher_->Discard(r.stage);
      }
      running_.clear();
      break;
    }
  }
#ifndef SENTIER_NO_HTTPLIB
  if (server) {
    server->stop();
    server_thread.join();
  }
#endif
  if (FLAGS_once && exit_code == kOk) PrintSummary();
  ::close(lock_fd);
  return exit_code;
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
    sentier::Daemon daemon;
    return daemon.Run();
  } catch (const std::exception& e) {
    return sentier::Fail(sentier::kInternal, absl::StrCat("internal error: ", e.what()));
  }
}
