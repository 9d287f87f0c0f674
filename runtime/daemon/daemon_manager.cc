#include "runtime/daemon/daemon_manager.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>
#include <sstream>

#include <glog/logging.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/file_util.h"
#include "runtime/options_enums.h"
#include "runtime/report_schema.h"
#include "runtime/daemon/version_files.h"

namespace sentier {
namespace {

const std::string kRejected(ReportStatusName(ReportStatus::kRejected));

std::string Tag(const std::string& model, int64_t version) {
  return absl::StrCat("[", model, "/", version, "] ");
}

// Executor timing that stalled (torch's fuser): why the job timed in the interpreter instead,
// or "".
std::string TimingFallback(const nlohmann::json& report) {
  std::string fallback;
  for (const char* part : {"selection", "validation"}) {
    if (fallback.empty() && report.contains(part) && report.at(part).is_object()) {
      fallback = report.at(part).value("timing_fallback", "");
    }
  }
  return fallback;
}

// What the log line of a published report adds after its reason: rewrites and node counts.
std::string PublishedDetail(const nlohmann::json& report) {
  if (!report.contains("nodes_before")) return "";
  return absl::StrCat(" (", report.value("rewrites", 0), " rewrites; nodes ", report.value("nodes_before", 0),
                      " -> ", report.value("nodes_after", 0), "; aten ops per forward ",
                      report.value("aten_ops_per_forward_before", 0), " -> ",
                      report.value("aten_ops_per_forward_after", 0), ")");
}

}  // namespace

pid_t ExecJobLauncher::Launch(const JobSpec& spec) {
  std::vector<std::string> args = {
      "sentierd", "--job", absl::StrCat("--job_model=", spec.model),
      absl::StrCat("--job_version=", spec.version), absl::StrCat("--job_source=", spec.source_dir),
      absl::StrCat("--job_stage=", spec.stage_dir), absl::StrCat("--job_rules=", spec.rules_dir),
      absl::StrCat("--job_options=", EncodeOptions(spec).dump()),
      absl::StrCat("--job_reuse_report=", spec.reuse_report),
      absl::StrCat("--job_reuse_version=", spec.reuse_version)};
  const std::string program = program_.empty() ? "/proc/self/exe" : program_;
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
    ::execv(program.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

DaemonManager::DaemonManager(ManagerOptions options) : options_(std::move(options)) {
  launcher_ = options_.launcher;
  if (launcher_ == nullptr) {
    own_launcher_ = std::make_unique<ExecJobLauncher>(options_.job_command);
    launcher_ = own_launcher_.get();
  }
}

DaemonManager::~DaemonManager() {
  for (auto& [pid, r] : running_) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    if (publisher_) publisher_->Discard(r.stage);
  }
  running_.clear();  // releases the claims after the stages are gone
  if (replica_lock_fd_ >= 0) ::close(replica_lock_fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

// The output's lock. Alone: OUT/LOCK, exclusive. A replica (--shard=i/n): OUT/LOCK shared (so
// a daemon without --shard and replicas exclude each other) and
// OUT/.sentierd/replica-<i>-of-<n>.lock exclusive (so two replicas of one shard do).
absl::Status DaemonManager::LockOutput() {
  auto open_and_lock = [](const std::string& path, int how, int* fd) -> int {
    *fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (*fd < 0) return -errno;
    return ::flock(*fd, how | LOCK_NB) == 0 ? 0 : errno;
  };
  auto locked_error = [this](const std::string& path, int err, const std::string& by) {
    if (err == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat("output '", options_.output,
                                                        "' is locked by another sentierd", by, " (",
                                                        path, ")"));
    }
    return absl::UnavailableError(absl::StrCat("output unwritable: cannot ", err < 0 ? "open" : "lock",
                                               " '", path, "': ", std::strerror(std::abs(err))));
  };
  const std::string lock_path = options_.output + "/LOCK";
  int err = open_and_lock(lock_path, options_.replica ? LOCK_SH : LOCK_EX, &lock_fd_);
  if (err != 0) {
    return locked_error(lock_path, err, options_.replica ? " without --shard" : "");
  }
  int pid_fd = lock_fd_;
  if (options_.replica) {
    const std::string meta = options_.output + "/.sentierd";
    if (::mkdir(meta.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::UnavailableError(absl::StrCat("output unwritable: cannot create '", meta, "': ",
                                                 std::strerror(errno)));
    }
    const std::string replica_path = absl::StrCat(meta, "/replica-", options_.shard_index, "-of-",
                                                  options_.shard_count, ".lock");
    err = open_and_lock(replica_path, LOCK_EX, &replica_lock_fd_);
    if (err != 0) {
      return locked_error(replica_path, err,
                          absl::StrCat(" with --shard=", options_.shard_index, "/", options_.shard_count));
    }
    pid_fd = replica_lock_fd_;
  }
  std::string pid_text = absl::StrCat(::getpid(), "\n");
  (void)!::ftruncate(pid_fd, 0);
  (void)!::pwrite(pid_fd, pid_text.data(), pid_text.size(), 0);
  return absl::OkStatus();
}

// Stale temporaries: OUT/.tmp-* staging dirs and OUT/.sentierd/.tmp-* files. Alone, all of them.
// A replica removes only the staging dirs of versions whose claim it can take (their writer is
// gone: killed, or stopped mid-publication), holding the claims while it does, and in
// OUT/.sentierd only temporaries older than 10 minutes (another replica may be writing one).
absl::Status DaemonManager::CleanStaleTemps(const std::string& meta) {
  std::vector<std::unique_ptr<VersionClaim>> held;
  Publisher::IsStale is_stale;
  if (options_.replica) {
    is_stale = [this, &held](const std::string& model, int64_t version) {
      auto claim = VersionClaim::TryAcquire(options_.output, model, version);
      if (!claim.ok() || *claim == nullptr) return false;
      held.push_back(std::move(*claim));
      return true;
    };
  }
  auto cleaned = publisher_->CleanStaleTemps(is_stale);
  if (!cleaned.ok()) {
    return absl::UnavailableError(absl::StrCat("output unwritable: ", cleaned.status().message()));
  }
  if (*cleaned > 0) LOG(INFO) << "start-up: removed " << *cleaned << " stale temp entries";
  const auto old = std::filesystem::file_time_type::clock::now() - std::chrono::minutes(10);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(meta, ec)) {
    if (!absl::StartsWith(e.path().filename().string(), ".tmp-")) continue;
    std::error_code tec;
    if (options_.replica && !(e.last_write_time(tec) < old && !tec)) continue;
    RemoveTree(e.path()).IgnoreError();
  }
  return absl::OkStatus();
}

absl::Status DaemonManager::Start() {
  auto pub = Publisher::Create(options_.output);
  if (!pub.ok()) return absl::UnavailableError(pub.status().message());
  publisher_ = std::move(*pub);
  publisher_->set_before_rename(options_.before_publish_rename);
  absl::Status locked = LockOutput();
  if (!locked.ok()) return locked;

  WatcherOptions wopts;
  wopts.root = options_.registry;
  wopts.max_model_bytes = options_.max_model_bytes;
  wopts.shard_index = options_.shard_index;
  wopts.shard_count = options_.shard_count;
  auto watcher = RegistryWatcher::Create(wopts);
  if (!watcher.ok()) return absl::UnavailableError(watcher.status().message());
  watcher_ = std::move(*watcher);

  std::string meta = options_.output + "/.sentierd";
  if (::mkdir(meta.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::UnavailableError(absl::StrCat("output unwritable: cannot create '", meta, "': ",
                                               std::strerror(errno)));
  }
  absl::Status cleaned = CleanStaleTemps(meta);
  if (!cleaned.ok()) return cleaned;
  // Each replica keeps its own state (the state of a replica of another count, after a resize,
  // is left alone); what it lacks, Reconcile adopts from the published reports.
  state_path_ = options_.replica ? absl::StrCat(meta, "/state-", options_.shard_index, "-of-",
                                                options_.shard_count, ".json")
                                 : meta + "/state.json";
  auto state = DaemonState::Load(state_path_);
  if (!state.ok()) {
    LOG(ERROR) << "state: " << state.status().message() << "; rebuilding from published reports";
  } else {
    state_ = std::move(*state);
  }
  Reconcile();

  rules_ = std::make_unique<RulesTracker>(options_.rule_paths, meta);
  if (!rules_->MaybeReload()) {
    return absl::InvalidArgumentError("no usable rule set (see the error above)");
  }
  metrics_.SetRulesLoaded();
  return absl::OkStatus();
}

double DaemonManager::RetryLater(const std::string& key) {
  Backoff& b = backoff_[key];
  b.delay_s = b.delay_s == 0 ? 1.0 : std::min(2 * b.delay_s, 60.0);
  b.next = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(b.delay_s * 1000));
  return b.delay_s;
}

// The record of the report published at OUT/<model>/<version>; nullopt when there is none (or
// it cannot be read: logged).
std::optional<VersionRecord> DaemonManager::PublishedRecord(const std::string& model, int64_t version) const {
  auto text = ReadFile(publisher_->PublishedDir(model, version) + "/report.json");
  if (!text.ok()) return std::nullopt;
  try {
    nlohmann::json r = nlohmann::json::parse(*text);
    VersionRecord rec;
    rec.status = ParseReportStatus(r.value("status", "")).value_or(ReportStatus::kRejected);
    rec.reason = r.value("reason", "");
    rec.signature = r.value("source_signature", "");
    rec.rules_fp = r.value("rules_fingerprint", "");
    rec.arch_fp = r.value("architecture_fingerprint", "");
    rec.artifact_sha = r.value("artifact_sha256", "");
    return rec;
  } catch (const std::exception& e) {
    LOG(WARNING) << Tag(model, version) << "state: unreadable report.json: " << e.what();
    return std::nullopt;
  }
}

void DaemonManager::Reconcile() {
  // A publish whose state update was lost (crash between rename and state write) is adopted; so
  // is, for a replica, what other replicas published of the models of its shard.
  std::error_code ec;
  for (const auto& m : std::filesystem::directory_iterator(publisher_->root(), ec)) {
    std::string model = m.path().filename().string();
    if (!IsValidModelName(model) || !m.is_directory()) continue;
    if (options_.replica && ShardOf(model, options_.shard_count) != options_.shard_index) continue;
    for (const auto& v : std::filesystem::directory_iterator(m.path(), ec)) {
      int64_t version = 0;
      if (!ParseVersionName(v.path().filename().string(), &version)) continue;
      std::optional<VersionRecord> rec = PublishedRecord(model, version);
      if (!rec) continue;
      const VersionRecord* have = state_.Find(model, version);
      if (have != nullptr && have->signature == rec->signature && have->rules_fp == rec->rules_fp) continue;
      state_.Set(model, version, *rec);
      LOG(INFO) << Tag(model, version) << "state: adopted the published report";
    }
  }
}

// A replica's step before a job: take the version's claim (false: another replica holds it, or
// the claims cannot be written: retried later), remove what a dead holder left in staging, and
// re-check the published report (false: the version was published by another replica meanwhile;
// its report is adopted).
bool DaemonManager::ClaimForReplica(const Job& job, std::unique_ptr<VersionClaim>* claim) {
  const VersionInfo& v = job.source;
  auto c = VersionClaim::TryAcquire(options_.output, v.model, v.version);
  if (!c.ok()) {
    double delay = RetryLater(job.Key());
    LOG(ERROR) << Tag(v.model, v.version) << c.status().message() << "; retried in " << delay << " s";
    return false;
  }
  if (*c == nullptr) {
    if (left_to_others_.insert(job.Key()).second) {
      LOG(INFO) << Tag(v.model, v.version) << "claimed by another replica; left to it";
    }
    return false;
  }
  left_to_others_.erase(job.Key());
  *claim = std::move(*c);
  publisher_->CleanStaleTemps([&v](const std::string& model, int64_t version) {
    return model == v.model && version == v.version;
  }).IgnoreError();
  std::optional<VersionRecord> published = PublishedRecord(v.model, v.version);
  if (JobPlanner::StillNeeded(job, published ? &*published : nullptr, rules_->fingerprint())) return true;
  state_.Set(v.model, v.version, *published);
  absl::Status saved = state_.Save(state_path_);
  if (!saved.ok()) LOG(ERROR) << "state: " << saved.message();
  LOG(INFO) << Tag(v.model, v.version) << "already published by another replica; adopted its report";
  return false;
}

absl::StatusOr<int> DaemonManager::PollAndPlan() {
  rules_->MaybeReload();
  auto snap = watcher_->PollOnce();
  ++polls_;
  if (!snap.ok()) return snap.status();
  metrics_.SetPollSucceeded(static_cast<int64_t>(::time(nullptr)));
  for (const auto& [m, vs] : snap->models) models_seen_.insert(m);
  // --once: wait (a bounded number of polls) until every version has settled.
  bool plan = !options_.once || (polls_ >= 2 && (snap->unsettled == 0 || polls_ >= 30));
  if (!plan) return 0;
  std::set<std::string> busy = busy_;
  for (const Job& q : queue_) busy.insert(q.Key());
  for (const auto& [key, b] : backoff_) {
    if (b.next > Clock::now()) busy.insert(key);
  }
  int queued = 0;
  for (Job& j : JobPlanner::Plan(*snap, state_, rules_->fingerprint(), busy)) {
    queue_.push_back(std::move(j));
    ++queued;
  }
  if (options_.once) {
    once_planned_ = true;
    if (snap->unsettled > 0) {
      LOG(WARNING) << snap->unsettled << " version(s) still changing; left for a later run";
    }
  }
  UpdateGauges();
  return queued;
}

int DaemonManager::DispatchReady() {
  int started = 0;
  while (!queue_.empty() && static_cast<int>(running_.size()) < options_.workers) {
    Job j = std::move(queue_.front());
    queue_.pop_front();
    Dispatch(std::move(j));
    ++started;
  }
  UpdateGauges();
  return started;
}

void DaemonManager::UpdateGauges() {
  metrics_.SetQueue(static_cast<int64_t>(queue_.size()), static_cast<int64_t>(running_.size()));
}

JobSpec DaemonManager::MakeJobSpec(const VersionInfo& v, const std::string& stage) const {
  JobSpec spec;
  spec.model = v.model;
  spec.version = v.version;
  spec.source_dir = v.dir;
  spec.stage_dir = stage;
  spec.rules_dir = rules_->dir();
  static_cast<PipelineOptions&>(spec) = options_;
  // The decision of the latest earlier version decided under these rules, for the job to reuse
  // where the architecture and options are the same (runtime/pipeline/pipeline.h, ReusableDecision).
  const int64_t previous = state_.PreviousDecided(v.model, v.version, rules_->fingerprint());
  const std::string report = absl::StrCat(options_.output, "/", v.model, "/", previous, "/report.json");
  if (previous > 0 && std::filesystem::exists(report)) {
    spec.reuse_report = report;
    spec.reuse_version = previous;
  }
  return spec;
}

void DaemonManager::Dispatch(Job job) {
  const VersionInfo& v = job.source;
  std::unique_ptr<VersionClaim> claim;  // replicas: held until the result is published
  if (options_.replica && !ClaimForReplica(job, &claim)) return;
  metrics_.CountSeen();
  auto stage = publisher_->MakeStagingDir(v.model, v.version);
  if (!stage.ok()) {
    LOG(ERROR) << Tag(v.model, v.version) << stage.status().message();
    return;
  }
  if (!v.refused_reason.empty()) {
    LOG(WARNING) << Tag(v.model, v.version) << "refused: " << v.refused_reason;
    nlohmann::json r = {{"status", kRejected},
                        {"reason", absl::StrCat("refused: ", v.refused_reason, ".")}};
    PublishResult(job, *stage, r, 0);
    return;
  }
  LOG(INFO) << Tag(v.model, v.version) << "job started (" << job.why << ")";
  JobSpec spec = MakeJobSpec(v, *stage);
  pid_t pid = launcher_->Launch(spec);
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
  r.claim = std::move(claim);
  busy_.insert(r.job.Key());
  running_[pid] = std::move(r);
}

int DaemonManager::ReapFinished(bool block) {
  int reaped = 0;
  int status = 0;
  pid_t pid;
  bool wait = block && !running_.empty();
  while (!running_.empty() && (pid = ::waitpid(-1, &status, wait ? 0 : WNOHANG)) > 0) {
    wait = false;
    auto it = running_.find(pid);
    if (it == running_.end()) continue;
    Running r = std::move(it->second);
    running_.erase(it);
    busy_.erase(r.job.Key());
    Finish(std::move(r), status);
    ++reaped;
  }
  UpdateGauges();
  return reaped;
}

void DaemonManager::KillOverdue() {
  Clock::time_point now = Clock::now();
  for (auto& [p, r] : running_) {
    if (!r.timed_out && now - r.start > std::chrono::seconds(options_.job_timeout_s)) {
      r.timed_out = true;
      LOG(WARNING) << Tag(r.job.source.model, r.job.source.version) << "timed out after "
                   << options_.job_timeout_s << " s; killing the job process";
      ::kill(p, SIGKILL);
    }
  }
}

void DaemonManager::Finish(Running r, int wait_status) {
  double seconds = std::chrono::duration<double>(Clock::now() - r.start).count();
  if (!r.timed_out && WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == kJobExitOutputFailed) {
    // The output could not be written (the job logged why): nothing is recorded, nothing is
    // published, and the version is planned again at the next poll.
    double delay = RetryLater(r.job.Key());
    LOG(ERROR) << Tag(r.job.source.model, r.job.source.version)
               << "output not written (see the job's error above); retried in " << delay << " s";
    publisher_->Discard(r.stage);
    metrics_.CountOutputError();
    return;
  }
  nlohmann::json report;
  auto text = ReadFile(r.stage + "/job.json");
  bool clean_exit = WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
  if (r.timed_out) {
    report = {{"status", kRejected},
              {"reason", absl::StrCat("timed out after ", options_.job_timeout_s,
                                      " s (--job_timeout_s); the job process was killed.")}};
  } else if (!clean_exit || !text.ok()) {
    std::string how = WIFSIGNALED(wait_status)
                          ? absl::StrCat("job process crashed (signal ", WTERMSIG(wait_status),
                                         ": ", strsignal(WTERMSIG(wait_status)), ").")
                          : absl::StrCat("job process exited with status ",
                                         WEXITSTATUS(wait_status), " without a result.");
    report = {{"status", kRejected}, {"reason", how}};
  } else {
    try {
      report = nlohmann::json::parse(*text);
    } catch (const std::exception& e) {
      report = {{"status", kRejected}, {"reason", "job result unreadable."}};
    }
  }
  ::unlink((r.stage + "/job.json").c_str());
  if (report.value("status", "") == kRejected) RemoveModelFiles(r.stage);
  report["rules_fingerprint"] = r.rules_fp;
  PublishResult(r.job, r.stage, report, seconds);
}

// The job writes the report (runtime/report.h); reports the daemon makes itself (a crash, a
// time-out) get the same header, so every report.json follows runtime/report_schema.json.
void DaemonManager::CompleteReport(const Job& job, double seconds, nlohmann::json* report) const {
  const VersionInfo& v = job.source;
  nlohmann::json& r = *report;
  r["schema_version"] = kReportSchemaVersion;
  r["tool"] = "sentierd";
  if (!r.contains("rules_fingerprint")) r["rules_fingerprint"] = rules_->fingerprint();
  r["model"] = v.model;
  r["version"] = v.version;
  r["source_signature"] = v.signature;
  r["trigger"] = job.why;
  // The job's mode (REG/<model>/sentier.json may set another than --mode); a report the daemon
  // makes itself has the daemon's.
  if (!r.contains("mode")) r["mode"] = std::string(ValidationModeName(options_.mode));
  std::string arch = r.value("architecture_fingerprint", "");
  std::string prev = state_.PreviousArchFp(v.model, v.version);
  if (!arch.empty()) {
    if (prev.empty()) {
      r["architecture_changed"] = nullptr;  // no earlier version to compare with
    } else {
      r["architecture_changed"] = prev != arch;
    }
  }
  if (!r.contains("timings_ms")) r["timings_ms"] = nlohmann::json::object();
  r["timings_ms"]["job_total"] = seconds * 1000.0;
}

// Counts a recorded result in the metrics: its status and decision, the job's, the gate's and
// the validation's times, and the speed-up of what is published for the model (the training step
// as validated for an optimized version; 1 for an unchanged one, whose artifact is the original).
namespace {

// ReadStackedLayoutGain: report.json's stacked_layout_advice as the gauge's ratios.
void ReadStackedLayoutGain(const nlohmann::json& report, PublishedVersion* p) {
  if (!report.contains("stacked_layout_advice") || !report.at("stacked_layout_advice").is_object()) return;
  const nlohmann::json& a = report.at("stacked_layout_advice");
  if (a.contains("speedup") && a.at("speedup").is_number()) p->stacked_layout_gain["training_step"] = a.at("speedup").get<double>();
  const nlohmann::json* launches = a.contains("kernel_launches_per_training_step") ? &a.at("kernel_launches_per_training_step") : nullptr;
  if (launches != nullptr && launches->is_object() && launches->value("stacked", 0) > 0) {
    p->stacked_layout_gain["kernel_launches"] =
        static_cast<double>(launches->value("original", 0)) / launches->value("stacked", 1);
  }
}

}  // namespace

void DaemonManager::CountPublished(ReportStatus status, const nlohmann::json& report,
                                   double seconds, bool timing_fallback) {
  PublishedVersion p;
  p.model = report.value("model", "");
  p.status = std::string(ReportStatusName(status));
  p.decision = report.value("decision", "");
  p.job_seconds = seconds;
  p.timing_fallback = timing_fallback;
  auto stage_seconds = [&report](const char* stage) -> std::optional<double> {
    const nlohmann::json* t = report.contains("timings_ms") ? &report.at("timings_ms") : nullptr;
    if (t == nullptr || !t->is_object() || !t->contains(stage) || !t->at(stage).is_number()) {
      return std::nullopt;
    }
    return t->at(stage).get<double>() / 1000.0;
  };
  ReadStackedLayoutGain(report, &p);
  p.gate_seconds = stage_seconds("select");
  p.validation_seconds = stage_seconds("validate");
  if (status == ReportStatus::kUnchanged) {
    p.speedup = 1.0;
  } else if (status == ReportStatus::kOptimized) {
    const nlohmann::json* step = nullptr;
    if (report.contains("validation") && report.at("validation").is_object() &&
        report.at("validation").contains("training_step_ms")) {
      step = &report.at("validation").at("training_step_ms");
    }
    if (step != nullptr && step->is_object() && step->contains("reference") &&
        step->contains("candidate") && step->at("reference").is_number() &&
        step->at("candidate").is_number()) {
      const double reference = step->at("reference").get<double>();
      const double candidate = step->at("candidate").get<double>();
      if (reference > 0 && candidate > 0) p.speedup = reference / candidate;
    }
  }
  metrics_.CountPublished(p);
}

void DaemonManager::PublishResult(const Job& job, const std::string& stage, nlohmann::json report,
                                  double seconds) {
  const VersionInfo& v = job.source;
  CompleteReport(job, seconds, &report);
  std::string status = report.value("status", "rejected");
  // A status the job did not spell right counts as a rejection, but is published as it is.
  absl::StatusOr<ReportStatus> parsed = ParseReportStatus(status);
  const bool rejected = parsed.ok() && *parsed == ReportStatus::kRejected;
  std::string reason = report.value("reason", "");
  std::string fallback = TimingFallback(report);
  if (!fallback.empty()) LOG(WARNING) << Tag(v.model, v.version) << "timed in the interpreter: " << fallback;
  absl::Status st = WriteFileSynced(stage + "/report.json", report.dump(2) + "\n");
  if (st.ok()) st = publisher_->Publish(stage, v.model, v.version, rejected);
  VersionRecord rec;
  rec.status = parsed.ok() ? *parsed : ReportStatus::kRejected;
  rec.reason = reason;
  rec.signature = v.signature;
  rec.rules_fp = report.value("rules_fingerprint", "");
  rec.arch_fp = report.value("architecture_fingerprint", "");
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
  CountPublished(rec.status, report, seconds, !fallback.empty());
  LOG(INFO) << Tag(v.model, v.version) << "published " << status << ": " << reason << PublishedDetail(report)
            << " in " << static_cast<int64_t>(seconds * 1000) << " ms";
}

std::string DaemonManager::Summary() const {
  std::ostringstream out;
  for (const auto& [model, versions] : state_.models()) {
    if (!models_seen_.count(model)) continue;
    std::vector<std::string> parts;
    for (const auto& [v, r] : versions) {
      parts.push_back(absl::StrCat("v", v, " ", ReportStatusName(r.status), r.kept_earlier ? " (kept earlier)" : ""));
    }
    const auto& last = *versions.rbegin();
    std::string arch;
    std::string prev = state_.PreviousArchFp(model, last.first);
    if (!prev.empty() && !last.second.arch_fp.empty()) {
      arch = prev != last.second.arch_fp ? " (architecture changed)" : " (same architecture)";
    }
    out << "sentierd: " << model << ": " << absl::StrJoin(parts, ", ") << "; latest v" << last.first
        << arch << "\n";
  }
  return out.str();
}

absl::Status DaemonManager::Run(int signal_fd) {
  bool stopping = false;
  Clock::time_point stop_deadline;
  Clock::time_point next_poll = Clock::now();
  for (;;) {
    Clock::time_point now = Clock::now();
    if (!stopping && now >= next_poll && !(options_.once && once_planned_)) {
      next_poll = now + std::chrono::milliseconds(options_.poll_interval_ms);
      auto planned = PollAndPlan();
      if (!planned.ok()) {
        LOG(ERROR) << planned.status().message();
        if (options_.once) return absl::UnavailableError(planned.status().message());
      }
    }
    if (!stopping) DispatchReady();
    if (options_.once && once_planned_ && queue_.empty() && running_.empty()) break;
    if (stopping && running_.empty()) break;

    int wait_ms = 100;
    if (!options_.once || !once_planned_) {
      auto until = std::chrono::duration_cast<std::chrono::milliseconds>(next_poll - Clock::now());
      wait_ms = std::max<int>(1, std::min<int>(wait_ms, static_cast<int>(until.count()) + 1));
    }
    struct pollfd pfd = {signal_fd, POLLIN, 0};
    ::poll(&pfd, 1, wait_ms);
    char buf[64];
    ssize_t n;
    while ((n = ::read(signal_fd, buf, sizeof(buf))) > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        if ((buf[i] == SIGTERM || buf[i] == SIGINT) && !stopping) {
          stopping = true;
          stop_deadline = Clock::now() + std::chrono::seconds(options_.shutdown_grace_s);
          LOG(INFO) << "signal " << static_cast<int>(buf[i]) << ": taking no new work; "
                    << running_.size() << " job(s) running";
        }
      }
    }
    ReapFinished(/*block=*/false);
    KillOverdue();
    if (stopping && Clock::now() > stop_deadline) {
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
  return absl::OkStatus();
}

}  // namespace sentier
