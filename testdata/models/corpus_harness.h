// corpus_harness.h — the one way a test takes a Python-authored archive through Sentier: the
// corpus (testdata/models, corpus_test) and the Optimus conformance set
// (testdata/optimus_conformance, conformance_test) share it.
//
// A set is a directory with MANIFEST.json (`models`: entries with `name`, `traced`, optional
// `archives` and `scripted` (false: traced only)) and one directory per torch version, `torch1.13/<name>/{scripted,traced,inputs}.pt`.
// For an archive: load it with its sample inputs (conformed to forward's schema), optimize it with
// the shipped rules (OptimizeGraph: the rewrite stage of sentier_opt's pipeline), check the
// rules that fired, save the artifact, load it back and check it against the original with the
// EquivalenceChecker (outputs and the gradients of every input and parameter, on the samples, a
// fresh draw and twice the batch, CPU).
#ifndef SENTIER_TESTDATA_MODELS_CORPUS_HARNESS_H_
#define SENTIER_TESTDATA_MODELS_CORPUS_HARNESS_H_

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <ATen/core/ivalue.h>

#include "absl/status/statusor.h"
#include "passes/optimizer.h"
#include "runtime/model_io.h"

namespace sentier {
namespace corpus {

// The directory `rel` (e.g. "testdata/models") in the test's runfiles, or relative to the
// working directory outside Bazel.
std::string RunfilesPath(const std::string& rel);

// A set's MANIFEST.json, parsed once per directory.
const nlohmann::json& ManifestOf(const std::string& dir);
// The manifest entry of `model` (nullptr: none).
const nlohmann::json* EntryOf(const std::string& dir, const std::string& model);

struct Archive {
  std::string dir;    // the set's directory
  std::string torch;  // "torch1.13", "torch2.11"
  std::string model;
  std::string kind;   // "scripted", "traced", "exported" (pt2/<model>.pt2, torch.export's archive)
  bool exported() const { return kind == "exported"; }
  std::string path() const;
  std::string inputs() const;  // "" for an exported program: the archive holds its inputs
};
void PrintTo(const Archive& a, std::ostream* os);
// A gtest parameter name: torch1_13_<model>_<kind>.
std::string ArchiveName(const Archive& a);

// Every archive the manifest in `dir` names: per torch version (torch1.13, torch2.11) that its
// entry's `archives` lists (else the manifest's top-level `archives`; default: both), the scripted one and, where `traced` is true, the traced one;
// then each exported program pt2/MANIFEST.json lists as exported (kind "exported").
std::vector<Archive> ArchivesOf(const std::string& dir);

struct Optimized {
  Model model;
  std::vector<c10::IValue> inputs;  // forward's arguments (no self)
  OptimizeReport report;
  int64_t aten_ops_after = -1;      // per forward, of the optimized graph
};

// Loads and optimizes one archive with the shipped rules, less those named in `without` (the
// rules sentier_opt's untimed decision left out); sets *skip when this LibTorch cannot read an
// archive of a newer torch.
absl::StatusOr<Optimized> LoadAndOptimize(const Archive& a, std::string* skip, bool stacked = false,
                                          const std::vector<std::string>& without = {});

// The rules `expected` names must fire ("a|b": one of them; scripted and traced code spell some
// idioms differently), and no rule may fail or be stopped.
void ExpectRulesFired(const OptimizeReport& report, const nlohmann::json& expected);
// ExpectedRules: `rules` (a list from the manifest entry), less, for an exported program, those
// the entry's `exported_differs` names (rule -> why torch.export's graph has no such waste: it
// spells the idiom otherwise, or computes the size statically).
nlohmann::json ExpectedRules(const nlohmann::json& entry, const nlohmann::json& rules, const Archive& a);
// "rule x3, other x1".
std::string FiredRules(const OptimizeReport& report);

// Saves the optimized archive, loads it back and checks it against the original: outputs and
// the gradients of every input and parameter, on the samples, a random set and twice the batch
// (that trial may be skipped with `no_batch_x2`: inputs that cannot be doubled along dim 0).
// Buffers must be the original's (optimizing runs the model; those runs must not train it).
void ExpectEquivalentArtifact(const Archive& a, Optimized& o, const std::string& suffix,
                              bool no_batch_x2 = false);

}  // namespace corpus
}  // namespace sentier

#endif  // SENTIER_TESTDATA_MODELS_CORPUS_HARNESS_H_
