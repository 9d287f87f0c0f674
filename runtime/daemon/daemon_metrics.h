// daemon_metrics.h — sentierd's metrics, kept in a prometheus::Registry (prometheus-cpp) and
// rendered in the Prometheus text format by prometheus::TextSerializer; also the daemon's
// readiness (/readyz).
//
// The manager updates them from its thread; the HTTP thread renders them concurrently
// (prometheus-cpp's metrics are thread-safe; the per-model bookkeeping has its own lock). Tests
// read the values back through the accessors.
//
//   DaemonMetrics m;
//   m.CountSeen();
//   PublishedVersion p;  p.model = "ranker";  p.status = "optimized";  p.job_seconds = 12.5;
//   m.CountPublished(p);
//   std::string text = m.Render();   // served on /metrics
//
// Metrics (names and help texts follow Prometheus' conventions: base units, _total, _seconds):
//   sentierd_versions_seen_total                         versions taken for processing
//   sentierd_versions_total{status}                      optimized | unchanged | rejected
//   sentierd_decisions_total{clause}                     report.json "decision": the clauses of
//                                                        runtime/pipeline/pipeline.h, or "unknown"
//   sentierd_timing_fallbacks_total, sentierd_output_errors_total
//   sentierd_job_duration_seconds                        histogram, every recorded job
//   sentierd_gate_duration_seconds                       histogram, timings_ms.select (the gate)
//   sentierd_validation_duration_seconds                 histogram, timings_ms.validate
//   sentierd_queue_depth, sentierd_jobs_in_flight        gauges
//   sentierd_last_successful_poll_timestamp_seconds      gauge, integer Unix time
//   sentierd_model_speedup_ratio{model}                  gauge, at most kMaxModelSeries models
//   sentierd_model_stacked_layout_gain_ratio{model,measure}  gauge: what the stacked parameter
//       layout would give a model published in the original layout (report.json
//       stacked_layout_advice): measure="kernel_launches" (original / stacked per training step,
//       counted) and, where timed (CUDA), measure="training_step" (the step's speed-up)
//   sentierd_metrics_models_dropped_total                speed-ups not exported (over the bound)
#ifndef SENTIER_RUNTIME_DAEMON_DAEMON_METRICS_H_
#define SENTIER_RUNTIME_DAEMON_DAEMON_METRICS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace sentier {

// PublishedVersion: what the metrics take from one recorded result (its report.json).
struct PublishedVersion {
  std::string model;
  std::string status;    // optimized | unchanged | rejected (anything else counts as rejected)
  std::string decision;  // report.json "decision"; empty or unknown: "unknown"
  double job_seconds = 0;
  std::optional<double> gate_seconds;        // timings_ms.select / 1000, when the gate ran
  std::optional<double> validation_seconds;  // timings_ms.validate / 1000, when it ran
  // validation.training_step_ms reference / candidate (optimized), 1 (unchanged: the original is
  // published); none for a rejection (the earlier value stays).
  std::optional<double> speedup;
  bool timing_fallback = false;
  // report.json stacked_layout_advice: measure ("kernel_launches", "training_step") -> ratio.
  std::map<std::string, double> stacked_layout_gain;
};

class DaemonMetrics {
 public:
  // At most this many models get a sentierd_model_speedup_ratio series; the speed-ups of further
  // models are counted in sentierd_metrics_models_dropped_total instead.
  static constexpr int kMaxModelSeries = 1000;
  // The bucket bounds (seconds) of the three duration histograms: 0.1 s to 600 s.
  static const std::vector<double>& DurationBuckets();
  // The decision clauses counted by name (runtime/pipeline/pipeline.h, DecisionClauseName); others count
  // as "unknown".
  static const std::vector<std::string>& KnownClauses();

  DaemonMetrics();
  ~DaemonMetrics();
  DaemonMetrics(const DaemonMetrics&) = delete;
  DaemonMetrics& operator=(const DaemonMetrics&) = delete;

  // ---- updates (the manager) ----
  void CountSeen();
  void CountOutputError();
  void CountPublished(const PublishedVersion& v);
  void SetQueue(int64_t queue_depth, int64_t jobs_in_flight);
  // SetPollSucceeded: a registry poll succeeded at `unix_seconds` (whole seconds are exported).
  void SetPollSucceeded(int64_t unix_seconds);
  void SetRulesLoaded();

  // ---- readers (the HTTP thread, tests) ----
  // Render: every metric with HELP and TYPE lines (text format 0.0.4).
  std::string Render() const;
  // NotReadyReason: empty once a rule set is loaded and a poll has succeeded; else why not.
  std::string NotReadyReason() const;

  int64_t seen() const;
  int64_t versions(absl::string_view status) const;
  int64_t decisions(absl::string_view clause) const;
  int64_t output_errors() const;
  int64_t timing_fallbacks() const;
  int64_t job_count() const;
  int64_t queue_depth() const;
  int64_t jobs_in_flight() const;
  int64_t last_successful_poll() const;  // 0 before the first
  // model_speedup: the exported speed-up of `model`, none when it has no series.
  std::optional<double> model_speedup(const std::string& model) const;
  // model_stacked_layout_gain: the exported gain of the stacked layout for `model` by `measure`.
  std::optional<double> model_stacked_layout_gain(const std::string& model, const std::string& measure) const;
  int64_t models_dropped() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter* seen_;
  std::map<std::string, prometheus::Counter*> versions_;   // by status
  std::map<std::string, prometheus::Counter*> decisions_;  // by clause, "unknown" included
  prometheus::Counter* output_errors_;
  prometheus::Counter* timing_fallbacks_;
  prometheus::Histogram* job_seconds_;
  prometheus::Histogram* gate_seconds_;
  prometheus::Histogram* validation_seconds_;
  prometheus::Gauge* queue_depth_;
  prometheus::Gauge* jobs_in_flight_;
  prometheus::Gauge* last_poll_;
  prometheus::Family<prometheus::Gauge>* speedup_family_;
  prometheus::Counter* models_dropped_;

  mutable std::mutex mu_;  // guards the members below
  std::map<std::string, prometheus::Gauge*> speedup_;  // at most kMaxModelSeries
  prometheus::Family<prometheus::Gauge>* stacked_gain_family_;
  std::map<std::pair<std::string, std::string>, prometheus::Gauge*> stacked_gain_;  // (model, measure)
  bool rules_loaded_ = false;
  bool polled_ = false;
};

}  // namespace sentier

#endif  // SENTIER_RUNTIME_DAEMON_DAEMON_METRICS_H_
