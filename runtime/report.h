// report.h — the JSON report of one optimization: one schema for `sentier_opt --report` and
// sentierd's report.json, documented in runtime/report_schema.json ("schema_version": 1) and
// checked against both tools' output by their tests (tools/check_report).
//
//   nlohmann::json j = NewReport("sentierd");   // schema_version, tool, timings_ms
//   j["status"] = "rejected"; j["reason"] = "...";
// An outcome's whole report: BuildReport (runtime/pipeline/pipeline.h, runtime/pipeline/report.cc).
#ifndef SENTIER_RUNTIME_REPORT_H_
#define SENTIER_RUNTIME_REPORT_H_

#include <nlohmann/json.hpp>

#include "absl/strings/string_view.h"
#include "runtime/report_schema.h"

namespace sentier {

// NewReport: {"schema_version": 1, "tool": tool, "timings_ms": {}}.
nlohmann::json NewReport(absl::string_view tool);

}  // namespace sentier

#endif  // SENTIER_RUNTIME_REPORT_H_
