// equivalence_device.cc — running models on a device for the equivalence checker: private
// copies of a model and of its inputs on the checked device in the checked dtype (ModelOnDevice,
// InputsOnDevice), one run of a model with the gradients of a fixed random projection of its
// outputs (Run, split back to the original parameters of stacked ones), why the reference does
// not run (ReferenceFailure: bad input, or a model that runs on the CPU only), and the public
// RunsOnDevice built on them.
#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/serialization/import.h>

#include "absl/strings/str_cat.h"
#include "passes/sample_inputs.h"
#include "passes/stacked_parameters.h"
#include "passes/torch_error.h"
#include "runtime/equivalence_checker.h"
#include "runtime/equivalence_internal.h"

namespace sentier {
namespace equivalence_internal {
namespace {

// A fresh copy on `device`, floating tensors in `dtype`: every run gets its own inputs, so a
// model that writes to an input (an in-place op on a view of it) cannot change what the next
// run sees.
at::Tensor Cast(const at::Tensor& t, c10::ScalarType dtype, const c10::Device& device) {
  c10::ScalarType to = c10::isFloatingType(t.scalar_type()) ? dtype : t.scalar_type();
  return t.detach().to(device, to, /*non_blocking=*/false, /*copy=*/true);
}

}  // namespace

torch::jit::Module ModelOnDevice(const torch::jit::Module& m, c10::ScalarType dtype,
                                 const c10::Device& device, bool training) {
  c10::NoGradGuard no_grad;
  torch::jit::Module copy;
  if (device.is_cpu()) {
    copy = m.clone();
  } else {
    std::ostringstream out;
    m.save(out);
    std::istringstream in(out.str());
    copy = torch::jit::load(in, device);
  }
  std::map<std::string, bool> buffer_grads;
  for (const auto& nb : m.named_buffers()) buffer_grads[nb.name] = nb.value.requires_grad();
  for (const auto& np : copy.named_parameters()) {
    at::Tensor p = np.value;
    if (c10::isFloatingType(p.scalar_type()) && p.scalar_type() != dtype) p.set_data(p.to(dtype));
    p.detach_();
    p.requires_grad_(training && c10::isFloatingType(p.scalar_type()));
  }
  for (const auto& nb : copy.named_buffers()) {
    at::Tensor b = nb.value;
    if (c10::isFloatingType(b.scalar_type()) && b.scalar_type() != dtype) b.set_data(b.to(dtype));
    b.detach_();
    if (buffer_grads[nb.name] && c10::isFloatingType(b.scalar_type())) b.requires_grad_(true);
  }
  return copy;
}

std::vector<c10::IValue> InputsOnDevice(const std::vector<c10::IValue>& inputs, c10::ScalarType dtype,
                                        const c10::Device& device) {
  return MapTensors(inputs, [&](const at::Tensor& t) { return Cast(t, dtype, device); });
}

namespace {

// A stored tensor's (or its gradient's) part for each member, in member order: `select` along
// the record's dim for a stack, `narrow` by the members' sizes for a cat; contiguous copies.
std::vector<at::Tensor> MemberParts(const StackedParameter& p, const at::Tensor& joined) {
  std::vector<at::Tensor> parts;
  int64_t offset = 0;
  for (size_t k = 0; k < p.members.size(); ++k) {
    at::Tensor part = p.op == "stack" ? joined.select(p.dim, static_cast<int64_t>(k))
                                      : joined.narrow(p.dim, offset, p.sizes[k]);
    offset += p.sizes[k];
    parts.push_back(part.contiguous());
  }
  return parts;
}

// A model whose parameters are stored stacked (passes/stacked_parameters.h): the gradient of each
// stored parameter is split back into its members' gradients, under their original names, so
// that they compare with the original model's one by one.
void ByOriginalNames(const ParamLayout& layout, RunResult* result) {
  for (const StackedParameter& p : layout.stacked) {
    std::string key = absl::StrCat("grad of param ", p.name);
    auto it = std::find_if(result->grads.begin(), result->grads.end(),
                           [&](const auto& g) { return g.first == key; });
    if (it == result->grads.end()) continue;
    size_t at = static_cast<size_t>(it - result->grads.begin());
    at::Tensor g = it->second;
    bool defined = result->grad_defined[at];
    const bool sparse = result->sparse_grads.erase(key) != 0;
    result->grads.erase(it);
    result->grad_defined.erase(result->grad_defined.begin() + at);
    std::vector<at::Tensor> parts = MemberParts(p, g);
    for (size_t k = 0; k < p.members.size(); ++k) {
      result->grads.emplace_back(absl::StrCat("grad of param ", p.members[k]), parts[k]);
      result->grad_defined.push_back(defined);
      if (sparse) result->sparse_grads.insert(absl::StrCat("grad of param ", p.members[k]));
    }
  }
}

// The buffers a run left, stored joined (the stacked layout's buffers), split back under their
// members' original names, as ByOriginalNames does for gradients.
absl::Status StateByOriginalNames(const torch::jit::Module& m, RunResult* result) {
  auto layout = ReadParamLayout(m);
  if (!layout.ok()) return layout.status();
  for (const StackedParameter& p : layout->stacked) {
    std::string key = absl::StrCat("buffer ", p.name, " after the run");
    auto it = std::find_if(result->state.begin(), result->state.end(), [&](const auto& b) { return b.first == key; });
    if (it == result->state.end()) continue;
    at::Tensor joined = it->second;
    result->state.erase(it);
    std::vector<at::Tensor> parts = MemberParts(p, joined);
    for (size_t k = 0; k < p.members.size(); ++k) {
      result->state.emplace_back(absl::StrCat("buffer ", p.members[k], " after the run"), parts[k]);
    }
  }
  return absl::OkStatus();
}

// The gradients of `leaves` (named `leaf_names`) of a fixed random projection of the floating
// outputs in `result`, drawn from `seed`, under their original names (ByOriginalNames). Throws
// what LibTorch throws.
absl::Status GradientsOfProjection(const torch::jit::Module& m, const std::vector<at::Tensor>& leaves,
                                   const std::vector<std::string>& leaf_names, uint64_t seed,
                                   RunResult* result) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::Tensor loss;
  for (const auto& [name, t] : result->outputs) {
    if (!c10::isFloatingType(t.scalar_type())) continue;
    // One projection per floating output, drawn whether or not it requires grad, so that
    // both models draw the same projections even when a rewrite changes which outputs do.
    at::Tensor proj = at::randn(t.sizes(), gen, at::TensorOptions().dtype(at::kDouble));
    if (!t.requires_grad()) continue;
    at::Tensor term = (t * proj.to(t.scalar_type()).to(t.device())).sum();
    loss = loss.defined() ? loss + term : term;
  }
  if (!loss.defined()) return absl::OkStatus();
  std::vector<at::Tensor> grads =
      torch::autograd::grad({loss}, leaves, {}, c10::nullopt, false, /*allow_unused=*/true);
  for (size_t k = 0; k < grads.size(); ++k) {
    at::Tensor g = grads[k].defined() ? grads[k] : at::zeros_like(leaves[k]);
    if (g.is_sparse()) {
      result->sparse_grads.insert(leaf_names[k]);
      g = g.coalesce().to_dense();
    }
    result->grads.emplace_back(leaf_names[k], g.detach());
    result->grad_defined.push_back(grads[k].defined());
  }
  auto layout = ReadParamLayout(m);
  if (!layout.ok()) return layout.status();
  ByOriginalNames(*layout, result);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RunResult> Run(const torch::jit::Module& original,
                              const std::vector<c10::IValue>& inputs, c10::ScalarType dtype,
                              const c10::Device& device, bool training, uint64_t seed,
                              const std::vector<bool>& buffer_inputs) {
  RunResult result;
  try {
    torch::jit::Module m = ModelOnDevice(original, dtype, device, training);
    std::vector<at::Tensor> leaves;
    std::vector<std::string> leaf_names;
    for (const auto& np : m.named_parameters()) {
      if (!np.value.requires_grad()) continue;
      leaves.push_back(np.value);
      leaf_names.push_back(absl::StrCat("grad of param ", np.name));
    }
    for (const auto& nb : m.named_buffers()) {
      if (!nb.value.requires_grad()) continue;
      leaves.push_back(nb.value);
      leaf_names.push_back(absl::StrCat("grad of buffer ", nb.name));
    }
    std::vector<c10::IValue> in;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const bool buffer = i < buffer_inputs.size() && buffer_inputs[i];
      in.push_back(MapTensors(inputs[i], [&](const at::Tensor& t) {
        at::Tensor c = Cast(t, dtype, device);
        if (training && !buffer && c10::isFloatingType(c.scalar_type())) c.requires_grad_(true);
        return c;
      }));
    }
    for (const auto& [path, t] : FlattenTensors(in, "input")) {
      if (!t.requires_grad()) continue;
      leaves.push_back(t);
      leaf_names.push_back(absl::StrCat("grad of ", path));
    }
    c10::IValue out = m.forward(in);
    FlattenTensors(out, "output", &result.outputs);
    if (training && !leaves.empty()) {
      absl::Status grads = GradientsOfProjection(m, leaves, leaf_names, seed, &result);
      if (!grads.ok()) return grads;
    }
    for (const auto& nb : m.named_buffers()) {
      result.state.emplace_back(absl::StrCat("buffer ", nb.name, " after the run"), nb.value.detach());
    }
    absl::Status named = StateByOriginalNames(m, &result);
    if (!named.ok()) return named;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(TorchErrorMessage(e.what()));
  }
  return result;
}

absl::Status ReferenceFailure(const torch::jit::Module& reference, const std::vector<c10::IValue>& inputs,
                              const c10::Device& device, const absl::Status& failure) {
  if (device.is_cuda()) {
    auto cpu = Run(reference, inputs, c10::kFloat, c10::Device(c10::kCPU), false, 0);
    if (cpu.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the original model fails on cuda: ", failure.message()));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("the reference model does not run on the sample inputs: ", failure.message()));
}

}  // namespace equivalence_internal

absl::Status RunsOnDevice(const torch::jit::Module& module, const std::vector<c10::IValue>& samples,
                          Device device_name, bool training) {
  auto conformed = ConformToSchema(module.get_method("forward").function().getSchema(), samples);
  if (!conformed.ok()) return absl::InvalidArgumentError(conformed.status().message());
  c10::Device device(device_name == Device::kCuda ? c10::kCUDA : c10::kCPU);
  auto run = equivalence_internal::Run(module, *conformed, c10::kFloat, device, training, 0);
  if (run.ok()) return absl::OkStatus();
  return equivalence_internal::ReferenceFailure(module, *conformed, device, run.status());
}

}  // namespace sentier
