// equivalence_compare.cc — the equivalence checker's comparison: the trials (the samples, random
// sets like them, twice the batch), each run by the reference, the reference in float64 and the
// candidate; every output and gradient of the candidate measured against the float64 reference
// (relative norm errors, non-finite values, shapes, missing or re-laid-out gradients) and every
// buffer the run left in the module (running statistics); the
// tolerances (a factor of the reference's own or median error, and a floor per dtype); and the
// verdict, the first failing finding in one sentence.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "passes/sample_inputs.h"
#include "runtime/equivalence_checker.h"
#include "runtime/equivalence_internal.h"

namespace sentier {
namespace equivalence_internal {
namespace {

// ||a - ref|| / ||ref||, both scaled by max |ref| first so that large (finite) values cannot
// overflow the norms.
double RelNorm(const at::Tensor& a, const at::Tensor& ref64) {
  double scale = ref64.numel() ? ref64.abs().max().item<double>() : 0.0;
  if (!(scale > 0) || !std::isfinite(scale)) scale = 1.0;
  double denom = (ref64 / scale).norm().item<double>();
  double num = ((a.to(at::kDouble).cpu() - ref64) / scale).norm().item<double>();
  return denom > 0 ? num / denom : num;
}

// Each trial's name and inputs: the samples, (trials - 1) random sets like them, and one set at
// twice the batch.
std::vector<std::pair<std::string, std::vector<c10::IValue>>> MakeTrials(
    const std::vector<c10::IValue>& samples, const CheckOptions& options) {
  at::Generator gen = at::detail::createCPUGenerator(options.seed + 1);
  std::vector<std::pair<std::string, std::vector<c10::IValue>>> trials = {{"samples", samples}};
  for (int k = 1; k < std::max(1, options.trials); ++k) {
    trials.emplace_back(absl::StrCat("random ", k), RandomInputsLike(samples, gen, 1, options.fixed_inputs));
  }
  if (options.batch_x2) trials.emplace_back("batch x2", RandomInputsLike(samples, gen, 2, options.fixed_inputs));
  return trials;
}

// The finding of a trial where the candidate (or the float64 reference) does not run.
CheckFinding CandidateRunFailure(const std::string& trial, const absl::Status& failure) {
  CheckFinding f;
  f.what = "candidate run";
  f.trial = trial;
  f.ok = false;
  f.note = std::string(failure.message());
  return f;
}

// How the candidate's gradients differ in kind from the reference's, by name.
struct GradKinds {
  // Gradients autograd did not produce (a parameter detached or dropped from the graph).
  std::set<std::string> cand_missing;
  // Gradients whose layout (sparse or dense) the candidate changed; true: sparse in the reference.
  std::map<std::string, bool> layout_changed;
};

GradKinds CompareGradKinds(const RunResult& ref, const RunResult& cand) {
  GradKinds kinds;
  for (size_t k = 0; k < cand.grads.size(); ++k) {
    bool ref_has = false;
    for (size_t j = 0; j < ref.grads.size(); ++j) {
      if (ref.grads[j].first == cand.grads[k].first) ref_has = ref.grad_defined[j];
    }
    if (ref_has && !cand.grad_defined[k]) kinds.cand_missing.insert(cand.grads[k].first);
  }
  for (const auto& [name, t] : ref.grads) {
    const bool r = ref.sparse_grads.count(name) != 0, c = cand.sparse_grads.count(name) != 0;
    if (r != c) kinds.layout_changed[name] = r;
  }
  return kinds;
}

// A floating tensor of the candidate (c) against the reference in the checked dtype (r) and in
// float64 (d): false, with a note in `f`, where their non-finite values differ; else true, with
// the errors in `f` (its tolerance is set by SetTolerances).
bool MeasureErrors(const at::Tensor& c, const at::Tensor& d, const at::Tensor& r, CheckFinding* f) {
  at::Tensor c64 = c.cpu().to(at::kDouble);
  at::Tensor d64 = d.cpu().to(at::kDouble);
  at::Tensor rr = r.cpu().to(at::kDouble);
  // Non-finite values (NaN, overflow to inf in the checked dtype) must be where the reference run
  // in the same dtype has them, and the same; the rest is compared on the positions finite in
  // both references.
  at::Tensor ref_special = ~at::isfinite(rr);
  at::Tensor cand_special = ~at::isfinite(c64);
  bool same_special = at::equal(ref_special, cand_special) &&
                      at::equal(at::isnan(rr), at::isnan(c64)) &&
                      at::equal(at::where(ref_special & ~at::isnan(rr), rr, at::zeros_like(rr)),
                                at::where(cand_special & ~at::isnan(c64), c64, at::zeros_like(c64)));
  if (!same_special) {
    f->ok = false;
    f->note = "NaN or inf where the reference has a finite value (or the reverse)";
    return false;
  }
  at::Tensor finite = at::isfinite(d64) & ~ref_special;
  at::Tensor cz = at::where(finite, c64, at::zeros_like(c64));
  at::Tensor dz = at::where(finite, d64, at::zeros_like(d64));
  at::Tensor rz = at::where(finite, rr, at::zeros_like(rr));
  f->rel_error = RelNorm(cz, dz);
  f->ref_rel_error = RelNorm(rz, dz);
  f->max_abs_error = c64.numel() ? (cz - rz).abs().max().item<double>() : 0.0;
  return true;
}

// One tensor `name` of a trial: the reference's `rt`, the candidate's `ct` and the float64
// reference's `dt` (null where missing). The finding fails with a note, or has its errors
// measured (`*judged`).
CheckFinding CompareTensor(const std::string& name, const std::string& trial, const at::Tensor& rt,
                           const at::Tensor* ct, const at::Tensor* dt, const GradKinds& kinds,
                           bool* judged) {
  CheckFinding f;
  f.what = name;
  f.trial = trial;
  *judged = false;
  if (ct == nullptr || dt == nullptr) {
    f.ok = false;
    f.note = absl::StrContains(name, "grad of param ")
                 ? "missing in the candidate (the parameter is not in its autograd graph)"
                 : "missing in the candidate";
  } else if (kinds.cand_missing.count(name) != 0) {
    f.ok = false;
    f.note = "no gradient in the candidate (None: detached or dropped from the autograd "
             "graph) where the reference has one";
  } else if (kinds.layout_changed.count(name) != 0) {
    f.ok = false;
    f.note = kinds.layout_changed.at(name) ? "sparse in the reference, dense in the candidate (an optimizer for "
                                             "sparse gradients, such as SparseAdam, would refuse it)"
                                           : "dense in the reference, sparse in the candidate";
  } else if (ct->sizes() != rt.sizes()) {
    f.ok = false;
    f.note = absl::StrCat("shape ", c10::str(ct->sizes()), " vs reference ", c10::str(rt.sizes()));
  } else if (!c10::isFloatingType(rt.scalar_type())) {
    f.ok = at::equal(ct->cpu(), rt.cpu());
    if (!f.ok) f.note = "integer values differ";
  } else {
    *judged = MeasureErrors(*ct, *dt, rt, &f);
  }
  return f;
}

// The tolerances of the findings at `judged`, of one kind (outputs, or gradients) in one trial.
// The reference's own error on one tensor is a single sample of the dtype's rounding noise, and
// an unlucky small one in bf16 (a gradient whose error happened to be 0.8% while its neighbours'
// were 3%). So the candidate may also be a factor off the typical reference error of its kind
// in this trial: the median.
// Judged in the model's own dtype (no float64 reference), the reference's error is not known:
// the candidate may differ from it by twice the dtype's floor (both carry rounding of that size).
void SetTolerances(const std::vector<size_t>& judged, const CheckOptions& options, bool own_dtype,
                   CheckReport* report) {
  const double floor = RelativeToleranceFloor(options.dtype) * (own_dtype ? 2.0 : 1.0);
  std::vector<double> own;
  for (size_t k : judged) own.push_back(report->findings[k].ref_rel_error);
  double level = 0.0;
  if (!own.empty()) {
    std::nth_element(own.begin(), own.begin() + own.size() / 2, own.end());
    level = own[own.size() / 2];
  }
  for (size_t k : judged) {
    CheckFinding& f = report->findings[k];
    f.ref_level = level;
    f.tolerance = std::max(options.factor * std::max(f.ref_rel_error, level), floor);
    f.ok = f.rel_error <= f.tolerance;
  }
}

// Compares the outputs (or the gradients) of one trial: the reference's `r` and float64 `r64`
// against the candidate's `c`, one finding each.
void CompareTensors(const NamedTensors& r, const NamedTensors& r64, const NamedTensors& c,
                    const std::string& trial, const GradKinds& kinds, const CheckOptions& options,
                    bool own_dtype, CheckReport* report) {
  std::map<std::string, at::Tensor> cm(c.begin(), c.end()), r64m(r64.begin(), r64.end());
  std::vector<size_t> judged;  // findings whose tolerance is set below
  for (const auto& [name, rt] : r) {
    auto ci = cm.find(name);
    auto di = r64m.find(name);
    bool measured = false;
    CheckFinding f = CompareTensor(name, trial, rt, ci == cm.end() ? nullptr : &ci->second,
                                   di == r64m.end() ? nullptr : &di->second, kinds, &measured);
    if (measured) judged.push_back(report->findings.size());
    report->findings.push_back(f);
  }
  SetTolerances(judged, options, own_dtype, report);
}

// The reference's buffers the candidate has too. A stored layout may add buffers of its own
// (passes/stacked_parameters.h); a buffer the candidate lacks is left to its gradients and
// outputs, which read it.
NamedTensors SharedState(const NamedTensors& ref, const NamedTensors& cand) {
  std::set<std::string> names;
  for (const auto& [name, t] : cand) names.insert(name);
  NamedTensors shared;
  for (const auto& entry : ref) {
    if (names.count(entry.first)) shared.push_back(entry);
  }
  return shared;
}

}  // namespace

absl::Status CompareOnTrials(const CheckSubject& s, CheckReport* report) {
  const bool training = s.options.training;
  const auto trials = MakeTrials(s.samples, s.options);
  for (size_t t = 0; t < trials.size(); ++t) {
    const auto& [trial, inputs] = trials[t];
    uint64_t seed = s.options.seed + 17 * t;
    auto ref = Run(s.reference, inputs, s.options.dtype, s.device, training, seed, s.options.buffer_inputs);
    if (!ref.ok()) {
      if (t == 0) return ReferenceFailure(s.reference, inputs, s.device, ref.status());
      // E.g. a model with a fixed batch size: that trial does not apply. Said in the report.
      report->skipped_trials.push_back(absl::StrCat(trial, ": the reference does not run: ", ref.status().message()));
      continue;
    }
    auto ref64 = Run(s.reference, inputs, c10::kDouble, c10::Device(c10::kCPU), training, seed,
                     s.options.buffer_inputs);
    // A model that pins its own dtype (`x.float()` meeting float64 weights) cannot run in
    // float64: it is judged in its own dtype against the reference, never blamed on the candidate.
    const bool own_dtype = !ref64.ok();
    if (own_dtype && report->own_dtype_judgement.empty()) {
      report->own_dtype_judgement =
          absl::StrCat("the reference does not run in float64 (", ref64.status().message(), ")");
    }
    auto cand = Run(s.candidate, inputs, s.options.dtype, s.device, training, seed, s.options.buffer_inputs);
    if (!cand.ok()) {
      report->findings.push_back(CandidateRunFailure(trial, cand.status()));
      continue;
    }
    const RunResult& truth = own_dtype ? *ref : *ref64;
    const GradKinds kinds = CompareGradKinds(*ref, *cand);
    if (s.options.inference) {
      CompareTensors(ref->outputs, truth.outputs, cand->outputs, trial, kinds, s.options, own_dtype, report);
    }
    if (training) CompareTensors(ref->grads, truth.grads, cand->grads, trial, kinds, s.options, own_dtype, report);
    CompareTensors(SharedState(ref->state, cand->state), truth.state, cand->state, trial, kinds, s.options,
                   own_dtype, report);
  }
  return absl::OkStatus();
}

void SetVerdict(CheckReport* report) {
  for (const CheckFinding& f : report->findings) {
    if (f.ok) continue;
    report->equivalent = false;
    report->first_failure =
        f.note.empty()
            ? absl::StrFormat("%s differs on %s inputs: relative error %.3g > tolerance %.3g "
                              "(reference's own error %.3g, median %.3g, max abs error %.3g)",
                              f.what, f.trial, f.rel_error, f.tolerance, f.ref_rel_error,
                              f.ref_level, f.max_abs_error)
            : absl::StrCat(f.what, " on ", f.trial, " inputs: ", f.note);
    break;
  }
}

}  // namespace equivalence_internal

double RelativeToleranceFloor(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kDouble:
      return 1e-12;
    case c10::kHalf:
      return 2e-3;
    case c10::kBFloat16:
      return 1.6e-2;
    default:
      return 1e-5;
  }
}

}  // namespace sentier
