#include "runtime/daemon/daemon_state.h"

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/file_util.h"

namespace sentier {

absl::StatusOr<DaemonState> DaemonState::Load(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) return DaemonState();
    return text.status();
  }
  auto state = FromJson(*text);
  if (!state.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("corrupt state file '", path, "': ", state.status().message()));
  }
  return state;
}

absl::Status DaemonState::Save(const std::string& path) const {
  return WriteFileAtomically(path, ToJson());
}

std::string DaemonState::ToJson() const {
  nlohmann::json j;
  j["format"] = 1;
  j["models"] = nlohmann::json::object();
  for (const auto& [model, versions] : models_) {
    nlohmann::json m = nlohmann::json::object();
    for (const auto& [v, r] : versions) {
      m[std::to_string(v)] = {{"status", ReportStatusName(r.status)},         {"reason", r.reason},
                              {"signature", r.signature},   {"rules_fp", r.rules_fp},
                              {"arch_fp", r.arch_fp},       {"artifact_sha", r.artifact_sha},
                              {"kept_earlier", r.kept_earlier}};
    }
    j["models"][model] = m;
  }
  return j.dump(1) + "\n";
}

absl::StatusOr<DaemonState> DaemonState::FromJson(const std::string& text) {
  DaemonState state;
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    for (const auto& [model, versions] : j.at("models").items()) {
      for (const auto& [vs, r] : versions.items()) {
        int64_t v = 0;
        if (!absl::SimpleAtoi(vs, &v)) return absl::InvalidArgumentError("bad version " + vs);
        VersionRecord rec;
        absl::StatusOr<ReportStatus> status = ParseReportStatus(r.value("status", ""));
        if (!status.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(model, " version ", vs, ": ", status.status().message()));
        }
        rec.status = *status;
        rec.reason = r.value("reason", "");
        rec.signature = r.value("signature", "");
        rec.rules_fp = r.value("rules_fp", "");
        rec.arch_fp = r.value("arch_fp", "");
        rec.artifact_sha = r.value("artifact_sha", "");
        rec.kept_earlier = r.value("kept_earlier", false);
        state.models_[model][v] = rec;
      }
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return state;
}

const VersionRecord* DaemonState::Find(const std::string& model, int64_t version) const {
  auto m = models_.find(model);
  if (m == models_.end()) return nullptr;
  auto v = m->second.find(version);
  return v == m->second.end() ? nullptr : &v->second;
}

void DaemonState::Set(const std::string& model, int64_t version, const VersionRecord& record) {
  models_[model][version] = record;
}

std::string DaemonState::PreviousArchFp(const std::string& model, int64_t version) const {
  auto m = models_.find(model);
  if (m == models_.end()) return "";
  for (auto it = m->second.rbegin(); it != m->second.rend(); ++it) {
    if (it->first < version && !it->second.arch_fp.empty()) return it->second.arch_fp;
  }
  return "";
}

int64_t DaemonState::PreviousDecided(const std::string& model, int64_t version,
                                     const std::string& rules_fp) const {
  auto m = models_.find(model);
  if (m == models_.end()) return 0;
  for (auto it = m->second.rbegin(); it != m->second.rend(); ++it) {
    const VersionRecord& r = it->second;
    if (it->first >= version || r.status == ReportStatus::kRejected || r.kept_earlier) continue;
    return r.rules_fp == rules_fp ? it->first : 0;
  }
  return 0;
}

}  // namespace sentier
