// sentier_state — converts state_dict checkpoints between an artifact with stacked parameters
// (sentier_opt --param_layout=stacked) and the original model's names, without Python.
//
//   sentier_state --artifact=A.pt --to_original   --in=stacked_sd.pt  --out=original_sd.pt
//   sentier_state --artifact=A.pt --from_original --in=original_sd.pt --out=stacked_sd.pt
//   sentier_state --artifact=A.pt --export --out=sd.pt     (the artifact's own state_dict)
//
// Checkpoints are Dict[str, Tensor] files: Python's torch.save(dict(model.state_dict()), f) (a
// plain dict: LibTorch's reader cannot rebuild the OrderedDict with _metadata that state_dict()
// returns) or C++ torch::jit::pickle_save; the output is written with torch::jit::pickle_save
// (torch.load reads it), atomically. --to_original takes a state_dict of the artifact's own parameters and
// buffers (every one, by the artifact's names) and writes the original names; --from_original
// takes the original's state_dict (strict: every original key with its shape, no other) and
// writes the artifact's. The artifact's own methods do the mapping (load_original_state_dict,
// original_state_dict), so the conversion is the one Python would get. An exported program
// (.pt2) holds no methods: its layout's record (extra/sentier_param_layout.json) defines the same
// methods when it is read, so the conversion is the same.
//
// Exit codes: 0 written; 2 bad usage or bad input (unreadable files, an artifact without stacked
// parameters, a checkpoint that does not fit — the message names the key); 1 internal error.
#include <iostream>
#include <sstream>

#include <gflags/gflags.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/script.h>

#include "absl/strings/str_cat.h"
#include "passes/stacked_parameters.h"
#include "passes/torch_error.h"
#include "runtime/model_format.h"
#include "runtime/model_io.h"
#include "runtime/torch_settings.h"
#include "tools/flags.h"

DEFINE_string(artifact, "", "a TorchScript artifact written with --param_layout=stacked");
DEFINE_bool(to_original, false, "convert a checkpoint of the artifact to the original's names");
DEFINE_bool(from_original, false, "convert a checkpoint of the original model to the artifact's");
DEFINE_bool(export, false, "write the artifact's own state_dict (its names) to --out");
DEFINE_string(in, "", "the checkpoint to read (a dict of tensors, torch.save)");
DEFINE_string(out, "", "where to write the converted checkpoint");

namespace {

constexpr int kOk = 0;
constexpr int kInternal = 1;
constexpr int kBadInput = 2;

int Fail(int code, const std::string& msg) {
  std::cerr << "sentier_state: " << msg << "\n";
  return code;
}

absl::StatusOr<c10::Dict<std::string, at::Tensor>> ReadCheckpoint(const std::string& path) {
  auto raw = sentier::LoadPickledValue(path, "checkpoint");
  if (!raw.ok()) {
    // Python's state_dict() is an OrderedDict carrying a _metadata attribute, which LibTorch's
    // unpickler cannot rebuild; a plain dict of the same tensors reads.
    return absl::InvalidArgumentError(absl::StrCat(
        raw.status().message(), " (a checkpoint of Python's model.state_dict() must be saved as a plain dict: "
        "torch.save(dict(model.state_dict()), path))"));
  }
  if (!raw->isGenericDict()) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a dict of tensors (a state_dict)"));
  }
  c10::Dict<std::string, at::Tensor> out;
  for (const auto& kv : raw->toGenericDict()) {
    if (!kv.key().isString() || !kv.value().isTensor()) {
      return absl::InvalidArgumentError(absl::StrCat("'", path, "' holds a non-tensor entry; a state_dict maps names to tensors"));
    }
    out.insert(kv.key().toStringRef(), kv.value().toTensor());
  }
  return out;
}

absl::Status Write(const std::string& path, const c10::Dict<std::string, at::Tensor>& dict) {
  std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(dict));
  return sentier::WriteFileAtomically(path, std::string(bytes.begin(), bytes.end()));
}

int Run() {
  int modes = FLAGS_to_original + FLAGS_from_original + FLAGS_export;
  if (FLAGS_artifact.empty() || FLAGS_out.empty() || modes != 1 || (FLAGS_in.empty() != FLAGS_export)) {
    return Fail(kBadInput, "usage: --artifact=A.pt (--to_original | --from_original) --in=IN.pt --out=OUT.pt, "
                           "or --artifact=A.pt --export --out=OUT.pt");
  }
  auto format = sentier::FormatFor(FLAGS_artifact);
  if (!format.ok()) return Fail(kBadInput, std::string(format.status().message()));
  auto model = (*format)->Load(FLAGS_artifact);
  if (!model.ok() || !model->is_module) {
    return Fail(kBadInput, model.ok() ? "--artifact must be a TorchScript archive or an exported program"
                                      : std::string(model.status().message()));
  }
  torch::jit::Module& artifact = model->module;
  auto layout = sentier::ReadParamLayout(artifact);
  if (!layout.ok()) return Fail(kBadInput, absl::StrCat(FLAGS_artifact, ": ", layout.status().message()));
  if (layout->empty()) {
    return Fail(kBadInput, absl::StrCat(FLAGS_artifact, " stores no stacked parameters (it was not written with "
                                        "--param_layout=stacked): its state_dict has the original names already"));
  }
  c10::Dict<std::string, at::Tensor> out;
  if (FLAGS_export) {
    for (const auto& p : artifact.named_parameters()) out.insert(p.name, p.value.detach());
    for (const auto& b : artifact.named_buffers()) out.insert(b.name, b.value.detach());
    absl::Status st = Write(FLAGS_out, out);
    if (!st.ok()) return Fail(kBadInput, std::string(st.message()));
    std::cout << "sentier_state: " << FLAGS_artifact << " -> " << FLAGS_out << ": " << out.size() << " tensors\n";
    return kOk;
  }
  auto in = ReadCheckpoint(FLAGS_in);
  if (!in.ok()) return Fail(kBadInput, std::string(in.status().message()));
  try {
    if (FLAGS_from_original) {
      artifact.run_method("load_original_state_dict", *in);
      for (const auto& p : artifact.named_parameters()) out.insert(p.name, p.value.detach());
      for (const auto& b : artifact.named_buffers()) out.insert(b.name, b.value.detach());
    } else {
      // The artifact's own state, strictly: every parameter and buffer, with its shape.
      size_t expected = 0;
      for (const auto& p : artifact.named_parameters()) {
        ++expected;
        if (!in->contains(p.name)) return Fail(kBadInput, absl::StrCat(FLAGS_in, ": missing key ", p.name));
        at::Tensor v = in->at(p.name);
        if (v.sizes() != p.value.sizes()) return Fail(kBadInput, absl::StrCat(FLAGS_in, ": key ", p.name, " has the wrong shape"));
        p.value.detach().copy_(v);
      }
      for (const auto& b : artifact.named_buffers()) {
        ++expected;
        if (!in->contains(b.name)) return Fail(kBadInput, absl::StrCat(FLAGS_in, ": missing key ", b.name));
        b.value.detach().copy_(in->at(b.name));
      }
      if (in->size() != expected) return Fail(kBadInput, absl::StrCat(FLAGS_in, ": keys the artifact does not have"));
      for (const auto& kv : artifact.run_method("original_state_dict").toGenericDict()) {
        out.insert(kv.key().toStringRef(), kv.value().toTensor().detach().clone());
      }
    }
  } catch (const std::exception& e) {
    return Fail(kBadInput, absl::StrCat(FLAGS_in, ": ", sentier::TorchErrorMessage(e.what())));
  }
  absl::Status st = Write(FLAGS_out, out);
  if (!st.ok()) return Fail(kBadInput, std::string(st.message()));
  std::cout << "sentier_state: " << FLAGS_in << " -> " << FLAGS_out << ": " << out.size() << " tensors ("
            << (FLAGS_to_original ? "original names" : "the artifact's names") << ")\n";
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("sentier_state --artifact=A.pt (--to_original|--from_original) --in=IN.pt --out=OUT.pt");
  std::string unknown = sentier::FindUnknownFlag(argc, argv);
  if (!unknown.empty()) return Fail(kBadInput, absl::StrCat("unknown flag '", unknown, "' (see --help)"));
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  sentier::ApplyTorchSettings();
  try {
    return Run();
  } catch (const std::exception& e) {
    return Fail(kInternal, absl::StrCat("internal error: ", sentier::TorchErrorMessage(e.what())));
  }
}
