// torch_settings.cc — the process-wide LibTorch switches (see the header).
#include "runtime/torch_settings.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

namespace sentier {
namespace {

// Whether oneDNN's gelu_backward misreads a non-contiguous gradient; turns oneDNN off if so.
bool TurnOffOneDnnIfGeluBackwardIsWrong() {
  c10::AutoGradMode no_grad(false);
  at::Tensor x = at::linspace(-3.0, 3.0, 64, at::kFloat).reshape({8, 8});
  at::Tensor grad = at::linspace(0.5, 1.5, 64, at::kFloat).reshape({8, 8}).t();  // non-contiguous
  at::Tensor expected = at::gelu_backward(grad.contiguous(), x, "none");
  if (at::allclose(at::gelu_backward(grad, x, "none"), expected, 1e-5, 1e-6)) return false;
  at::globalContext().setUserEnabledMkldnn(false);
  return true;
}

}  // namespace

const TorchSettings& ApplyTorchSettings() {
  static const TorchSettings settings = [] {
    TorchSettings s;
    torch::jit::setGraphExecutorOptimize(s.executor_optimize);
    s.onednn_off = TurnOffOneDnnIfGeluBackwardIsWrong();
    return s;
  }();
  return settings;
}

}  // namespace sentier
