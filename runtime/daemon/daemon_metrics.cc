#include "runtime/daemon/daemon_metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sentier {

std::string DaemonMetrics::Render() {
  std::lock_guard<std::mutex> l(mu);
  std::string s;
  auto counter = [&](const char* name, const char* help, int64_t v) {
    absl::StrAppend(&s, "# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n", name, " ", v,
                    "\n");
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
  absl::StrAppend(&s,
                  "# HELP sentierd_decisions_total Versions by the clause that decided their status "
                  "(report.json: decision).\n# TYPE sentierd_decisions_total counter\n");
  for (const auto& [clause, n] : decisions) {
    absl::StrAppend(&s, "sentierd_decisions_total{clause=\"", clause, "\"} ", n, "\n");
  }
  counter("sentierd_timing_fallbacks_total",
          "Versions timed in the interpreter because a step timed with the executor made no "
          "progress (report.json: timing_fallback).",
          timing_fallbacks);
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

}  // namespace sentier
