// sentier_opt — one-shot optimizer driver, in the manner of mlir-opt.
//
//   sentier_opt --input=IN(.pt|.ir) --output=OUT(.pt|.ir) [--rules=PATH[,PATH...]]
//               [--enable=RE2] [--disable=RE2] [--inputs=inputs.pt] [--report=report.json]
//               [--print_ir_before] [--print_ir_after[=PASS,...|all|final]] [--dot_before=F]
//               [--dot_after=F] [--max_rounds=N] [--list_rules] [--list_functions]
//               [--list_passes] [--allow_growth] [--cost=none|measure ...]
//
// The report (--report) follows runtime/report_schema.json, the schema sentierd's report.json
// uses too. Without --cost=measure a rewritten graph that runs more aten ops per training step
// (forward and backward; per forward with --mode=inference) than the original is not written (the
// output is the original, status "unchanged") unless --allow_growth: nothing was timed to show
// that it pays.
//
// Exit codes: 0 success (also when nothing changed); 2 bad usage or bad input (missing, empty,
// truncated or corrupt model, bad sample inputs, bad rule file — the message names the file,
// with file:line:col for rules); 1 internal error. Outputs are written to a temporary file and
// renamed into place, so an output is either complete or absent.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>
#include <iostream>

#include <gflags/gflags.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/cuda.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "passes/optimizer.h"
#include "runtime/cost_selection.h"
#include "runtime/equivalence_checker.h"
#include "runtime/graph_runner.h"
#include "tools/flags.h"
#include "runtime/model_io.h"
#include "runtime/options_enums.h"
#include "runtime/progress_deadline.h"
#include "runtime/report.h"
#include "runtime/torch_settings.h"
#include "runtime/verdict.h"
#include "passes/canonicalize/pipeline.h"
#include "passes/debug_log.h"
#include "passes/torch_error.h"

DEFINE_string(input, "", "model to optimize: a TorchScript archive (.pt) or text IR (.ir)");
DEFINE_string(output, "", "where to write the result (.pt or .ir)");
DEFINE_string(rules, "", "comma-separated rule files or directories (default: shipped library)");
DEFINE_string(enable, "", "only rules whose name fully matches this RE2");
DEFINE_string(disable, "", "skip rules whose name fully matches this RE2");
DEFINE_string(inputs, "", "sample inputs (tuple of tensors, torch.save) for shape facts");
DEFINE_string(report, "", "write a JSON report here");
DEFINE_bool(print_ir_before, false, "print the graph before optimization (after inlining)");
DEFINE_string(print_ir_after, "",
              "print the graph after these passes: comma-separated canonicalization pass names "
              "(see --list_passes), 'rules' (after each round of rules), 'all', or 'final' (the "
              "result; also what the bare --print_ir_after means)");
DEFINE_bool(list_passes, false, "print the canonicalization passes in pipeline order and exit");
DEFINE_string(debug, "", "engine debug output on stderr: 'groups' (every group-rule candidate and its key)");
DEFINE_string(param_layout, "original",
              "original: parameters stay as the model has them (a drop-in by name); stacked: the "
              "parameters the batching rules stack are stored stacked (faster training steps; "
              "original_state_dict()/load_original_state_dict() keep checkpoints interchangeable; "
              "optimizers whose update depends on each tensor's norm, such as LARS or LAMB, "
              "differ)");
DEFINE_bool(allow_growth, false,
            "write the rewritten model even when it runs more aten ops per forward than the "
            "original and nothing was timed (by default the original is kept then)");
DEFINE_string(dot_before, "", "write a Graphviz file of the graph before optimization");
DEFINE_string(dot_after, "", "write a Graphviz file of the graph after optimization");
DEFINE_int32(max_rounds, 16, "bound on rounds of rule application");
DEFINE_bool(list_rules, false, "print the loaded rules (name<TAB>family<TAB>file:line) and exit");
DEFINE_bool(list_functions, false, "print the rule language's functions and builtins and exit");
DEFINE_string(cost, "none",
              "none: apply every rule that matches; measure: time the result on --device and keep "
              "only rewrites that make it faster without raising the step's peak memory by more "
              "than --memory_margin (needs --inputs); when nothing pays, the output is the "
              "original model");
DEFINE_double(memory_margin, 0.01,
              "with --cost=measure: how much (a fraction of the original's) the peak memory of a "
              "step may grow; negative: peak memory is not weighed");
DEFINE_string(device, "auto", "with --cost=measure: auto (CUDA when available), cpu or cuda");
DEFINE_string(timing, "auto",
              "with --cost=measure: how the timed steps run: interpreter (the graph executor's "
              "optimizations off), executor (on, as users run artifacts: on CUDA its fuser merges "
              "pointwise chains; needs LibTorch 2.x; a step that makes no progress for 60 s is "
              "given up on and the interpreter times instead) or auto (executor on LibTorch 2.x, "
              "else interpreter)");
DEFINE_double(executor_stall_s, 60.0,
              "with executor timing: a timed step that has not finished after this many seconds is "
              "given up on, and both models are timed in the interpreter instead");
DEFINE_string(mode, "training",
              "training or inference: the step --cost=measure times, and whose aten ops decide "
              "without it whether a larger graph is written");

namespace {

constexpr int kOk = 0;
constexpr int kInternal = 1;
constexpr int kBadInput = 2;

int Fail(int code, const std::string& msg) {
  std::cerr << "sentier_opt: " << msg << "\n";
  return code;
}

int Run() {
  if (FLAGS_list_functions) {
    std::cout << sentier::DescribeLanguage() << "\n";
    return kOk;
  }
  if (FLAGS_list_passes) {
    for (const std::string& p : sentier::CanonicalPassNames()) std::cout << p << "\n";
    return kOk;
  }
  std::vector<std::string> rule_paths;
  if (FLAGS_rules.empty()) {
    rule_paths.push_back(sentier::DefaultRulesDir());
  } else {
    rule_paths = absl::StrSplit(FLAGS_rules, ',', absl::SkipEmpty());
  }
  auto loaded = sentier::LoadRules(rule_paths);
  if (!loaded.ok()) return Fail(kBadInput, std::string(loaded.status().message()));
  auto rules = (*loaded)->Filter(FLAGS_enable, FLAGS_disable);
  if (!rules.ok()) return Fail(kBadInput, std::string(rules.status().message()));
  if (FLAGS_list_rules) {
    for (size_t i = 0; i < (*rules)->size(); ++i) {
      const sentier::Rule& r = (*rules)->rule(i);
      std::cout << r.name << "\t" << r.family << "\t" << r.loc.file << ":" << r.loc.line << "\n";
    }
    return kOk;
  }
  // --print_ir_after: "final" (the bare flag), "all", or pass names (canonicalization passes and
  // "rules", after each round of rules that changed the graph).
  std::set<std::string> print_after;
  bool print_after_all = false, print_final = false;
  for (absl::string_view name : absl::StrSplit(FLAGS_print_ir_after, ',', absl::SkipEmpty())) {
    if (name == "final") {
      print_final = true;
    } else if (name == "all") {
      print_after_all = print_final = true;
    } else {
      const auto& passes = sentier::CanonicalPassNames();
      if (name != "rules" && std::find(passes.begin(), passes.end(), name) == passes.end()) {
        return Fail(kBadInput, absl::StrCat("--print_ir_after: unknown pass '", name, "' (passes: ",
                                            absl::StrJoin(passes, ", "), ", rules; or all, final)"));
      }
      print_after.insert(std::string(name));
    }
  }
  if (!FLAGS_debug.empty()) {
    absl::Status st = sentier::EnableDebugCategories(FLAGS_debug);
    if (!st.ok()) return Fail(kBadInput, absl::StrCat("--debug: ", st.message()));
    sentier::DebugSink() = [](absl::string_view line) { std::cerr << line << "\n"; };
  }
  if (FLAGS_input.empty()) return Fail(kBadInput, "--input is required (see --help)");
  if (FLAGS_output.empty()) return Fail(kBadInput, "--output is required (see --help)");
  bool out_ir = absl::EndsWith(FLAGS_output, ".ir");
  if (!out_ir && !absl::EndsWith(FLAGS_output, ".pt")) {
    return Fail(kBadInput, absl::StrCat("--output '", FLAGS_output, "' must end in .pt or .ir"));
  }
  auto input_sha = sentier::Sha256OfFile(FLAGS_input);
  auto model = sentier::LoadModel(FLAGS_input);
  if (!model.ok()) return Fail(kBadInput, std::string(model.status().message()));
  if (!out_ir && !model->is_module) {
    return Fail(kBadInput, absl::StrCat("cannot write '", FLAGS_output,
                                        "': a .pt output needs a .pt input (text IR has no module)"));
  }
  // Where the results go must be writable before any work starts.
  for (const std::string& out : {FLAGS_output, FLAGS_report}) {
    if (out.empty()) continue;
    absl::Status writable = sentier::CheckWritableDirOf(out);
    if (!writable.ok()) return Fail(kBadInput, std::string(writable.message()));
  }
  std::vector<c10::IValue> samples;
  sentier::OptimizeOptions opts;
  opts.max_rounds = FLAGS_max_rounds;
  if (!FLAGS_inputs.empty()) {
    auto in = model->is_module ? sentier::LoadSampleInputsFor(FLAGS_inputs, model->module)
                               : sentier::LoadSampleInputs(FLAGS_inputs);
    if (!in.ok()) return Fail(kBadInput, std::string(in.status().message()));
    if (model->is_module) samples.push_back(model->module._ivalue());
    samples.insert(samples.end(), in->begin(), in->end());
    opts.sample_inputs = &samples;
  }
  if (FLAGS_print_ir_before || !FLAGS_dot_before.empty()) {
    // Show the graph the rules will see: inlined.
    auto copy = model->graph->copy();
    torch::jit::Inline(*copy);
    if (FLAGS_print_ir_before) std::cout << "// ----- IR before sentier -----\n" << copy->toString();
    if (!FLAGS_dot_before.empty()) {
      absl::Status st = sentier::WriteFileAtomically(FLAGS_dot_before, sentier::GraphToDot(*copy));
      if (!st.ok()) return Fail(kBadInput, std::string(st.message()));
    }
  }
  nlohmann::json j = sentier::NewReport("sentier_opt");
  j["source"] = FLAGS_input;
  j["artifact"] = FLAGS_output;
  j["source_sha256"] = input_sha.ok() ? *input_sha : "";
  j["rules_fingerprint"] = (*rules)->Fingerprint();
  j["rules_loaded"] = (*rules)->size();
  j["mode"] = FLAGS_mode;
  j["device"] = std::string(sentier::DeviceName(sentier::Device::kCpu));
  auto write_report = [&]() -> int {
    if (FLAGS_report.empty()) return kOk;
    absl::Status st = sentier::WriteFileAtomically(FLAGS_report, j.dump(2) + "\n");
    return st.ok() ? kOk : Fail(kBadInput, std::string(st.message()));
  };
  // The output is the original archive, byte for byte: nothing applied, nothing paid.
  auto keep_original = [&](const std::string& reason) -> int {
    if (out_ir) {
      absl::Status st = sentier::SaveModel(*model, FLAGS_output);  // the (inlined) input graph
      if (!st.ok()) return Fail(kBadInput, std::string(st.message()));
    } else {
      auto bytes = sentier::ReadFile(FLAGS_input);
      if (!bytes.ok()) return Fail(kBadInput, std::string(bytes.status().message()));
      absl::Status st = sentier::WriteFileAtomically(FLAGS_output, *bytes);
      if (!st.ok()) return Fail(kBadInput, std::string(st.message()));
    }
    auto sha = sentier::Sha256OfFile(FLAGS_output);
    j["status"] = std::string(sentier::ReportStatusName(sentier::ReportStatus::kUnchanged));
    j["reason"] = reason;
    j["artifact_sha256"] = sha.ok() ? *sha : "";
    std::cout << "sentier_opt: " << FLAGS_input << " -> " << FLAGS_output << ": unchanged: " << reason << "\n";
    return write_report();
  };
  // The layout first: the gate measures the artifact in the layout it will be written in.
  absl::StatusOr<sentier::ParameterLayout> layout = sentier::ParseParameterLayout(FLAGS_param_layout);
  if (!layout.ok()) {
    return Fail(kBadInput, absl::StrCat("--param_layout must be original or stacked, not '", FLAGS_param_layout, "'"));
  }
  if (*layout == sentier::ParameterLayout::kStacked) {
    if (!model->is_module) return Fail(kBadInput, "--param_layout=stacked needs a .pt model");
    opts.stacked_parameters = true;
  }
  // The step that is timed (--cost=measure) or whose aten ops are counted (without it).
  absl::StatusOr<sentier::ValidationMode> mode = sentier::ParseValidationMode(FLAGS_mode);
  if (!mode.ok() || *mode == sentier::ValidationMode::kBoth) {
    return Fail(kBadInput, absl::StrCat("--mode must be training or inference, not '", FLAGS_mode, "'"));
  }
  absl::StatusOr<sentier::StepTiming> timing = sentier::StepTimingFromFlag(FLAGS_timing);
  if (!timing.ok()) return Fail(kBadInput, std::string(timing.status().message()));
  if (!(FLAGS_executor_stall_s >= 0)) return Fail(kBadInput, "--executor_stall_s must be >= 0");
  sentier::CostSelection selection;
  bool measured = false;
  if (FLAGS_cost == "measure") {
    if (FLAGS_inputs.empty() || !model->is_module) {
      return Fail(kBadInput, "--cost=measure needs a .pt model and --inputs");
    }
    sentier::CostOptions copts;
    bool cuda = torch::cuda::is_available();
    absl::StatusOr<sentier::DeviceRequest> device = sentier::ParseDeviceRequest(FLAGS_device);
    if (device.ok() && *device == sentier::DeviceRequest::kCuda && !cuda) {
      return Fail(kBadInput, "--device=cuda but no CUDA device is available");
    }
    if (!device.ok()) return Fail(kBadInput, "--device must be auto, cpu or cuda");
    copts.device = *device == sentier::DeviceRequest::kCuda || (*device == sentier::DeviceRequest::kAuto && cuda)
                       ? sentier::Device::kCuda
                       : sentier::Device::kCpu;
    copts.training = *mode == sentier::ValidationMode::kTraining;
    copts.margins.memory = FLAGS_memory_margin;
    copts.timing = *timing;
    copts.executor_stall_s = FLAGS_executor_stall_s;
    copts.optimize = opts;  // the artifact's options: layout and rounds
    const std::string device_name(sentier::DeviceName(copts.device));
    j["device"] = device_name;
    std::vector<c10::IValue> plain(samples.begin() + 1, samples.end());
    auto sel = sentier::SelectRulesByMeasurement(FLAGS_input, plain, **rules, copts);
    if (!sel.ok()) return Fail(kInternal, absl::StrCat("--cost=measure: ", sel.status().message()));
    selection = *sel;
    measured = true;
    sentier::AddSelection(selection, copts.device, *mode, &j);
    for (const std::string& line : selection.log) std::cout << "sentier_opt: cost: " << line << "\n";
    if (!selection.faster) {
      return keep_original(
          (!selection.confirmed
               ? absl::StrFormat("the selection's gain was not confirmed when timed again (%.3f ms "
                                 "vs %.3f ms original; first ",
                                 selection.confirm_ms, selection.confirm_original_ms)
           : selection.nothing_fires_within_memory
               ? std::string("every set of rewrites raised peak memory beyond the bound (")
           : selection.within_memory
               ? std::string("no rewrite made it faster (")
               : std::string("no faster set of rewrites kept peak memory within bounds (")) +
          absl::StrFormat("%.3f ms optimized vs %.3f ms original, peak %.1f vs %.1f MiB",
                          selection.optimized_ms, selection.original_ms,
                          selection.optimized_peak_bytes / 1048576.0,
                          selection.original_peak_bytes / 1048576.0) +
          " per " + FLAGS_mode + " step on " + device_name + ")" +
          (selection.memory_margin_for_all_rules >= 0
               ? absl::StrFormat("; every rule together: %.3f ms at %.1f MiB, within "
                                 "--memory_margin=%.2f",
                                 selection.all_rules_ms, selection.all_rules_peak_bytes / 1048576.0,
                                 selection.memory_margin_for_all_rules)
               : std::string()));
    }
    rules = selection.rules;
  } else if (FLAGS_cost != "none") {
    return Fail(kBadInput, absl::StrCat("--cost must be none or measure, not '", FLAGS_cost, "'"));
  }
  if (model->is_module) opts.self = model->module._ivalue();
  j["param_layout"] = std::string(sentier::ParameterLayoutName(*layout));
  opts.after_pass = [&](const std::string& pass, const torch::jit::Graph& graph) {
    if (!print_after_all && print_after.count(pass) == 0) return;
    std::cout << "// ----- IR after " << pass << " -----\n" << graph.toString();
  };
  // Executed aten ops per forward and per training step (CPU proxy for kernel launches), before
  // and after; the counts before are taken first (with stacked parameters the module itself
  // changes). Without --cost=measure, the count of the --mode step decides whether a larger
  // graph is written.
  const bool inference_only = *mode == sentier::ValidationMode::kInference;
  sentier::OpCounts before, after;
  if (opts.sample_inputs != nullptr) {
    auto b = sentier::CountAtenOps(model->graph->copy(), samples);
    if (b.ok()) before.forward = *b;
    if (!inference_only) {
      auto sb = sentier::CountAtenOpsPerTrainingStep(model->graph->copy(), samples);
      if (sb.ok()) before.training_step = *sb;
    }
  }
  auto report = sentier::OptimizeGraph(model->graph, **rules, opts);
  if (!report.ok()) return Fail(kInternal, std::string(report.status().message()));
  sentier::AddOptimization(*report, &j);
  if (!report->param_layout.empty()) {
    j["stacked_parameters"] = nlohmann::json::parse(report->param_layout.ToJson())["stacked"];
  }
  if (print_final) std::cout << "// ----- IR after sentier -----\n" << model->graph->toString();
  if (!FLAGS_dot_after.empty()) {
    absl::Status st =
        sentier::WriteFileAtomically(FLAGS_dot_after, sentier::GraphToDot(*model->graph));
    if (!st.ok()) return Fail(kBadInput, std::string(st.message()));
  }
  // The count after, in the report with the count before, where both could be taken.
  auto count_after = [&](const absl::StatusOr<int64_t>& after, int64_t before, const char* key,
                         int64_t* out) {
    if (before < 0 || !after.ok()) return;
    *out = *after;
    j[absl::StrCat(key, "_before")] = before;
    j[absl::StrCat(key, "_after")] = *after;
  };
  if (before.forward >= 0) {
    count_after(sentier::CountAtenOps(model->graph, samples), before.forward,
                "aten_ops_per_forward", &after.forward);
  }
  if (before.training_step >= 0) {
    count_after(sentier::CountAtenOpsPerTrainingStep(model->graph, samples),
                before.training_step, "aten_ops_per_training_step", &after.training_step);
  }
  for (const auto& [name, n] : report->stats.errors) {
    std::cerr << "sentier_opt: warning: rule " << name << " matched but its rewrite failed " << n
              << " time(s): " << report->stats.first_error[name] << "\n";
  }
  for (const auto& [name, why] : report->stats.stopped) {
    std::cerr << "sentier_opt: warning: rule " << name << " " << why << "\n";
  }
  if (!report->shape_facts_error.empty()) {
    std::cerr << "sentier_opt: warning: no shape facts: " << report->shape_facts_error << "\n";
  }
  std::vector<std::string> fired;
  int64_t total = 0;
  for (const auto& [name, n] : report->stats.applications) {
    fired.push_back(absl::StrCat(name, " x", n));
    total += n;
  }
  if (total == 0) {
    return keep_original(FLAGS_inputs.empty() && model->is_module
                             ? "no rule applied (0 rewrites; without --inputs no sizes are known, "
                               "and most rules need them: splits by size, batching)"
                             : "no rule applied (0 rewrites)");
  }
  // The step users run decides (verdict.h): a training step unless --mode=inference or the step
  // could not be counted.
  std::string growth;
  if (!measured && !FLAGS_allow_growth && sentier::UntimedGrowth(before, after, &growth)) {
    return keep_original(absl::StrCat(
        "the rewritten graph runs more aten ops per ", growth,
        " and nothing was timed to show that it is faster (--cost=measure times it; "
        "--allow_growth writes it anyway)"));
  }
  absl::Status saved = sentier::SaveModel(*model, FLAGS_output);
  if (!saved.ok()) {
    int code = saved.code() == absl::StatusCode::kInternal ? kInternal : kBadInput;
    return Fail(code, std::string(saved.message()));
  }
  auto output_sha = sentier::Sha256OfFile(FLAGS_output);
  j["artifact_sha256"] = output_sha.ok() ? *output_sha : "";
  j["status"] = std::string(sentier::ReportStatusName(sentier::ReportStatus::kOptimized));
  j["reason"] = absl::StrCat(total, " rewrites applied", measured ? " (faster when timed)" : "");
  std::cout << "sentier_opt: " << FLAGS_input << " -> " << FLAGS_output << ": " << total
            << " rewrites (" << absl::StrJoin(fired, ", ") << "); nodes " << report->nodes_before
            << " -> " << report->nodes_after << "; " << absl::StrFormat("%.1f", report->optimize_ms)
            << " ms"
            << (before.forward >= 0 ? absl::StrCat("; aten ops per forward ", before.forward, " -> ", after.forward)
                                : std::string())
            << "\n";
  return write_report();
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "sentier_opt --input=IN(.pt|.ir) --output=OUT(.pt|.ir) [--rules=...] [--report=...]\n"
      "Exit codes: 0 success, 2 bad usage or input, 1 internal error.");
  // Unknown flags are bad usage (exit 2), not gflags' default exit 1.
  // The bare --print_ir_after (a bool before passes could be named) means the final graph.
  std::vector<char*> args(argv, argv + argc);
  static char kPrintFinal[] = "--print_ir_after=final";
  for (char*& a : args) {
    if (std::strcmp(a, "--print_ir_after") == 0 || std::strcmp(a, "-print_ir_after") == 0) a = kPrintFinal;
  }
  argv = args.data();
  std::string unknown = sentier::FindUnknownFlag(argc, argv);
  if (!unknown.empty()) return Fail(kBadInput, absl::StrCat("unknown flag '", unknown, "' (see --help)"));
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (argc > 1) return Fail(kBadInput, absl::StrCat("unexpected argument '", argv[1], "'"));
  sentier::ApplyTorchSettings();
  // A timing thread left behind (runtime/progress_deadline.h) ends the process through _exit.
  try {
    return sentier::FinishProcess(Run());
  } catch (const std::exception& e) {
    std::string what = e.what();
    return sentier::FinishProcess(
        Fail(kInternal, absl::StrCat("internal error: ", sentier::TorchErrorMessage(what))));
  }
}
