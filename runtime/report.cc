// report.cc — the report's header fields (see the header and report_schema.json); the rest of
// a report is built by runtime/pipeline/report.cc.
#include "runtime/report.h"

namespace sentier {

nlohmann::json NewReport(absl::string_view tool) {
  nlohmann::json j;
  j["schema_version"] = kReportSchemaVersion;
  j["tool"] = std::string(tool);
  j["timings_ms"] = nlohmann::json::object();
  return j;
}

}  // namespace sentier
