// sentier_opt — one-shot optimizer driver, in the manner of mlir-opt.
//
//   sentier_opt --input=IN(.pt|.ir) --output=OUT(.pt|.ir) [--rules=PATH[,PATH...]]
//               [--enable=RE2] [--disable=RE2] [--inputs=inputs.pt] [--report=report.json]
//               [--print_ir_before] [--print_ir_after[=PASS,...|all|final]] [--dot_before=F]
//               [--dot_after=F] [--max_rounds=N] [--list_rules] [--list_functions]
//               [--list_passes] [--gate=on ...] and the pipeline options (tools/option_flags.h)
//
// The report (--report) follows runtime/report_schema.json, the schema sentierd's report.json
// uses too. Without the gate (--gate=on; its old name --cost=measure is an alias) a rewritten
// graph that makes more kernel launches per training step (runtime/graph_runner.h's OpTally;
// forward and backward; per forward with --mode=inference) than the original is not written (the
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
#include "runtime/gate.h"
#include "runtime/equivalence_checker.h"
#include "runtime/graph_runner.h"
#include "tools/flags.h"
#include "tools/option_flags.h"
#include "runtime/model_format.h"
#include "runtime/model_io.h"
#include "runtime/options_enums.h"
#include "runtime/pipeline/pipeline.h"
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
DEFINE_string(dot_before, "", "write a Graphviz file of the graph before optimization");
DEFINE_string(dot_after, "", "write a Graphviz file of the graph after optimization");
DEFINE_bool(list_rules, false, "print the loaded rules (name<TAB>family<TAB>file:line) and exit");
DEFINE_bool(list_functions, false, "print the rule language's functions and builtins and exit");

namespace {

constexpr int kOk = 0;
constexpr int kInternal = 1;
constexpr int kBadInput = 2;

int Fail(int code, const std::string& msg) {
  std::cerr << "sentier_opt: " << msg << "\n";
  return code;
}

// A bad flag or input: exit 2 with the message.
struct Usage {
  std::string message;
};

// Listings (--list_functions, --list_passes, and with the rules loaded --list_rules): printed,
// then exit 0.
bool PrintListing(const sentier::RuleSet* rules) {
  if (FLAGS_list_functions) {
    std::cout << sentier::DescribeLanguage() << "\n";
  } else if (FLAGS_list_passes) {
    for (const std::string& p : sentier::CanonicalPassNames()) std::cout << p << "\n";
  } else if (FLAGS_list_rules && rules != nullptr) {
    for (size_t i = 0; i < rules->size(); ++i) {
      const sentier::Rule& r = rules->rule(i);
      std::cout << r.name << "\t" << r.family << "\t" << r.loc.file << ":" << r.loc.line << "\n";
    }
  } else {
    return false;
  }
  return true;
}

absl::StatusOr<std::shared_ptr<const sentier::RuleSet>> LoadSelectedRules() {
  std::vector<std::string> paths;
  if (FLAGS_rules.empty()) {
    paths.push_back(sentier::DefaultRulesDir());
  } else {
    paths = absl::StrSplit(FLAGS_rules, ',', absl::SkipEmpty());
  }
  auto loaded = sentier::LoadRules(paths);
  if (!loaded.ok()) return loaded.status();
  return (*loaded)->Filter(FLAGS_enable, FLAGS_disable);
}

// IR printing (--print_ir_after): "final" (the bare flag), "all", or pass names (canonicalization
// passes and "rules", after each round of rules that changed the graph).
struct IrPrinting {
  std::set<std::string> after;
  bool all = false;
  bool final = false;
};

absl::StatusOr<IrPrinting> ParseIrPrinting() {
  IrPrinting p;
  const auto& passes = sentier::CanonicalPassNames();
  for (absl::string_view name : absl::StrSplit(FLAGS_print_ir_after, ',', absl::SkipEmpty())) {
    if (name == "final") {
      p.final = true;
    } else if (name == "all") {
      p.all = p.final = true;
    } else if (name != "rules" && std::find(passes.begin(), passes.end(), name) == passes.end()) {
      return absl::InvalidArgumentError(absl::StrCat("--print_ir_after: unknown pass '", name, "' (passes: ",
                                                     absl::StrJoin(passes, ", "), ", rules; or all, final)"));
    } else {
      p.after.insert(std::string(name));
    }
  }
  return p;
}

// CheckPaths: the input and output are named, the output's kind fits the input's, and where the
// results go is writable before any work starts.
absl::Status CheckPaths() {
  if (FLAGS_input.empty()) return absl::InvalidArgumentError("--input is required (see --help)");
  if (FLAGS_output.empty()) return absl::InvalidArgumentError("--output is required (see --help)");
  const bool out_ir = absl::EndsWith(FLAGS_output, ".ir");
  const bool out_pt2 = absl::EndsWith(FLAGS_output, ".pt2");
  if (!out_ir && !out_pt2 && !absl::EndsWith(FLAGS_output, ".pt")) {
    return absl::InvalidArgumentError(absl::StrCat("--output '", FLAGS_output, "' must end in .pt, .pt2 or .ir"));
  }
  if (!out_ir && absl::EndsWith(FLAGS_input, ".ir")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot write '", FLAGS_output, "': a .pt or .pt2 output needs a module (text IR has none)"));
  }
  if (!out_ir && out_pt2 != absl::EndsWith(FLAGS_input, ".pt2")) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write '", FLAGS_output, "' from '", FLAGS_input,
                                                   "': an artifact is in its input's format (.pt from .pt, .pt2 from .pt2)"));
  }
  for (const std::string& out : {FLAGS_output, FLAGS_report}) {
    if (out.empty()) continue;
    if (absl::Status writable = sentier::CheckWritableDirOf(out); !writable.ok()) return writable;
  }
  return absl::OkStatus();
}

// PrintInput: --print_ir_before and --dot_before show the graph the rules will see: inlined.
absl::Status PrintInput() {
  if (!FLAGS_print_ir_before && FLAGS_dot_before.empty()) return absl::OkStatus();
  auto format = sentier::FormatFor(FLAGS_input);
  if (!format.ok()) return format.status();
  auto model = (*format)->Load(FLAGS_input);
  if (!model.ok()) return model.status();
  auto copy = model->graph->copy();
  torch::jit::Inline(*copy);
  if (FLAGS_print_ir_before) std::cout << "// ----- IR before sentier -----\n" << copy->toString();
  if (FLAGS_dot_before.empty()) return absl::OkStatus();
  return sentier::WriteFileAtomically(FLAGS_dot_before, sentier::GraphToDot(*copy));
}

// BuildRequest: the flags as a pipeline request; the gate needs a .pt model and its inputs.
absl::StatusOr<sentier::PipelineRequest> BuildRequest(std::shared_ptr<const sentier::RuleSet> rules) {
  auto flags = sentier::PipelineOptionsFromFlags(sentier::Tool::kSentierOpt, torch::cuda::is_available());
  if (!flags.ok()) return flags.status();
  for (const std::string& notice : flags->notices) std::cerr << "sentier_opt: note: " << notice << "\n";
  sentier::PipelineRequest req;
  req.model_path = FLAGS_input;
  req.inputs_path = FLAGS_inputs;
  req.inputs_must_run = false;  // optimized without shape facts, with a warning
  req.rules = std::move(rules);
  req.artifact_path = FLAGS_output;
  req.options = flags->options;
  const bool pt = absl::EndsWith(FLAGS_input, ".pt");
  const bool pt2 = absl::EndsWith(FLAGS_input, ".pt2");  // holds its sample inputs
  if (req.options.param_layout == sentier::ParameterLayout::kStacked && !pt && !pt2) {
    return absl::InvalidArgumentError("--param_layout=stacked needs a .pt or .pt2 model");
  }
  // The gate runs where asked (auto: on CUDA); without it nothing runs on the device.
  const bool gate = sentier::GateOn(req.options);
  if (!gate) req.options.device = sentier::Device::kCpu;
  if (gate && !pt2 && (FLAGS_inputs.empty() || !pt)) {
    return absl::InvalidArgumentError("--gate=on (--cost=measure) needs a .pt model and --inputs, or a .pt2");
  }
  return req;
}

// FailureExit: the exit code and message of an outcome that did not decide.
int FailureExit(const sentier::Outcome& out) {
  const absl::Status& error = out.error;
  if (out.output_failed) return Fail(error.code() == absl::StatusCode::kInternal ? kInternal : kBadInput,
                                     std::string(error.message()));
  switch (*out.failed_stage) {
    case sentier::PipelineStage::kLoad:
    case sentier::PipelineStage::kPlace:
      return Fail(kBadInput, std::string(error.message()));
    case sentier::PipelineStage::kGate:
      return Fail(kInternal, absl::StrCat("--gate: ", error.message()));
    default:
      return Fail(kInternal, out.reason);
  }
}

// PrintOutcome: the rule engine's warnings, the IR and graph files asked for, and one summary line.
absl::Status PrintOutcome(const sentier::Outcome& out, const IrPrinting& printing) {
  const sentier::OptimizeReport& report = *out.optimization;
  for (const auto& [name, n] : report.stats.errors) {
    std::cerr << "sentier_opt: warning: rule " << name << " matched but its rewrite failed " << n
              << " time(s): " << report.stats.first_error.at(name) << "\n";
  }
  for (const auto& [name, why] : report.stats.stopped) std::cerr << "sentier_opt: warning: rule " << name << " " << why << "\n";
  if (!report.shape_facts_error.empty()) {
    std::cerr << "sentier_opt: warning: no shape facts: " << report.shape_facts_error << "\n";
  }
  const auto& graph = *out.loaded->model.graph;
  if (printing.final) std::cout << "// ----- IR after sentier -----\n" << graph.toString();
  if (!FLAGS_dot_after.empty()) {
    if (absl::Status st = sentier::WriteFileAtomically(FLAGS_dot_after, sentier::GraphToDot(graph)); !st.ok()) return st;
  }
  std::cout << "sentier_opt: " << FLAGS_input << " -> " << FLAGS_output << ": ";
  if (out.status != sentier::ReportStatus::kOptimized) {
    std::cout << "unchanged: " << out.reason << "\n";
    return absl::OkStatus();
  }
  std::vector<std::string> fired;
  for (const auto& [name, n] : report.stats.applications) fired.push_back(absl::StrCat(name, " x", n));
  std::cout << out.rewrites << " rewrites (" << absl::StrJoin(fired, ", ") << "); nodes " << report.nodes_before
            << " -> " << report.nodes_after << "; " << absl::StrFormat("%.1f", report.optimize_ms) << " ms";
  if (out.loaded->ops.forward >= 0) {
    std::cout << "; aten ops per forward " << out.loaded->ops.forward << " -> " << out.ops_after.forward;
  }
  std::cout << "\n";
  return absl::OkStatus();
}

int Run() {
  if (PrintListing(nullptr)) return kOk;
  auto rules = LoadSelectedRules();
  if (!rules.ok()) return Fail(kBadInput, std::string(rules.status().message()));
  if (PrintListing(rules->get())) return kOk;
  auto printing = ParseIrPrinting();
  if (!printing.ok()) return Fail(kBadInput, std::string(printing.status().message()));
  if (!FLAGS_debug.empty()) {
    absl::Status st = sentier::EnableDebugCategories(FLAGS_debug);
    if (!st.ok()) return Fail(kBadInput, absl::StrCat("--debug: ", st.message()));
    sentier::DebugSink() = [](absl::string_view line) { std::cerr << line << "\n"; };
  }
  if (absl::Status st = CheckPaths(); !st.ok()) return Fail(kBadInput, std::string(st.message()));
  if (absl::Status st = PrintInput(); !st.ok()) return Fail(kBadInput, std::string(st.message()));
  auto req = BuildRequest(*rules);
  if (!req.ok()) return Fail(kBadInput, std::string(req.status().message()));
  req->after_pass = [&](const std::string& pass, const torch::jit::Graph& graph) {
    if (!printing->all && printing->after.count(pass) == 0) return;
    std::cout << "// ----- IR after " << pass << " -----\n" << graph.toString();
  };
  const sentier::Outcome out = sentier::OptimizeModel(*req);
  if (out.selection) {
    for (const std::string& line : out.selection->log) std::cout << "sentier_opt: cost: " << line << "\n";
  }
  if (out.failed_stage) return FailureExit(out);

  if (absl::Status st = PrintOutcome(out, *printing); !st.ok()) return Fail(kBadInput, std::string(st.message()));
  if (out.stacked_layout) {
    std::cout << "sentier_opt: note: " << sentier::StackedLayoutAdviceText(*out.stacked_layout, out.loaded->ops)
              << "; here: --param_layout=stacked\n";
  }
  if (out.layout_choice) std::cout << "sentier_opt: param_layout auto: " << out.layout_choice->why << "\n";
  if (FLAGS_report.empty()) return kOk;
  nlohmann::json j = sentier::BuildReport(*req, out, "sentier_opt");
  j["artifact"] = FLAGS_output;
  absl::Status st = sentier::WriteFileAtomically(FLAGS_report, j.dump(2) + "\n");
  return st.ok() ? kOk : Fail(kBadInput, std::string(st.message()));
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
