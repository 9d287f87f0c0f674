// sentier_check — is an optimized model numerically the same model as its original?
//
//   sentier_check --reference=A.pt --candidate=B.pt --inputs=inputs.pt
//   sentier_check --reference=A.pt2 --candidate=B.pt2      (the archive's own sample inputs)
//                 [--device=auto|cpu|cuda] [--mode=inference|training|both] [--dtype=float32|bfloat16]
//                 [--trials=N] [--seed=S] [--time] [--report=check.json]
//
// Runs both models on the sample inputs, on fresh random inputs of the same shapes and dtypes
// (integer index tensors drawn within the observed range) and at twice the batch size; compares
// every output and, in training mode, the gradients of every floating input and parameter (by
// name) under a fixed random projection of the outputs. Tolerance: runtime/equivalence_checker.h.
//
// Exit codes: 0 equivalent; 1 not equivalent (the message and the report name the output or
// gradient, its errors, the tolerance and the trial); 2 bad input (missing/corrupt model or
// inputs, a reference that does not run on the samples, bad flags, CUDA asked for without one).
#include <iostream>

#include <gflags/gflags.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include "absl/strings/match.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/equivalence_checker.h"
#include "runtime/progress_deadline.h"
#include "runtime/model_format.h"
#include "runtime/model_io.h"
#include "runtime/options_enums.h"
#include "runtime/torch_settings.h"
#include "passes/torch_error.h"

DEFINE_string(reference, "", "the original model (.pt)");
DEFINE_string(candidate, "", "the optimized model (.pt)");
DEFINE_string(inputs, "", "sample inputs (tuple of tensors, torch.save)");
DEFINE_string(device, "auto", "auto (CUDA when LibTorch and the machine have it), cpu or cuda");
DEFINE_string(mode, "both", "inference (outputs), training (gradients) or both");
DEFINE_string(dtype, "float32", "float32 or bfloat16: floating inputs and parameters are cast");
DEFINE_int32(trials, 3, "sample inputs plus trials-1 random input sets (plus one at batch x2)");
DEFINE_uint64(seed, 0, "seed for random inputs and projections");
DEFINE_bool(time, false,
            "also time both models (median step, device synchronized) and measure the peak "
            "memory of one step; on by default when the device is CUDA");
DEFINE_string(timing, "auto",
              "with --time: interpreter (the graph executor's optimizations off), executor (on, as "
              "users run artifacts; needs LibTorch 2.x; a step that makes no progress for 15 s is "
              "given up on and the interpreter times instead) or auto (executor on LibTorch 2.x, "
              "else interpreter)");
DEFINE_double(executor_stall_s, sentier::kDefaultExecutorStallS,
              "with executor timing: a timed step that has not finished after this many seconds is "
              "given up on, and both models are timed in the interpreter instead");
DEFINE_string(report, "", "write a JSON report here");

namespace {

int Fail(int code, const std::string& msg) {
  std::cerr << "sentier_check: " << msg << "\n";
  return code;
}

// The --device flag: where to run (InvalidArgument with the message to print when it cannot).
absl::StatusOr<sentier::Device> DeviceFromFlag() {
  absl::StatusOr<sentier::DeviceRequest> device = sentier::ParseDeviceRequest(FLAGS_device);
  if (!device.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--device must be auto, cpu or cuda, not '", FLAGS_device, "'"));
  }
  switch (*device) {
    case sentier::DeviceRequest::kAuto:
      return torch::cuda::is_available() ? sentier::Device::kCuda : sentier::Device::kCpu;
    case sentier::DeviceRequest::kCuda:
      if (!torch::cuda::is_available()) {
        return absl::InvalidArgumentError("--device=cuda but no CUDA device is available");
      }
      return sentier::Device::kCuda;
    case sentier::DeviceRequest::kCpu:
      break;
  }
  return sentier::Device::kCpu;
}

// Parse flags: the check's options (InvalidArgument with the message to print for a bad flag,
// or a --report that could not be written: refused before the check runs, not after).
absl::StatusOr<sentier::CheckOptions> OptionsFromFlags() {
  if (FLAGS_reference.empty() || FLAGS_candidate.empty()) {
    return absl::InvalidArgumentError("--reference and --candidate are required");
  }
  if (FLAGS_inputs.empty() && !absl::EndsWith(FLAGS_reference, ".pt2")) {
    return absl::InvalidArgumentError("--inputs is required (only an exported program, .pt2, holds its own)");
  }
  sentier::CheckOptions opts;
  absl::StatusOr<sentier::Device> device = DeviceFromFlag();
  if (!device.ok()) return device.status();
  opts.device = *device;
  absl::StatusOr<sentier::ValidationMode> mode = sentier::ParseValidationMode(FLAGS_mode);
  if (!mode.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mode must be inference, training or both, not '", FLAGS_mode, "'"));
  }
  opts.inference = *mode != sentier::ValidationMode::kTraining;
  opts.training = *mode != sentier::ValidationMode::kInference;
  if (!FLAGS_report.empty()) {
    absl::Status writable = sentier::CheckWritableDirOf(FLAGS_report);
    if (!writable.ok()) return absl::InvalidArgumentError(writable.message());
  }
  if (FLAGS_dtype == "bfloat16") {
    opts.dtype = c10::kBFloat16;
  } else if (FLAGS_dtype != "float32") {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype must be float32 or bfloat16, not '", FLAGS_dtype, "'"));
  }
  opts.trials = FLAGS_trials;
  opts.seed = FLAGS_seed;
  gflags::CommandLineFlagInfo time_flag;
  bool time_default = gflags::GetCommandLineFlagInfo("time", &time_flag) && time_flag.is_default;
  opts.time = time_default ? opts.device == sentier::Device::kCuda : FLAGS_time;
  absl::StatusOr<sentier::StepTiming> timing = sentier::StepTimingFromFlag(FLAGS_timing);
  if (!timing.ok()) return absl::InvalidArgumentError(timing.status().message());
  opts.timing = *timing;
  if (!(FLAGS_executor_stall_s >= 0)) return absl::InvalidArgumentError("--executor_stall_s must be >= 0");
  opts.executor_stall_s = FLAGS_executor_stall_s;
  return opts;
}

// What is checked: both models and the sample inputs.
struct CheckInputs {
  sentier::Model reference;
  sentier::Model candidate;
  std::vector<c10::IValue> samples;
};

// LoadThrough: a model the flags name, through its format (runtime/model_format.h).
absl::StatusOr<sentier::Model> LoadThrough(const std::string& path) {
  auto format = sentier::FormatFor(path);
  if (!format.ok()) return format.status();
  return (*format)->Load(path);
}

// Load: the models and inputs the flags name (the error's message is printed as it is).
absl::StatusOr<CheckInputs> LoadInputs() {
  auto ref = LoadThrough(FLAGS_reference);
  if (!ref.ok()) return ref.status();
  auto cand = LoadThrough(FLAGS_candidate);
  if (!cand.ok()) return cand.status();
  if (!ref->is_module || !cand->is_module) {
    return absl::InvalidArgumentError("both models must be TorchScript archives (.pt)");
  }
  auto samples = (*sentier::FormatFor(FLAGS_reference))->SampleInputs(*ref, FLAGS_inputs);
  if (!samples.ok()) return samples.status();
  return CheckInputs{std::move(*ref), std::move(*cand), std::move(*samples)};
}

std::string SizeText(int64_t bytes) {
  return bytes < (1 << 20) ? absl::StrFormat("%.1f KiB", bytes / 1024.0)
                           : absl::StrFormat("%.1f MiB", bytes / (1024.0 * 1024.0));
}

// Print: the verdict and the counts, times and peaks on one line; then the timing fallback and
// the first failure, if any.
void PrintReport(const sentier::CheckReport& report, const sentier::CheckOptions& opts) {
  size_t ok = 0;
  for (const auto& f : report.findings) ok += f.ok;
  std::cout << "sentier_check: " << (report.equivalent ? "equivalent" : "NOT equivalent") << " ("
            << ok << "/" << report.findings.size() << " tensors within tolerance on " << sentier::DeviceName(opts.device)
            << ", " << FLAGS_dtype << ")";
  if (report.aten_ops_reference >= 0) {
    std::cout << "; aten ops per forward " << report.aten_ops_reference << " -> "
              << report.aten_ops_candidate;
  }
  if (report.reference_ms >= 0) {
    std::cout << "; forward " << report.reference_ms << " ms -> " << report.candidate_ms << " ms";
  }
  if (report.cuda_kernels_forward_reference >= 0) {
    std::cout << "; CUDA kernels per forward " << report.cuda_kernels_forward_reference << " -> "
              << report.cuda_kernels_forward_candidate;
  }
  if (report.cuda_kernels_step_reference >= 0) {
    std::cout << ", per training step " << report.cuda_kernels_step_reference << " -> "
              << report.cuda_kernels_step_candidate;
  }
  if (report.reference_train_ms >= 0) {
    std::cout << "; training step " << report.reference_train_ms << " ms -> "
              << report.candidate_train_ms << " ms";
  }
  if (report.reference_peak_bytes >= 0) {
    std::cout << "; peak memory per forward " << SizeText(report.reference_peak_bytes) << " -> "
              << SizeText(report.candidate_peak_bytes);
  }
  if (report.reference_train_peak_bytes >= 0) {
    std::cout << ", per training step " << SizeText(report.reference_train_peak_bytes) << " -> "
              << SizeText(report.candidate_train_peak_bytes);
  }
  if (report.reference_ms >= 0) std::cout << " (timed: " << sentier::StepTimingName(report.timing) << ")";
  std::cout << "\n";
  if (!report.timing_fallback.empty()) std::cout << "sentier_check: " << report.timing_fallback << "\n";
  if (!report.own_dtype_judgement.empty()) {
    std::cout << "sentier_check: judged in " << FLAGS_dtype << " against the reference in " << FLAGS_dtype << ": "
              << report.own_dtype_judgement << "\n";
  }
  if (!report.equivalent) std::cout << "sentier_check: " << report.first_failure << "\n";
}

// Report: the check as JSON (--report).
nlohmann::json JsonReport(const sentier::CheckReport& report, const sentier::CheckOptions& opts) {
  nlohmann::json j;
  j["equivalent"] = report.equivalent;
  j["first_failure"] = report.first_failure;
  j["judgement"] = report.own_dtype_judgement.empty() ? "float64 reference" : "own dtype";
  if (!report.own_dtype_judgement.empty()) j["own_dtype_reason"] = report.own_dtype_judgement;
  j["device"] = std::string(sentier::DeviceName(opts.device));
  j["dtype"] = FLAGS_dtype;
  j["mode"] = FLAGS_mode;
  j["aten_ops_per_forward"] = {{"reference", report.aten_ops_reference},
                               {"candidate", report.aten_ops_candidate}};
  // Kernel counts need the Kineto profiler and a CUDA device; null on CPU.
  auto or_null = [](int64_t v) { return v >= 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
  j["cuda_kernels_per_forward"] = {{"reference", or_null(report.cuda_kernels_forward_reference)},
                                   {"candidate", or_null(report.cuda_kernels_forward_candidate)}};
  j["cuda_kernels_per_training_step"] = {
      {"reference", or_null(report.cuda_kernels_step_reference)},
      {"candidate", or_null(report.cuda_kernels_step_candidate)}};
  if (report.reference_ms >= 0) {
    j["forward_ms"] = {{"reference", report.reference_ms}, {"candidate", report.candidate_ms}};
    j["timing"] = std::string(sentier::StepTimingName(report.timing));
    if (!report.timing_fallback.empty()) j["timing_fallback"] = report.timing_fallback;
  }
  if (report.reference_train_ms >= 0) {
    j["training_step_ms"] = {{"reference", report.reference_train_ms},
                             {"candidate", report.candidate_train_ms}};
  }
  // Peak bytes a step allocates beyond what was allocated before it (runtime/step_memory.h).
  if (report.reference_peak_bytes >= 0) {
    j["peak_bytes_per_forward"] = {{"reference", report.reference_peak_bytes},
                                   {"candidate", report.candidate_peak_bytes}};
  }
  if (report.reference_train_peak_bytes >= 0) {
    j["peak_bytes_per_training_step"] = {{"reference", report.reference_train_peak_bytes},
                                         {"candidate", report.candidate_train_peak_bytes}};
  }
  j["checks"] = nlohmann::json::array();
  for (const auto& f : report.findings) {
    j["checks"].push_back({{"what", f.what},
                           {"trial", f.trial},
                           {"ok", f.ok},
                           {"rel_error", f.rel_error},
                           {"reference_rel_error", f.ref_rel_error},
                           {"reference_median_rel_error", f.ref_level},
                           {"tolerance", f.tolerance},
                           {"max_abs_error", f.max_abs_error},
                           {"note", f.note}});
  }
  return j;
}

int Run() {
  absl::StatusOr<sentier::CheckOptions> opts = OptionsFromFlags();
  if (!opts.ok()) return Fail(2, std::string(opts.status().message()));
  absl::StatusOr<CheckInputs> in = LoadInputs();
  if (!in.ok()) return Fail(2, std::string(in.status().message()));
  sentier::EquivalenceChecker checker(*opts);
  auto report = checker.Check(in->reference.module, in->candidate.module, in->samples);
  if (!report.ok()) return Fail(2, absl::StrCat(FLAGS_reference, ": ", report.status().message()));
  PrintReport(*report, *opts);
  if (!FLAGS_report.empty()) {
    absl::Status st = sentier::WriteFileAtomically(FLAGS_report, JsonReport(*report, *opts).dump(2) + "\n");
    if (!st.ok()) return Fail(2, std::string(st.message()));
  }
  return report->equivalent ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("sentier_check --reference=A.pt --candidate=B.pt --inputs=inputs.pt");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  sentier::ApplyTorchSettings();
  // A timing thread left behind (runtime/progress_deadline.h) ends the process through _exit.
  try {
    return sentier::FinishProcess(Run());
  } catch (const std::exception& e) {
    std::string what = e.what();
    return sentier::FinishProcess(Fail(2, absl::StrCat("error: ", sentier::TorchErrorMessage(what))));
  }
}
