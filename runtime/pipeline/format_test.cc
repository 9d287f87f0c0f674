// format_test.cc — the model-format seam (runtime/model_format.h) proved with a format
// the pipeline has never heard of: a "fake" container that wraps a TorchScript module and the
// model's sample inputs in one file behind a header of its own. The whole pipeline (load with the
// archive's own inputs, rewrite, count, save, validate, decide, keep the original) runs on it,
// and every archive it reads or writes goes through the fake.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include <torch/csrc/jit/serialization/import.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "runtime/file_util.h"
#include "runtime/model_format.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/torch_settings.h"

namespace sentier {
namespace {

const bool kTorchSettings = (ApplyTorchSettings(), true);

constexpr char kMagic[] = "SENTIER-FAKE-FORMAT 1\n";

std::string Runfile(const std::string& path) {
  for (const char* var : {"TEST_SRCDIR", "RUNFILES_DIR"}) {
    if (const char* v = std::getenv(var)) return absl::StrCat(v, "/sentier/", path);
  }
  return path;
}

std::string TempPath(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return absl::StrCat(t != nullptr ? t : "/tmp", "/", name);
}

// The fake container: kMagic, the module archive's size on a line, the module archive, then the
// pickled sample inputs (possibly none).
std::string Wrap(const std::string& module_bytes, const std::string& inputs_bytes) {
  return absl::StrCat(kMagic, module_bytes.size(), "\n", module_bytes, inputs_bytes);
}

struct Parts {
  std::string module_bytes, inputs_bytes;
};

absl::StatusOr<Parts> Unwrap(const std::string& path) {
  auto bytes = ReadFile(path);
  if (!bytes.ok()) return bytes.status();
  if (!absl::StartsWith(*bytes, kMagic)) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a fake archive"));
  }
  const size_t start = sizeof(kMagic) - 1;
  const size_t eol = bytes->find('\n', start);
  size_t size = 0;
  if (eol == std::string::npos || !absl::SimpleAtoi(bytes->substr(start, eol - start), &size) ||
      eol + 1 + size > bytes->size()) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "': the module entry is out of bounds"));
  }
  return Parts{bytes->substr(eol + 1, size), bytes->substr(eol + 1 + size)};
}

class FakeFormat : public ModelFormat {
 public:
  absl::string_view name() const override { return "fake"; }
  bool Names(absl::string_view path) const override { return absl::EndsWith(path, ".fake"); }

  absl::Status CheckArchive(const std::string& path) const override {
    ++checks;
    return Unwrap(path).status();
  }

  absl::StatusOr<Model> Load(const std::string& path) const override {
    if (absl::Status sound = CheckArchive(path); !sound.ok()) return sound;
    ++loads;
    auto parts = Unwrap(path);
    Model m;
    m.path = path;
    std::istringstream in(parts->module_bytes);
    m.module = torch::jit::load(in, c10::Device(c10::kCPU));
    m.is_module = true;
    m.graph = m.module.get_method("forward").graph();
    return m;
  }

  absl::StatusOr<std::vector<c10::IValue>> SampleInputs(const Model& model,
                                                        const std::string& inputs_path) const override {
    ++sample_inputs;
    EXPECT_TRUE(inputs_path.empty()) << "the fake keeps its inputs in the archive";
    auto parts = Unwrap(model.path);
    if (!parts.ok()) return parts.status();
    if (parts->inputs_bytes.empty()) return absl::NotFoundError("no inputs in the archive");
    std::vector<char> pickled(parts->inputs_bytes.begin(), parts->inputs_bytes.end());
    c10::IValue inputs = torch::jit::pickle_load(pickled);
    const auto& elements = inputs.toTupleRef().elements();
    return std::vector<c10::IValue>(elements.begin(), elements.end());
  }

  absl::Status CanSave(const Model& model) const override {
    return model.is_module ? absl::OkStatus() : absl::InvalidArgumentError("the fake needs a module");
  }

  absl::Status Save(const Model& model, const std::string& path) const override {
    ++saves;
    std::ostringstream out;
    model.module.save(out);
    return WriteFileAtomically(path, Wrap(out.str(), ""));
  }

  absl::StatusOr<torch::jit::Module> Runnable(const Model& model) const override {
    ++runnables;
    return ModelFormat::Runnable(model);
  }

  mutable int checks = 0, loads = 0, sample_inputs = 0, saves = 0, runnables = 0;
};

// FakeTowers: the corpus towers model and its inputs, wrapped in one fake archive.
std::string FakeTowers(const std::string& name) {
  const std::string dir = Runfile("testdata/models/torch1.13/towers/");
  auto module_bytes = ReadFile(dir + "scripted.pt");
  auto inputs_bytes = ReadFile(dir + "inputs.pt");
  EXPECT_TRUE(module_bytes.ok() && inputs_bytes.ok());
  const std::string path = TempPath(name);
  EXPECT_TRUE(WriteFileAtomically(path, Wrap(*module_bytes, *inputs_bytes)).ok());
  return path;
}

PipelineRequest FakeRequest(const FakeFormat& fake, const std::string& source, const std::string& artifact) {
  PipelineRequest req;
  req.format = &fake;
  req.model_path = source;
  auto rules = LoadRules({DefaultRulesDir()});
  EXPECT_TRUE(rules.ok()) << rules.status();
  req.rules = *rules;
  req.artifact_path = TempPath(artifact);
  req.validate = true;
  return req;
}

TEST(PipelineFormatTest, TheWholePipelineRunsOnAFormatItDoesNotKnow) {
  FakeFormat fake;
  PipelineRequest req = FakeRequest(fake, FakeTowers("towers.fake"), "towers_opt.fake");
  Outcome out = OptimizeModel(req);
  ASSERT_FALSE(out.failed_stage) << out.reason;
  EXPECT_EQ(out.status, ReportStatus::kOptimized) << out.reason;
  ASSERT_TRUE(out.loaded);
  EXPECT_TRUE(out.loaded->has_inputs);  // from the archive itself: no inputs file was given
  EXPECT_LT(out.ops_after.forward, out.loaded->ops.forward);
  ASSERT_TRUE(out.validation);
  EXPECT_TRUE(out.validation->check.equivalent);
  // Every archive went through the fake: read (the original twice: load and validation; the
  // artifact once), written once, run by the checker.
  EXPECT_EQ(fake.saves, 1);
  EXPECT_GE(fake.loads, 3);
  EXPECT_EQ(fake.checks, fake.loads);
  EXPECT_GE(fake.sample_inputs, 1);
  EXPECT_GE(fake.runnables, 2);
  // The artifact is in the fake's container and runs as the fake reads it.
  auto artifact = fake.Load(req.artifact_path);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  auto inputs = fake.SampleInputs(*fake.Load(req.model_path), "");
  ASSERT_TRUE(inputs.ok());
  EXPECT_TRUE(artifact->module.forward(*inputs).isTensor());
  nlohmann::json j = BuildReport(req, out, "test");
  EXPECT_EQ(j["status"], "optimized");
  EXPECT_EQ(j["options"]["mode"], "training");
}

TEST(PipelineFormatTest, AnUnchangedArtifactIsTheOriginalAsTheFormatKeepsIt) {
  FakeFormat fake;
  PipelineRequest req = FakeRequest(fake, FakeTowers("towers_kept.fake"), "towers_kept_opt.fake");
  auto none = req.rules->Filter("no_such_rule", "");
  ASSERT_TRUE(none.ok());
  req.rules = *none;
  Outcome out = OptimizeModel(req);
  EXPECT_EQ(out.status, ReportStatus::kUnchanged) << out.reason;
  EXPECT_EQ(*ReadFile(req.artifact_path), *ReadFile(req.model_path));
  EXPECT_EQ(fake.saves, 0);
}

TEST(PipelineFormatTest, AHostileArchiveIsALoadFailureNamingIt) {
  FakeFormat fake;
  const std::string bad = TempPath("bad.fake");
  ASSERT_TRUE(WriteFileAtomically(bad, absl::StrCat(kMagic, "999999\nshort")).ok());
  PipelineRequest req = FakeRequest(fake, bad, "bad_opt.fake");
  Outcome out = OptimizeModel(req);
  ASSERT_TRUE(out.failed_stage);
  EXPECT_EQ(*out.failed_stage, PipelineStage::kLoad);
  EXPECT_EQ(out.status, ReportStatus::kRejected);
  EXPECT_TRUE(absl::StrContains(out.reason, "the module entry is out of bounds")) << out.reason;
  EXPECT_EQ(fake.saves, 0);
}

}  // namespace
}  // namespace sentier
