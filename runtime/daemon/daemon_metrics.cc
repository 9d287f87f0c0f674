// daemon_metrics.cc — sentierd's metrics over prometheus-cpp (see daemon_metrics.h).
#include "runtime/daemon/daemon_metrics.h"

#include "runtime/decision_clause.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>

namespace sentier {
namespace {

prometheus::Counter& AddCounter(prometheus::Registry& r, const std::string& name,
                                const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
}

prometheus::Gauge& AddGauge(prometheus::Registry& r, const std::string& name,
                            const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
}

prometheus::Histogram& AddHistogram(prometheus::Registry& r, const std::string& name,
                                    const std::string& help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add(
      {}, DaemonMetrics::DurationBuckets());
}

}  // namespace

const std::vector<double>& DaemonMetrics::DurationBuckets() {
  static const std::vector<double> kBuckets = {0.1, 0.25, 0.5, 1,   2.5, 5,  10,
                                               25,  50,   100, 250, 600};
  return kBuckets;
}

const std::vector<std::string>& DaemonMetrics::KnownClauses() {
  // The decide stage's clauses (runtime/decision_clause.h).
  static const std::vector<std::string> kClauses = [] {
    std::vector<std::string> names;
    for (DecisionClause c : kDecisionClauses) names.emplace_back(DecisionClauseName(c));
    return names;
  }();
  return kClauses;
}

DaemonMetrics::DaemonMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  prometheus::Registry& r = *registry_;
  seen_ = &AddCounter(r, "sentierd_versions_seen_total", "Versions taken for processing.");
  auto& versions = prometheus::BuildCounter()
                       .Name("sentierd_versions_total")
                       .Help("Versions recorded, by status (optimized and unchanged are "
                             "published with a model.pt; rejected with a report only).")
                       .Register(r);
  for (const char* s : {"optimized", "unchanged", "rejected"}) {
    versions_[s] = &versions.Add({{"status", s}});
  }
  auto& decisions = prometheus::BuildCounter()
                        .Name("sentierd_decisions_total")
                        .Help("Versions recorded, by the clause of the decide stage that decided "
                              "their status (report.json: decision; unknown: none or another).")
                        .Register(r);
  for (const std::string& c : KnownClauses()) decisions_[c] = &decisions.Add({{"clause", c}});
  decisions_["unknown"] = &decisions.Add({{"clause", "unknown"}});
  timing_fallbacks_ = &AddCounter(
      r, "sentierd_timing_fallbacks_total",
      "Versions timed in the interpreter because a step timed with the executor made no "
      "progress (report.json: timing_fallback).");
  output_errors_ = &AddCounter(
      r, "sentierd_output_errors_total",
      "Jobs whose output could not be written (disk full, I/O error); retried.");
  job_seconds_ = &AddHistogram(r, "sentierd_job_duration_seconds",
                               "Wall time of a recorded job, from its start to its result.");
  gate_seconds_ = &AddHistogram(
      r, "sentierd_gate_duration_seconds",
      "Time of the gate (rule selection by timed ablation; report.json: timings_ms.select).");
  validation_seconds_ = &AddHistogram(
      r, "sentierd_validation_duration_seconds",
      "Time of the validation of the optimized model (report.json: timings_ms.validate).");
  queue_depth_ = &AddGauge(r, "sentierd_queue_depth", "Jobs waiting for a worker.");
  jobs_in_flight_ = &AddGauge(r, "sentierd_jobs_in_flight", "Job processes running.");
  last_poll_ = &AddGauge(r, "sentierd_last_successful_poll_timestamp_seconds",
                         "Unix time (whole seconds) of the last registry poll that succeeded.");
  speedup_family_ = &prometheus::BuildGauge()
                         .Name("sentierd_model_speedup_ratio")
                         .Help("Training-step speed-up (original time / published time) of the "
                               "last recorded version per model; at most 1000 models.")
                         .Register(r);
  stacked_gain_family_ = &prometheus::BuildGauge()
                              .Name("sentierd_model_stacked_layout_gain_ratio")
                              .Help("What the stacked parameter layout would give a model published in "
                                    "the original layout: measure=kernel_launches (original / stacked "
                                    "per training step) or training_step (the timed speed-up, CUDA); "
                                    "its sentier.json setting is in report.json stacked_layout_advice.")
                              .Register(r);
  models_dropped_ = &AddCounter(
      r, "sentierd_metrics_models_dropped_total",
      "Speed-ups not exported because 1000 models already have a sentierd_model_speedup_ratio "
      "series.");
}

DaemonMetrics::~DaemonMetrics() = default;

void DaemonMetrics::CountSeen() { seen_->Increment(); }

void DaemonMetrics::CountOutputError() { output_errors_->Increment(); }

void DaemonMetrics::CountPublished(const PublishedVersion& v) {
  auto status = versions_.find(v.status);
  (status != versions_.end() ? status->second : versions_.at("rejected"))->Increment();
  auto clause = decisions_.find(v.decision);
  (clause != decisions_.end() ? clause->second : decisions_.at("unknown"))->Increment();
  if (v.timing_fallback) timing_fallbacks_->Increment();
  job_seconds_->Observe(v.job_seconds);
  if (v.gate_seconds) gate_seconds_->Observe(*v.gate_seconds);
  if (v.validation_seconds) validation_seconds_->Observe(*v.validation_seconds);
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [measure, ratio] : v.stacked_layout_gain) {
    auto key = std::make_pair(v.model, measure);
    auto gain = stacked_gain_.find(key);
    if (gain == stacked_gain_.end()) {
      if (static_cast<int>(stacked_gain_.size()) >= 2 * kMaxModelSeries) continue;
      gain = stacked_gain_.emplace(key, &stacked_gain_family_->Add({{"model", v.model}, {"measure", measure}})).first;
    }
    gain->second->Set(ratio);
  }
  if (!v.speedup) return;
  auto it = speedup_.find(v.model);
  if (it == speedup_.end()) {
    if (static_cast<int>(speedup_.size()) >= kMaxModelSeries) {
      models_dropped_->Increment();
      return;
    }
    it = speedup_.emplace(v.model, &speedup_family_->Add({{"model", v.model}})).first;
  }
  it->second->Set(*v.speedup);
}

void DaemonMetrics::SetQueue(int64_t queue_depth, int64_t jobs_in_flight) {
  queue_depth_->Set(static_cast<double>(queue_depth));
  jobs_in_flight_->Set(static_cast<double>(jobs_in_flight));
}

void DaemonMetrics::SetPollSucceeded(int64_t unix_seconds) {
  last_poll_->Set(static_cast<double>(unix_seconds));
  std::lock_guard<std::mutex> l(mu_);
  polled_ = true;
}

void DaemonMetrics::SetRulesLoaded() {
  std::lock_guard<std::mutex> l(mu_);
  rules_loaded_ = true;
}

std::string DaemonMetrics::Render() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

std::string DaemonMetrics::NotReadyReason() const {
  std::lock_guard<std::mutex> l(mu_);
  if (!rules_loaded_) return "starting: no rule set loaded yet";
  if (!polled_) return "starting: the registry has not been polled successfully yet";
  return "";
}

int64_t DaemonMetrics::seen() const { return static_cast<int64_t>(seen_->Value()); }

int64_t DaemonMetrics::versions(absl::string_view status) const {
  auto it = versions_.find(std::string(status));
  return it == versions_.end() ? 0 : static_cast<int64_t>(it->second->Value());
}

int64_t DaemonMetrics::decisions(absl::string_view clause) const {
  auto it = decisions_.find(std::string(clause));
  return it == decisions_.end() ? 0 : static_cast<int64_t>(it->second->Value());
}

int64_t DaemonMetrics::output_errors() const {
  return static_cast<int64_t>(output_errors_->Value());
}

int64_t DaemonMetrics::timing_fallbacks() const {
  return static_cast<int64_t>(timing_fallbacks_->Value());
}

int64_t DaemonMetrics::job_count() const {
  return static_cast<int64_t>(job_seconds_->Collect().histogram.sample_count);
}

int64_t DaemonMetrics::queue_depth() const { return static_cast<int64_t>(queue_depth_->Value()); }

int64_t DaemonMetrics::jobs_in_flight() const {
  return static_cast<int64_t>(jobs_in_flight_->Value());
}

int64_t DaemonMetrics::last_successful_poll() const {
  return static_cast<int64_t>(last_poll_->Value());
}

std::optional<double> DaemonMetrics::model_speedup(const std::string& model) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = speedup_.find(model);
  if (it == speedup_.end()) return std::nullopt;
  return it->second->Value();
}

std::optional<double> DaemonMetrics::model_stacked_layout_gain(const std::string& model,
                                                              const std::string& measure) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = stacked_gain_.find(std::make_pair(model, measure));
  if (it == stacked_gain_.end()) return std::nullopt;
  return it->second->Value();
}

int64_t DaemonMetrics::models_dropped() const {
  return static_cast<int64_t>(models_dropped_->Value());
}

}  // namespace sentier
