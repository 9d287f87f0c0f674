// pt2_format_test.cc — exported programs through the format seam: read Python-free with the
// outputs torch computed, written back and read again equal, rewritten by the rule library and
// still equal (outputs and every parameter gradient, by the one checker), and hostile archives
// refused with the entry named.
#include "runtime/pt2/pt2_format.h"

#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "absl/strings/str_cat.h"
#include "runtime/equivalence_checker.h"
#include "runtime/file_util.h"
#include "runtime/model_io.h"
#include "runtime/pipeline/pipeline.h"
#include "runtime/pt2/exported_program.h"
#include "runtime/pt2/pt2_archive.h"
#include "runtime/torch_settings.h"

namespace sentier {
namespace {

std::string Data(const std::string& name) { return absl::StrCat("runtime/pt2/testdata/", name); }

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir ? dir : "/tmp", "/", name);
}

class Pt2FormatTest : public ::testing::Test {
 protected:
  void SetUp() override { ApplyTorchSettings(); }
  const ModelFormat& format_ = ExportedProgramFormat();
};

TEST_F(Pt2FormatTest, ReadsTheProgramWithTorchsOutputs) {
  auto model = format_.Load(Data("towers.pt2"));
  ASSERT_TRUE(model.ok()) << model.status();
  // The parameters keep their dotted names.
  std::vector<std::string> names;
  for (const auto& p : model->module.named_parameters()) names.push_back(p.name);
  EXPECT_NE(std::find(names.begin(), names.end(), "lins.3.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "emb.weight"), names.end());
  auto inputs = format_.SampleInputs(*model, "");
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  ASSERT_EQ(inputs->size(), 2u);
  auto bytes = ReadFile(Data("towers.expected.pt"));
  ASSERT_TRUE(bytes.ok());
  c10::IValue expected = torch::jit::pickle_load(std::vector<char>(bytes->begin(), bytes->end()));
  at::Tensor out = model->module.forward(*inputs).toTensor();
  EXPECT_TRUE(at::allclose(out, expected.toTupleRef().elements()[0].toTensor(), 1e-5, 1e-5));
}

TEST_F(Pt2FormatTest, WritesAProgramItReadsBackEqual) {
  for (const char* name : {"towers", "indexing"}) {
    SCOPED_TRACE(name);
    auto model = format_.Load(Data(absl::StrCat(name, ".pt2")));
    ASSERT_TRUE(model.ok()) << model.status();
    std::string out = TempPath(absl::StrCat(name, ".copy.pt2"));
    ASSERT_TRUE(format_.Save(*model, out).ok()) << format_.Save(*model, out);
    auto again = format_.Load(out);
    ASSERT_TRUE(again.ok()) << again.status();
    auto inputs = format_.SampleInputs(*model, "");
    ASSERT_TRUE(inputs.ok()) << inputs.status();
    CheckOptions options;
    auto report = EquivalenceChecker(options).Check(model->module, again->module, *inputs);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->equivalent);
  }
}

TEST_F(Pt2FormatTest, ThePipelineRewritesAProgramIntoAnEqualSmallerOne) {
  PipelineRequest req;
  req.model_path = Data("towers.pt2");
  auto rules = LoadRules({DefaultRulesDir()});
  ASSERT_TRUE(rules.ok()) << rules.status();
  req.rules = *rules;
  req.artifact_path = TempPath("towers.opt.pt2");
  req.validate = true;
  Outcome out = OptimizeModel(req);
  ASSERT_FALSE(out.failed_stage) << out.reason;
  EXPECT_EQ(out.status, ReportStatus::kOptimized) << out.reason;
  ASSERT_TRUE(out.validation);
  EXPECT_TRUE(out.validation->check.equivalent);
  ASSERT_TRUE(out.loaded);
  EXPECT_LT(out.ops_after.launches_training_step, out.loaded->ops.launches_training_step);
  auto artifact = format_.Load(req.artifact_path);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  std::vector<std::string> names;
  for (const auto& p : artifact->module.named_parameters()) names.push_back(p.name);
  EXPECT_NE(std::find(names.begin(), names.end(), "lins.0.weight"), names.end()) << "original layout keeps names";
}

// An archive with one entry changed.
std::string Tampered(const std::string& entry, const std::function<void(std::string&)>& edit) {
  auto bytes = ReadFile(Data("towers.pt2"));
  EXPECT_TRUE(bytes.ok());
  auto archive = ReadPt2Archive(*bytes, "towers.pt2");
  EXPECT_TRUE(archive.ok()) << archive.status();
  edit(archive->entries[entry]);
  auto zip = WritePt2Archive(*archive);
  EXPECT_TRUE(zip.ok());
  std::string path = TempPath(absl::StrCat("tampered_", std::hash<std::string>()(*zip), ".pt2"));
  EXPECT_TRUE(WriteFileAtomically(path, *zip).ok());
  return path;
}

void Replace(std::string& s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  s.replace(at, from.size(), to);
}

TEST_F(Pt2FormatTest, HostileArchivesAreRefusedNamingTheEntry) {
  std::string not_zip = TempPath("not_zip.pt2");
  ASSERT_TRUE(WriteFileAtomically(not_zip, "this is not a zip archive at all").ok());
  auto truncated_bytes = ReadFile(Data("towers.pt2"));
  ASSERT_TRUE(truncated_bytes.ok());
  std::string truncated = TempPath("truncated.pt2");
  ASSERT_TRUE(WriteFileAtomically(truncated, truncated_bytes->substr(0, truncated_bytes->size() / 2)).ok());
  const std::string json(kPt2ProgramEntry), weights(kPt2WeightsConfigEntry);
  struct Case {
    std::string path;
    std::string says;
  } cases[] = {
      {not_zip, "not_zip.pt2"},
      {truncated, "truncated.pt2"},
      {Data("escape.pt2"), "escapes"},
      {Tampered(json, [](std::string& s) { s = s.substr(0, s.size() / 2); }), "malformed JSON"},
      {Tampered(json, [](std::string& s) { Replace(s, "\"major\": 8", "\"major\": 99"); }), "schema version"},
      {Tampered(json, [](std::string& s) { Replace(s, "torch.ops.aten.cat.default", "torch.ops.mylib.cat.default"); }),
       "not an ATen operator"},
      {Tampered(json, [](std::string& s) { Replace(s, "torch.ops.aten.cat.default", "torch.ops.aten.no_such_op.default"); }),
       "no_such_op"},
      {Tampered(json, [](std::string& s) { Replace(s, "{\"as_int\": 3}", "{\"as_sym_int\": {\"as_name\": \"s0\"}}"); }),
       "symbolic size"},
      {Tampered("data/weights/weight_0", [](std::string& s) { s.resize(8); }), "truncated"},
      {Tampered(weights, [](std::string& s) { s = "{"; }), "model_weights_config.json"},
      {Tampered("archive_format", [](std::string& s) { s = "zip"; }), "archive_format"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path + " should say " + c.says);
    auto model = format_.Load(c.path);
    ASSERT_FALSE(model.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(model.status())) << model.status();
    EXPECT_NE(model.status().message().find(c.says), std::string::npos) << model.status();
  }
}

}  // namespace
}  // namespace sentier
