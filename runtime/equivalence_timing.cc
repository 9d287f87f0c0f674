// equivalence_timing.cc — the equivalence checker's timing: both models warmed up, then their
// steps (a forward, and in training mode a forward + backward) alternated and timed, with the
// peak memory of one more step; in the interpreter on the calling thread, or with the graph
// executor's optimizations on a thread of its own that is given up when it stops making progress
// (RunTimedSteps, MeasureSteps); what a failure means for each model (MeasureBoth); and the
// fallback to the interpreter (TimeBothOrFallBack). Also the public CheckStepTiming and
// StepTimingFromFlag: which timings this LibTorch supports.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "passes/sample_inputs.h"
#include "passes/status_macros.h"
#include "passes/torch_error.h"
#include "runtime/equivalence_checker.h"
#include "runtime/equivalence_internal.h"
#include "runtime/progress_deadline.h"
#include "runtime/step_memory.h"

namespace sentier {
namespace equivalence_internal {
namespace {

// Median time of one step: a forward (no grad), or with `training` a forward and a backward of
// the sum of the outputs. On CUDA the device is synchronized around each step. After the timed
// steps, one more step runs under PeakStepBytes (its gradients accumulate into the ones the
// timed steps left, as every step's do).
struct StepMeasure {
  double median_ms = -1.0;
  int64_t peak_bytes = -1;
};

// One model's copy on the device, its inputs, and its step times.
struct TimedModel {
  torch::jit::Module copy;
  std::vector<c10::IValue> in;
  std::vector<double> ms;
  StepMeasure result;
};

// What the timed steps use: owned here, so that a thread left behind (executor timing that
// stopped making progress) never touches the caller's objects.
struct TimedSteps {
  std::vector<TimedModel> models;  // the reference and the candidate, or one of them
  c10::Device device;
  bool training;
  int warm_up;
  int failed_model = -1;  // the index of the model whose step threw, if one did
  // The index of the model whose step runs now (read by the timing thread's caller when the
  // step makes no progress).
  std::shared_ptr<std::atomic<int>> running = std::make_shared<std::atomic<int>>(-1);
};

// A step of models[model] threw: which model, and LibTorch's message.
struct StepFailure : std::runtime_error {
  StepFailure(int m, const std::string& what) : std::runtime_error(what), model(m) {}
  int model;
};

constexpr int kTimedRounds = 20;

// Runs the steps on the calling thread, with that thread's executor switch and grad mode;
// `progress` after each step. Every model is warmed up, then the timed steps alternate between
// the models, the order flipped each round (A B, B A, ...), so that a drift of the machine falls
// on both alike.
void RunTimedSteps(TimedSteps& t, const std::function<void()>& progress) {
  auto sync = [&] {
    if (t.device.is_cuda()) torch::cuda::synchronize();
  };
  // One step of models[k]; what it throws becomes a StepFailure naming k.
  auto step = [&](size_t k) {
    TimedModel& m = t.models[k];
    t.running->store(static_cast<int>(k));
    try {
      c10::IValue out = m.copy.forward(m.in);
      if (t.training) {
        NamedTensors outs;
        FlattenTensors(out, "output", &outs);
        at::Tensor loss;
        for (const auto& [name, tensor] : outs) {
          if (tensor.requires_grad()) loss = loss.defined() ? loss + tensor.sum() : tensor.sum();
        }
        if (loss.defined()) loss.backward();
      }
    } catch (const std::exception& e) {
      throw StepFailure(static_cast<int>(k), e.what());
    }
  };
  const size_t n = t.models.size();
  for (size_t k = 0; k < n; ++k) {
    for (int i = 0; i < t.warm_up; ++i) {
      step(k);
      sync();
      progress();
    }
  }
  for (int round = 0; round < kTimedRounds; ++round) {
    for (size_t j = 0; j < n; ++j) {
      const size_t k = round % 2 == 0 ? j : n - 1 - j;
      sync();
      auto start = std::chrono::steady_clock::now();
      step(k);
      sync();
      t.models[k].ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      progress();
    }
  }
  for (size_t k = 0; k < n; ++k) {
    TimedModel& m = t.models[k];
    std::sort(m.ms.begin(), m.ms.end());
    m.result.median_ms = m.ms[m.ms.size() / 2];
    auto peak = PeakStepBytes(t.device, [&] { step(k); });
    if (!peak.ok()) throw StepFailure(static_cast<int>(k), std::string(peak.status().message()));
    m.result.peak_bytes = *peak;
  }
}

// The models' steps (alternated, see RunTimedSteps), timed as `timing` says; one StepMeasure per
// model, in order. interpreter: on this thread, with its executor switch off.
// executor: on a thread of its own with the switch on (it is thread-local), so that a step that
// does not return (torch 2.11's fuser, bench/RESULTS.md) ends in DeadlineExceeded after
// `stall_limit` without a finished step; that thread is left behind. A step that throws:
// InvalidArgument with LibTorch's message, and `*failed_model` the index of its model.
absl::StatusOr<std::vector<StepMeasure>> MeasureSteps(const std::vector<const torch::jit::Module*>& models,
                                                      const std::vector<c10::IValue>& inputs,
                                                      c10::ScalarType dtype, const c10::Device& device,
                                                      bool training, StepTiming timing,
                                                      absl::Duration stall_limit, int* failed_model) {
  *failed_model = -1;
  const bool executor = timing == StepTiming::kExecutor;
  try {
    c10::AutoGradMode grad_mode(training);
    // executor: the profiling executor profiles, then compiles its fusion groups: more warm-up.
    auto steps = std::make_shared<TimedSteps>(TimedSteps{{}, device, training, executor ? 6 : 3});
    for (const torch::jit::Module* m : models) {
      steps->models.push_back(TimedModel{ModelOnDevice(*m, dtype, device, training),
                                         InputsOnDevice(inputs, dtype, device), {}, StepMeasure()});
    }
    auto results = [&] {
      std::vector<StepMeasure> r;
      for (const TimedModel& m : steps->models) r.push_back(m.result);
      return r;
    };
    if (!executor) {
      torch::jit::GraphOptimizerEnabledGuard optimize(false);  // whatever this thread had
      RunTimedSteps(*steps, [] {});
      return results();
    }
    absl::Status ran = RunWithProgressDeadline(
        [steps](const std::function<void()>& progress) {
          torch::jit::GraphOptimizerEnabledGuard optimize(true);
          c10::AutoGradMode grad(steps->training);
          try {
            RunTimedSteps(*steps, progress);
          } catch (const StepFailure& f) {
            steps->failed_model = f.model;
            return absl::InvalidArgumentError(f.what());
          }
          return absl::OkStatus();
        },
        stall_limit);
    if (absl::IsDeadlineExceeded(ran)) {
      *failed_model = steps->running->load();  // the model whose step made no progress
      return ran;
    }
    if (!ran.ok()) {
      *failed_model = steps->failed_model;
      return absl::InvalidArgumentError(TorchErrorMessage(std::string(ran.message())));
    }
    return results();
  } catch (const StepFailure& f) {
    *failed_model = f.model;
    return absl::InvalidArgumentError(TorchErrorMessage(f.what()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(TorchErrorMessage(e.what()));
  }
}

// One kind of step (a forward, or with `train` a training step) of `models`, alternated:
// figures[0] the reference's where it is timed. Errors as TimeBoth says.
absl::StatusOr<std::vector<StepMeasure>> MeasureBoth(const CheckSubject& s,
                                                     const std::vector<const torch::jit::Module*>& models,
                                                     StepTiming timing, bool train) {
  const absl::Duration stall = absl::Seconds(s.options.executor_stall_s);
  const bool executor = timing == StepTiming::kExecutor;
  int failed = -1;
  auto m = MeasureSteps(models, s.samples, s.options.dtype, s.device, train, timing, stall, &failed);
  if (m.ok()) return m;
  const bool reference_failed = failed >= 0 && models[failed] == &s.reference;
  const bool candidate_failed = failed >= 0 && models[failed] == &s.candidate;
  if (absl::IsDeadlineExceeded(m.status())) {
    // The original's steps all ran and the optimized model's did not: users running the
    // artifact with the executor's defaults would wait as long (torch 2.11's CUDA fuser
    // compiling a stored-table lookup's index arithmetic, bench/RESULTS.md).
    if (candidate_failed && s.options.time_reference) {
      return absl::UnavailableError(absl::StrCat(
          "the optimized model's ", train ? "training step" : "forward",
          " made no progress within ", s.options.executor_stall_s,
          " s with the graph executor's optimizations on, as users run it (the original's steps "
          "finished)"));
    }
    return m;
  }
  if (executor && reference_failed) {
    return absl::AbortedError(absl::StrCat(
        "the original model's ", train ? "training step" : "forward",
        " fails with the graph executor's optimizations on: ", m.status().message()));
  }
  if (executor && candidate_failed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "timing failed: the optimized model's ", train ? "training step" : "forward",
        " fails with the graph executor's optimizations on, as users run it: ", m.status().message()));
  }
  return absl::InvalidArgumentError(absl::StrCat("timing failed: ", m.status().message()));
}

// Median step times of both models (forward; training step too in training mode), timed as
// `timing` says, their steps alternated. With the executor: a step that stops making progress
// is DeadlineExceeded, a step of the reference that throws is Aborted (both: time in the
// interpreter instead); a step of the candidate that throws fails the timing, naming the
// candidate (users running it with the executor would meet the same error).
absl::Status TimeBoth(const CheckSubject& s, StepTiming timing, CheckReport* report) {
  std::vector<const torch::jit::Module*> models = {&s.candidate};
  if (s.options.time_reference) models.insert(models.begin(), &s.reference);
  report->timing = timing;
  SENTIER_ASSIGN_OR_RETURN(forward, MeasureBoth(s, models, timing, false));
  if (s.options.time_reference) {
    report->reference_ms = forward.front().median_ms;
    report->reference_peak_bytes = forward.front().peak_bytes;
  }
  report->candidate_ms = forward.back().median_ms;
  report->candidate_peak_bytes = forward.back().peak_bytes;
  if (s.options.training) {
    SENTIER_ASSIGN_OR_RETURN(train, MeasureBoth(s, models, timing, true));
    if (s.options.time_reference) {
      report->reference_train_ms = train.front().median_ms;
      report->reference_train_peak_bytes = train.front().peak_bytes;
    }
    report->candidate_train_ms = train.back().median_ms;
    report->candidate_train_peak_bytes = train.back().peak_bytes;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TimeBothOrFallBack(const CheckSubject& s, CheckReport* report) {
  absl::Status timed = TimeBoth(s, s.options.timing, report);
  if (absl::IsDeadlineExceeded(timed)) {
    report->timing_fallback = absl::StrCat(
        "a step timed with the graph executor's optimizations on made no progress within ",
        s.options.executor_stall_s, " s (its thread was left behind); both models were timed in the interpreter");
  } else if (absl::IsAborted(timed)) {
    report->timing_fallback =
        absl::StrCat(timed.message(), "; both models were timed in the interpreter");
  } else {
    return timed;
  }
  report->reference_ms = report->candidate_ms = report->reference_train_ms = report->candidate_train_ms = -1.0;
  report->reference_peak_bytes = report->candidate_peak_bytes = -1;
  report->reference_train_peak_bytes = report->candidate_train_peak_bytes = -1;
  return TimeBoth(s, StepTiming::kInterpreter, report);
}

}  // namespace equivalence_internal

absl::Status CheckStepTiming(StepTiming timing) {
  if (timing == StepTiming::kExecutor && TORCH_VERSION_MAJOR < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "timing 'executor' needs LibTorch 2.x; this is ", TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR,
        " (its profiling executor asserts on graphs with aten::stack, which batched forms contain)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<StepTiming> StepTimingFromFlag(absl::string_view text) {
  if (text == "auto") return TORCH_VERSION_MAJOR >= 2 ? StepTiming::kExecutor : StepTiming::kInterpreter;
  absl::StatusOr<StepTiming> timing = ParseStepTiming(text);
  if (!timing.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timing must be auto, interpreter or executor, not '", text, "'"));
  }
  absl::Status can = CheckStepTiming(*timing);
  if (!can.ok()) return absl::InvalidArgumentError(absl::StrCat("--timing: ", can.message()));
  return timing;
}

}  // namespace sentier
