// torch_settings.h — the process-wide LibTorch switches Sentier's tools run with, set in one
// place. Each tool's main (sentier_opt, sentier_check, sentierd and its job processes,
// model_bench) and each test that compares models calls ApplyTorchSettings() once, first; no
// check or pass flips a switch as a side effect.
//
// The switches, and why:
//   * The TorchScript graph executor's optimizations are off: graphs are compared and timed as
//     written (the interpreter with autograd). LibTorch 1.13's profiling executor asserts inside
//     its own autodiff on graphs with aten::stack, which batched forms contain (original models
//     with stack too). Timed steps may turn them on for the thread that runs them (the switch is
//     thread-local): --timing=executor, the default (auto) on LibTorch 2.x, times steps as users
//     run artifacts, with the executor's CUDA fuser (equivalence_checker.h, CheckOptions::timing).
//   * oneDNN is turned off where LibTorch 1.13.1's oneDNN gelu_backward reads a non-contiguous
//     gradient as if it were contiguous (garbage gradients for gelu after a transpose, in the
//     original model and the optimized one alike): probed once; Sentier judges rewrites, not this
//     defect.
#ifndef SENTIER_RUNTIME_TORCH_SETTINGS_H_
#define SENTIER_RUNTIME_TORCH_SETTINGS_H_

namespace sentier {

struct TorchSettings {
  bool executor_optimize = false;  // the graph executor's optimizations (see above)
  bool onednn_off = false;         // oneDNN was turned off (the gelu_backward defect showed)
};

// ApplyTorchSettings: applies the switches (the first call) and returns what they are.
const TorchSettings& ApplyTorchSettings();

}  // namespace sentier

#endif  // SENTIER_RUNTIME_TORCH_SETTINGS_H_
