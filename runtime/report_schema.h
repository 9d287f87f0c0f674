// report_schema.h — the version of the report schema (runtime/report_schema.json) that
// sentier_opt and sentierd write. No torch: sentierd's daemon process includes it.
#ifndef SENTIER_RUNTIME_REPORT_SCHEMA_H_
#define SENTIER_RUNTIME_REPORT_SCHEMA_H_

namespace sentier {

constexpr int kReportSchemaVersion = 1;

}  // namespace sentier

#endif  // SENTIER_RUNTIME_REPORT_SCHEMA_H_
