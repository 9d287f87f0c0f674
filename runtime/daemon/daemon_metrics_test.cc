// daemon_metrics_test.cc — sentierd's metrics as Prometheus reads them: names, HELP/TYPE lines,
// labels, histogram buckets and counts, the speed-up's cardinality bound, and readiness.
#include "runtime/daemon/daemon_metrics.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace sentier {
namespace {

// Line: the line of `text` that starts with `prefix` followed by a space, or "<none>".
std::string Line(const std::string& text, const std::string& prefix) {
  for (absl::string_view l : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(l, prefix + " ")) return std::string(l);
  }
  return "<none>";
}

PublishedVersion Version(const std::string& model, const std::string& status, double seconds) {
  PublishedVersion p;
  p.model = model;
  p.status = status;
  p.job_seconds = seconds;
  return p;
}

TEST(DaemonMetricsTest, EveryMetricHasHelpTypeAndAValueBeforeAnyJob) {
  DaemonMetrics m;
  const std::string text = m.Render();
  for (const auto& [name, type] : std::vector<std::pair<std::string, std::string>>{
           {"sentierd_versions_seen_total", "counter"},
           {"sentierd_versions_total", "counter"},
           {"sentierd_decisions_total", "counter"},
           {"sentierd_timing_fallbacks_total", "counter"},
           {"sentierd_output_errors_total", "counter"},
           {"sentierd_job_duration_seconds", "histogram"},
           {"sentierd_gate_duration_seconds", "histogram"},
           {"sentierd_validation_duration_seconds", "histogram"},
           {"sentierd_queue_depth", "gauge"},
           {"sentierd_jobs_in_flight", "gauge"},
           {"sentierd_last_successful_poll_timestamp_seconds", "gauge"},
           {"sentierd_metrics_models_dropped_total", "counter"}}) {
    EXPECT_TRUE(absl::StrContains(text, absl::StrCat("# HELP ", name, " "))) << name;
    EXPECT_TRUE(absl::StrContains(text, absl::StrCat("# TYPE ", name, " ", type, "\n"))) << name;
  }
  // Series with a fixed label set exist from the start at 0 (rate() needs the zero).
  EXPECT_EQ(Line(text, "sentierd_versions_total{status=\"rejected\"}"),
            "sentierd_versions_total{status=\"rejected\"} 0");
  EXPECT_EQ(Line(text, "sentierd_decisions_total{clause=\"unknown\"}"),
            "sentierd_decisions_total{clause=\"unknown\"} 0");
  EXPECT_EQ(Line(text, "sentierd_job_duration_seconds_count"), "sentierd_job_duration_seconds_count 0");
  // A family without series is not rendered: the speed-up appears with the first model's.
  EXPECT_FALSE(absl::StrContains(text, "# TYPE sentierd_model_speedup_ratio"));
  EXPECT_FALSE(absl::StrContains(text, "sentierd_model_speedup_ratio{"));
  EXPECT_NE(m.NotReadyReason(), "");
}

TEST(DaemonMetricsTest, CountsByStatusAndClause) {
  DaemonMetrics m;
  PublishedVersion a = Version("a", "optimized", 2);
  a.decision = "optimized";
  PublishedVersion b = Version("b", "unchanged", 3);
  b.decision = "gate_nothing_pays";
  b.timing_fallback = true;
  PublishedVersion c = Version("c", "rejected", 1);  // no decision: a crash the daemon reports
  PublishedVersion d = Version("d", "bogus", 1);     // a misspelled status counts as rejected
  d.decision = "made_up_clause";                     // an unknown clause as "unknown"
  for (const auto* v : {&a, &b, &c, &d}) {
    m.CountSeen();
    m.CountPublished(*v);
  }
  m.CountOutputError();
  EXPECT_EQ(m.seen(), 4);
  EXPECT_EQ(m.versions("optimized"), 1);
  EXPECT_EQ(m.versions("unchanged"), 1);
  EXPECT_EQ(m.versions("rejected"), 2);
  EXPECT_EQ(m.decisions("optimized"), 1);
  EXPECT_EQ(m.decisions("gate_nothing_pays"), 1);
  EXPECT_EQ(m.decisions("unknown"), 2);
  EXPECT_EQ(m.decisions("made_up_clause"), 0);
  const std::string text = m.Render();
  EXPECT_EQ(Line(text, "sentierd_versions_total{status=\"rejected\"}"),
            "sentierd_versions_total{status=\"rejected\"} 2");
  EXPECT_EQ(Line(text, "sentierd_decisions_total{clause=\"gate_nothing_pays\"}"),
            "sentierd_decisions_total{clause=\"gate_nothing_pays\"} 1");
  EXPECT_FALSE(absl::StrContains(text, "made_up_clause"));
  EXPECT_FALSE(absl::StrContains(text, "bogus"));
  EXPECT_EQ(Line(text, "sentierd_timing_fallbacks_total"), "sentierd_timing_fallbacks_total 1");
  EXPECT_EQ(Line(text, "sentierd_output_errors_total"), "sentierd_output_errors_total 1");
  EXPECT_EQ(Line(text, "sentierd_versions_seen_total"), "sentierd_versions_seen_total 4");
}

TEST(DaemonMetricsTest, HistogramsCountIntoTheirBuckets) {
  DaemonMetrics m;
  for (double s : {0.05, 0.3, 7.0, 7.0, 1000.0}) {
    PublishedVersion v = Version("m", "optimized", s);
    m.CountPublished(v);
  }
  PublishedVersion gated = Version("m", "unchanged", 1);
  gated.gate_seconds = 120.0;
  gated.validation_seconds = 0.2;
  m.CountPublished(gated);
  EXPECT_EQ(m.job_count(), 6);
  const std::string text = m.Render();
  const std::string h = "sentierd_job_duration_seconds";
  EXPECT_EQ(Line(text, h + "_bucket{le=\"0.1\"}"), h + "_bucket{le=\"0.1\"} 1");
  EXPECT_EQ(Line(text, h + "_bucket{le=\"0.5\"}"), h + "_bucket{le=\"0.5\"} 2");
  EXPECT_EQ(Line(text, h + "_bucket{le=\"1\"}"), h + "_bucket{le=\"1\"} 3");  // cumulative
  EXPECT_EQ(Line(text, h + "_bucket{le=\"10\"}"), h + "_bucket{le=\"10\"} 5");
  EXPECT_EQ(Line(text, h + "_bucket{le=\"600\"}"), h + "_bucket{le=\"600\"} 5");
  EXPECT_EQ(Line(text, h + "_bucket{le=\"+Inf\"}"), h + "_bucket{le=\"+Inf\"} 6");
  EXPECT_EQ(Line(text, h + "_count"), h + "_count 6");
  EXPECT_EQ(Line(text, h + "_sum"), h + "_sum 1015.35");
  // The gate and validation histograms count only the jobs that ran those stages.
  EXPECT_EQ(Line(text, "sentierd_gate_duration_seconds_count"), "sentierd_gate_duration_seconds_count 1");
  EXPECT_EQ(Line(text, "sentierd_gate_duration_seconds_bucket{le=\"100\"}"),
            "sentierd_gate_duration_seconds_bucket{le=\"100\"} 0");
  EXPECT_EQ(Line(text, "sentierd_gate_duration_seconds_bucket{le=\"250\"}"),
            "sentierd_gate_duration_seconds_bucket{le=\"250\"} 1");
  EXPECT_EQ(Line(text, "sentierd_validation_duration_seconds_bucket{le=\"0.25\"}"),
            "sentierd_validation_duration_seconds_bucket{le=\"0.25\"} 1");
  // Buckets from 0.1 s to 600 s, increasing.
  const auto& b = DaemonMetrics::DurationBuckets();
  EXPECT_EQ(b.front(), 0.1);
  EXPECT_EQ(b.back(), 600);
  EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
}

TEST(DaemonMetricsTest, GaugesAndTheIntegerPollTimestamp) {
  DaemonMetrics m;
  m.SetQueue(7, 2);
  m.SetPollSucceeded(1795000123);
  const std::string text = m.Render();
  EXPECT_EQ(Line(text, "sentierd_queue_depth"), "sentierd_queue_depth 7");
  EXPECT_EQ(Line(text, "sentierd_jobs_in_flight"), "sentierd_jobs_in_flight 2");
  // Whole seconds, all digits (no exponent).
  EXPECT_EQ(Line(text, "sentierd_last_successful_poll_timestamp_seconds"),
            "sentierd_last_successful_poll_timestamp_seconds 1795000123");
  EXPECT_EQ(m.last_successful_poll(), 1795000123);
}

TEST(DaemonMetricsTest, SpeedupPerModelIsBounded) {
  DaemonMetrics m;
  PublishedVersion v = Version("ranker", "optimized", 1);
  v.speedup = 1.25;
  m.CountPublished(v);
  v.speedup = 1.5;  // a later version replaces the model's value
  m.CountPublished(v);
  PublishedVersion rejected = Version("ranker", "rejected", 1);  // no speed-up: the value stays
  m.CountPublished(rejected);
  EXPECT_EQ(m.model_speedup("ranker"), 1.5);
  EXPECT_TRUE(absl::StrContains(m.Render(), "# TYPE sentierd_model_speedup_ratio gauge\n"));
  EXPECT_EQ(Line(m.Render(), "sentierd_model_speedup_ratio{model=\"ranker\"}"),
            "sentierd_model_speedup_ratio{model=\"ranker\"} 1.5");

  for (int i = 1; i < DaemonMetrics::kMaxModelSeries; ++i) {
    PublishedVersion p = Version(absl::StrCat("model-", i), "unchanged", 1);
    p.speedup = 1.0;
    m.CountPublished(p);
  }
  EXPECT_EQ(m.models_dropped(), 0);
  for (int i = 0; i < 3; ++i) {
    PublishedVersion p = Version(absl::StrCat("late-", i), "optimized", 1);
    p.speedup = 2.0;
    m.CountPublished(p);
  }
  v.speedup = 1.75;  // a model that has a series keeps being updated
  m.CountPublished(v);
  EXPECT_EQ(m.models_dropped(), 3);
  EXPECT_EQ(m.model_speedup("late-0"), std::nullopt);
  EXPECT_EQ(m.model_speedup("ranker"), 1.75);
  const std::string text = m.Render();
  int series = 0;
  for (absl::string_view l : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(l, "sentierd_model_speedup_ratio{")) ++series;
  }
  EXPECT_EQ(series, DaemonMetrics::kMaxModelSeries);
  EXPECT_FALSE(absl::StrContains(text, "late-"));
  EXPECT_EQ(Line(text, "sentierd_metrics_models_dropped_total"),
            "sentierd_metrics_models_dropped_total 3");
}

TEST(DaemonMetricsTest, StackedLayoutGainPerModelAndMeasure) {
  DaemonMetrics m;
  EXPECT_FALSE(absl::StrContains(m.Render(), "sentierd_model_stacked_layout_gain_ratio{"));
  PublishedVersion v = Version("seed", "optimized", 2);
  v.stacked_layout_gain["kernel_launches"] = 8.0;
  v.stacked_layout_gain["training_step"] = 5.5;
  m.CountPublished(v);
  EXPECT_EQ(m.model_stacked_layout_gain("seed", "kernel_launches"), 8.0);
  EXPECT_EQ(m.model_stacked_layout_gain("seed", "training_step"), 5.5);
  EXPECT_FALSE(m.model_stacked_layout_gain("other", "kernel_launches"));
  EXPECT_EQ(Line(m.Render(), "sentierd_model_stacked_layout_gain_ratio{measure=\"training_step\",model=\"seed\"}"),
            "sentierd_model_stacked_layout_gain_ratio{measure=\"training_step\",model=\"seed\"} 5.5");
}

TEST(DaemonMetricsTest, ReadyOnceRulesAreLoadedAndAPollSucceeded) {
  DaemonMetrics m;
  EXPECT_TRUE(absl::StrContains(m.NotReadyReason(), "no rule set")) << m.NotReadyReason();
  m.SetRulesLoaded();
  EXPECT_TRUE(absl::StrContains(m.NotReadyReason(), "not been polled")) << m.NotReadyReason();
  m.SetPollSucceeded(1);
  EXPECT_EQ(m.NotReadyReason(), "");
}

}  // namespace
}  // namespace sentier
