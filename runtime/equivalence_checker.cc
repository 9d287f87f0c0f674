// equivalence_checker.cc — runs reference and candidate on the same inputs and compares outputs
// and gradients against a float64 run of the reference (see the header). This file puts the
// check together (EquivalenceChecker::Check, CheckGraphs) and counts aten ops and CUDA kernels;
// running models on a device is in equivalence_device.cc, the comparison in
// equivalence_compare.cc and the timing in equivalence_timing.cc (runtime/equivalence_internal.h).
#include "runtime/equivalence_checker.h"

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "passes/sample_inputs.h"
#include "passes/status_macros.h"
#include "passes/torch_error.h"
#include "runtime/cuda_kernels.h"
#include "runtime/equivalence_internal.h"
#include "runtime/graph_runner.h"
#include "runtime/torch_settings.h"

namespace sentier {
namespace {

using equivalence_internal::CheckSubject;
using equivalence_internal::CompareOnTrials;
using equivalence_internal::InputsOnDevice;
using equivalence_internal::ModelOnDevice;
using equivalence_internal::SetVerdict;
using equivalence_internal::TimeBothOrFallBack;

// A module without parameters whose forward is `graph` (its outputs packed into a tuple when
// there are several).
torch::jit::Module GraphModule(const std::shared_ptr<torch::jit::Graph>& graph) {
  torch::jit::Module m("SentierGraph");
  auto g = graph->copy();
  if (g->outputs().size() != 1) {
    std::vector<torch::jit::Value*> outs(g->outputs().begin(), g->outputs().end());
    torch::jit::Node* tuple = g->createTuple(outs);
    g->appendNode(tuple);
    while (!g->outputs().empty()) g->eraseOutput(0);
    g->registerOutput(tuple->output());
  }
  g->insertInput(0, "self")->setType(m.type());
  torch::jit::Function* fn = m._ivalue()->compilation_unit()->create_function(
      c10::QualifiedName(*m.type()->name(), "forward"), g);
  m.type()->addMethod(fn);
  return m;
}

// Prepare: the samples conformed to the reference's forward.
absl::StatusOr<std::vector<c10::IValue>> ConformSamples(const torch::jit::Module& reference,
                                                        const std::vector<c10::IValue>& raw_samples) {
  auto conformed = ConformToSchema(reference.get_method("forward").function().getSchema(), raw_samples);
  if (!conformed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the sample inputs do not fit forward: ", conformed.status().message()));
  }
  return conformed;
}

// Top-level aten ops per forward of both models (or why not, in count_error).
void CountAtenOpsOfBoth(const CheckSubject& s, CheckReport* report) {
  std::vector<c10::IValue> ref_in = {s.reference._ivalue()}, cand_in = {s.candidate._ivalue()};
  for (const c10::IValue& v : s.samples) {
    ref_in.push_back(v);
    cand_in.push_back(v);
  }
  auto a = CountAtenOps(s.reference.get_method("forward").graph(), ref_in);
  auto b = CountAtenOps(s.candidate.get_method("forward").graph(), cand_in);
  if (a.ok() && b.ok()) {
    report->aten_ops_reference = *a;
    report->aten_ops_candidate = *b;
  } else {
    report->count_error = std::string(a.ok() ? b.status().message() : a.status().message());
  }
}

// CUDA kernels per forward of both models, and per training step in training mode.
void CountCudaKernelsOfBoth(const CheckSubject& s, CheckReport* report) {
  auto count = [&](const torch::jit::Module& m, bool train) -> int64_t {
    try {
      torch::jit::Module copy = ModelOnDevice(m, s.options.dtype, s.device, train);
      c10::AutoGradMode grad_mode(train);
      std::vector<c10::IValue> in = InputsOnDevice(s.samples, s.options.dtype, s.device);
      auto n = CountCudaKernels(copy, in, train);
      if (n.ok()) return *n;
      report->count_error = std::string(n.status().message());
    } catch (const std::exception& e) {
      report->count_error = TorchErrorMessage(e.what());
    }
    return -1;
  };
  report->cuda_kernels_forward_reference = count(s.reference, false);
  report->cuda_kernels_forward_candidate = count(s.candidate, false);
  if (s.options.training) {
    report->cuda_kernels_step_reference = count(s.reference, true);
    report->cuda_kernels_step_candidate = count(s.candidate, true);
  }
}

}  // namespace

absl::StatusOr<CheckReport> EquivalenceChecker::CheckGraphs(
    const std::shared_ptr<torch::jit::Graph>& reference,
    const std::shared_ptr<torch::jit::Graph>& candidate, const std::vector<c10::IValue>& inputs) const {
  torch::jit::Module ref, cand;
  try {
    ref = GraphModule(reference);
    cand = GraphModule(candidate);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("the graphs cannot be run: ", TorchErrorMessage(e.what())));
  }
  return Check(ref, cand, inputs);
}

absl::StatusOr<CheckReport> EquivalenceChecker::Check(const torch::jit::Module& reference,
                                                      const torch::jit::Module& candidate,
                                                      const std::vector<c10::IValue>& raw_samples) const {
  SENTIER_ASSIGN_OR_RETURN(samples, ConformSamples(reference, raw_samples));
  const CheckSubject subject{reference, candidate, samples, options_,
                             c10::Device(options_.device == Device::kCuda ? c10::kCUDA : c10::kCPU)};
  CheckReport report;
  if (options_.timing_only) {
    SENTIER_RETURN_IF_ERROR(TimeBothOrFallBack(subject, &report));
    return report;
  }
  auto phase_start = std::chrono::steady_clock::now();
  auto phase_done = [&](const char* phase) {
    auto now = std::chrono::steady_clock::now();
    report.phase_ms[phase] = std::chrono::duration<double, std::milli>(now - phase_start).count();
    phase_start = now;
  };
  SENTIER_RETURN_IF_ERROR(CompareOnTrials(subject, &report));
  SetVerdict(&report);
  phase_done("compare");
  if (options_.count_ops) {
    CountAtenOpsOfBoth(subject, &report);
    phase_done("count_ops");
  }
  // A candidate that does not run (or is not equivalent) is not timed or profiled: the verdict
  // stands, and the failure must not turn into an error of the check itself.
  if (!report.equivalent) return report;
  if (subject.device.is_cuda()) {
    CountCudaKernelsOfBoth(subject, &report);
    phase_done("cuda_kernels");
  }
  if (options_.time) {
    SENTIER_RETURN_IF_ERROR(TimeBothOrFallBack(subject, &report));
    phase_done("time");
  }
  return report;
}

}  // namespace sentier
