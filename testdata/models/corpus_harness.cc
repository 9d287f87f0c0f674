// corpus_harness.cc — see corpus_harness.h.
#include "testdata/models/corpus_harness.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>

#include <gtest/gtest.h>
#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/equivalence_checker.h"
#include "runtime/graph_runner.h"
#include "runtime/model_format.h"

namespace sentier {
namespace corpus {

std::string RunfilesPath(const std::string& rel) {
  for (const char* var : {"TEST_SRCDIR", "RUNFILES_DIR"}) {
    if (const char* v = std::getenv(var)) return absl::StrCat(v, "/sentier/", rel);
  }
  return rel;
}

const nlohmann::json& ManifestOf(const std::string& dir) {
  static std::mutex mu;
  static std::map<std::string, nlohmann::json>* manifests = new std::map<std::string, nlohmann::json>;
  std::lock_guard<std::mutex> lock(mu);
  auto it = manifests->find(dir);
  if (it == manifests->end()) {
    std::ifstream in(dir + "/MANIFEST.json");
    if (!in.good()) throw std::runtime_error(dir + "/MANIFEST.json is missing");
    it = manifests->emplace(dir, nlohmann::json::parse(in)).first;
  }
  return it->second;
}

const nlohmann::json* EntryOf(const std::string& dir, const std::string& model) {
  for (const nlohmann::json& e : ManifestOf(dir)["models"]) {
    if (e["name"] == model) return &e;
  }
  return nullptr;
}

std::string Archive::path() const {
  if (exported()) return absl::StrCat(dir, "/pt2/", model, ".pt2");
  return absl::StrCat(dir, "/", torch, "/", model, "/", kind, ".pt");
}
std::string Archive::inputs() const {
  return exported() ? "" : absl::StrCat(dir, "/", torch, "/", model, "/inputs.pt");  // a .pt2 holds its own
}

void PrintTo(const Archive& a, std::ostream* os) { *os << a.torch << "/" << a.model << "/" << a.kind; }

std::string ArchiveName(const Archive& a) {
  std::string name = absl::StrCat(a.torch, "_", a.model, "_", a.kind);
  for (char& c : name) {
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

std::vector<Archive> ArchivesOf(const std::string& dir) {
  std::vector<Archive> out;
  const nlohmann::json& manifest = ManifestOf(dir);
  for (const char* torch : {"torch1.13", "torch2.11"}) {
    for (const nlohmann::json& e : manifest["models"]) {
      std::string model = e["name"];
      // `archives` names the torch versions that wrote the model's archives: the entry's, else
      // the manifest's (a set written by one version so far), else both.
      const nlohmann::json* archives = e.contains("archives") ? &e["archives"]
                                       : manifest.contains("archives") ? &manifest["archives"]
                                                                       : nullptr;
      if (archives != nullptr) {
        const auto& written = *archives;
        if (std::find(written.begin(), written.end(), torch) == written.end()) continue;
      }
      // `scripted`: false for a model that does not script (deployed traced only).
      if (e.value("scripted", true)) out.push_back({dir, torch, model, "scripted"});
      if (e.value("traced", false)) out.push_back({dir, torch, model, "traced"});
    }
  }
  // The exported programs pt2/MANIFEST.json lists as exported (torch refuses some).
  std::ifstream pt2(dir + "/pt2/MANIFEST.json");
  if (pt2.good()) {
    nlohmann::json exported = nlohmann::json::parse(pt2);
    for (const nlohmann::json& e : manifest["models"]) {
      const nlohmann::json& m = exported["modules"].value(e["name"].get<std::string>(), nlohmann::json::object());
      if (m.value("exported", false)) out.push_back({dir, "torch2.11", e["name"], "exported"});
    }
  }
  return out;
}

absl::StatusOr<Optimized> LoadAndOptimize(const Archive& a, std::string* skip, bool stacked,
                                          const std::vector<std::string>& without) {
  std::ifstream probe(a.path());
  if (!probe.good()) return absl::NotFoundError(absl::StrCat(a.path(), " is missing"));
  const ModelFormat* format = *FormatFor(a.path());
  auto model = format->Load(a.path());
  if (!model.ok()) {
    if (a.torch != "torch1.13" && !a.exported()) {
      *skip = absl::StrCat(a.torch, " archive not readable by this LibTorch: ", model.status().message());
    }
    return model.status();
  }
  auto inputs = format->SampleInputs(*model, a.inputs());
  if (!inputs.ok()) return inputs.status();
  static const std::shared_ptr<const RuleSet> rules = [] {
    auto r = LoadRules({DefaultRulesDir()});
    if (!r.ok()) throw std::runtime_error(std::string(r.status().message()));
    return *r;
  }();
  Optimized o{std::move(*model), std::move(*inputs), {}, -1};
  std::vector<c10::IValue> samples = {o.model.module._ivalue()};
  samples.insert(samples.end(), o.inputs.begin(), o.inputs.end());
  OptimizeOptions opts;
  opts.self = o.model.module._ivalue();
  opts.sample_inputs = &samples;
  opts.stacked_parameters = stacked;
  opts.buffer_writes = format->WritesModuleBuffers();
  auto report = OptimizeGraph(o.model.graph, without.empty() ? *rules : *rules->Without(without), opts);
  if (!report.ok()) return report.status();
  o.report = *report;
  auto ops = CountAtenOps(o.model.graph, samples);
  if (!ops.ok()) return ops.status();
  o.aten_ops_after = *ops;
  return o;
}

void ExpectRulesFired(const OptimizeReport& report, const nlohmann::json& expected) {
  for (const std::string& want : expected) {
    bool any = false;
    for (absl::string_view rule : absl::StrSplit(want, '|')) {
      auto it = report.stats.applications.find(std::string(rule));
      any = any || (it != report.stats.applications.end() && it->second > 0);
    }
    EXPECT_TRUE(any) << "the manifest expects " << want << " to fire";
  }
  EXPECT_TRUE(report.stats.stopped.empty());
  EXPECT_TRUE(report.stats.errors.empty()) << report.stats.first_error.begin()->second;
}

nlohmann::json ExpectedRules(const nlohmann::json& entry, const nlohmann::json& rules, const Archive& a) {
  nlohmann::json expected = nlohmann::json::array();
  const nlohmann::json differs = entry.value("exported_differs", nlohmann::json::object());
  for (const nlohmann::json& rule : rules) {
    if (!a.exported() || !differs.contains(rule.get<std::string>())) expected.push_back(rule);
  }
  return expected;
}

std::string FiredRules(const OptimizeReport& report) {
  std::vector<std::string> fired;
  for (const auto& [name, n] : report.stats.applications) fired.push_back(absl::StrCat(name, " x", n));
  return absl::StrJoin(fired, ", ");
}

void ExpectEquivalentArtifact(const Archive& a, Optimized& o, const std::string& suffix, bool no_batch_x2) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const ModelFormat* format = *FormatFor(a.path());
  std::string out = absl::StrCat(tmp ? tmp : "/tmp", "/", a.torch, "-", a.model, "-", a.kind, suffix,
                                 a.exported() ? "2" : "");
  absl::Status saved = format->Save(o.model, out);
  ASSERT_TRUE(saved.ok()) << saved;
  auto reloaded = format->Load(out);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  auto original = format->Load(a.path());
  ASSERT_TRUE(original.ok());
  std::map<std::string, at::Tensor> artifact_buffers;
  for (const auto& b : reloaded->module.named_buffers(/*recurse=*/true)) artifact_buffers[b.name] = b.value;
  for (const auto& b : original->module.named_buffers(/*recurse=*/true)) {
    auto it = artifact_buffers.find(b.name);
    if (it == artifact_buffers.end()) continue;  // batched away (stacked layouts are tested elsewhere)
    EXPECT_TRUE(at::equal(it->second, b.value)) << "buffer " << b.name << " changed while optimizing";
  }
  CheckOptions check;  // CPU, outputs and gradients, samples + 1 random set + batch x2
  check.trials = 2;
  check.batch_x2 = !format->StaticShapes();
  auto r = EquivalenceChecker(check).Check(original->module, reloaded->module, o.inputs);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->equivalent) << r->first_failure;
  bool param_grads = false, batch_x2 = false, random = false;
  for (const CheckFinding& f : r->findings) {
    param_grads |= f.what.rfind("grad of param ", 0) == 0;
    batch_x2 |= f.trial == "batch x2";
    random |= f.trial == "random 1";
  }
  bool has_params = false;
  for (const at::Tensor& p : original->module.parameters()) has_params |= p.requires_grad();
  EXPECT_TRUE(param_grads || !has_params) << "no parameter gradient was compared";
  // An exported program's shapes are static: it has no twice-the-batch trial.
  EXPECT_TRUE(random && (batch_x2 || no_batch_x2 || a.exported()))
      << "trials skipped: " << absl::StrJoin(r->skipped_trials, "; ");
}

}  // namespace corpus
}  // namespace sentier
