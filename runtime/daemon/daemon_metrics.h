// daemon_metrics.h — sentierd's counters and gauges, rendered in the Prometheus text format.
//
// The manager updates them under `mu` (the HTTP thread renders concurrently); Render() takes the
// lock itself.
//
//   DaemonMetrics m;
//   { std::lock_guard<std::mutex> l(m.mu); ++m.seen; }
//   std::string text = m.Render();   // served on /metrics
#ifndef SENTIER_RUNTIME_DAEMON_DAEMON_METRICS_H_
#define SENTIER_RUNTIME_DAEMON_DAEMON_METRICS_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace sentier {

struct DaemonMetrics {
  std::mutex mu;
  int64_t seen = 0, optimized = 0, unchanged = 0, rejected = 0, output_errors = 0;
  int64_t timing_fallbacks = 0;
  // Versions by the clause of the pipeline's decide stage (report.json "decision"): at most the
  // nine clauses of runtime/pipeline.h, plus "unknown" for a report without one.
  std::map<std::string, int64_t> decisions;  // versions timed in the interpreter after executor timing stalled
  double job_seconds_sum = 0;
  int64_t job_count = 0;
  int64_t queue_depth = 0, in_flight = 0;
  double last_poll_unix = 0;

  // Render: every metric with HELP and TYPE lines; doubles at full precision.
  std::string Render();
};

}  // namespace sentier

#endif  // SENTIER_RUNTIME_DAEMON_DAEMON_METRICS_H_
