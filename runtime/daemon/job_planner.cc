#include "runtime/daemon/job_planner.h"

#include "absl/strings/str_cat.h"

namespace sentier {

std::string Job::Key() const { return absl::StrCat(source.model, "/", source.version); }

std::vector<Job> JobPlanner::Plan(const RegistrySnapshot& snapshot, const DaemonState& state,
                                  const std::string& rules_fp,
                                  const std::set<std::string>& busy) {
  std::vector<Job> jobs;
  for (const auto& [model, versions] : snapshot.models) {
    for (size_t i = 0; i < versions.size(); ++i) {
      const VersionInfo& v = versions[i];
      Job job;
      job.source = v;
      if (busy.count(job.Key())) continue;
      const VersionRecord* rec = state.Find(model, v.version);
      bool latest = i + 1 == versions.size();
      if (rec == nullptr) {
        job.why = "new version";
      } else if (rec->signature != v.signature) {
        job.why = "source changed";
      } else if (latest && v.refused_reason.empty() && rec->rules_fp != rules_fp) {
        job.why = "rules changed";
        job.reprocess = true;
      } else {
        continue;
      }
      jobs.push_back(std::move(job));
    }
  }
  return jobs;
}

bool JobPlanner::StillNeeded(const Job& job, const VersionRecord* published, const std::string& rules_fp) {
  if (published == nullptr || published->signature != job.source.signature) return true;
  return job.reprocess && published->rules_fp != rules_fp;
}

}  // namespace sentier
