// sentierd — the Sentier daemon: watches a model registry, optimizes every new version in a
// child process, validates it and publishes it crash-safely.
//
//   sentierd --registry=REG --output=OUT [--rules=PATH[,PATH...]] [--poll_interval_ms=2000]
//            [--once] [--workers=1] [--device=auto|cpu|cuda] [--mode=inference|training|both]
//            [--job_timeout_s=600] [--metrics_port=0] [--metrics_address=127.0.0.1]
//            [--shard=i/n|auto] [--shard_count=N] [--max_model_bytes=N]
//            [--shutdown_grace_s=30] [--job_command=PROGRAM]
//            and the pipeline options every job runs with, the same flags as sentier_opt's
//            (tools/option_flags.h, docs/options.md): --gate=auto|on|off (its old name
//            --select_rules is an alias), --param_layout, --timing, the memory policy, ...
//
// Timing (the gate's and the validation's): auto, the default, times steps with the graph
// executor's optimizations on where LibTorch is 2.x (as users run artifacts: on CUDA its fuser
// merges pointwise chains) and in the interpreter on 1.x. A step timed with the executor that
// does not finish within --executor_stall_s (torch 2.11's fuser can fail to return) is given up
// on; the job times in the interpreter instead and report.json's selection.timing_fallback says
// so.
//
// Registry (read-only): REG/<model>/<version>/{model.pt,inputs.pt}; see
// runtime/daemon/registry_watcher.h for names, settling and refusals. An optional
// REG/<model>/sentier.json sets per-model options over the flags, e.g. {"param_layout":
// "stacked", "mode": "training"} (runtime/pipeline/options.h, ApplyModelConfigJson); any other
// key or value rejects the model's versions with the reason.
// Output: OUT/<model>/<version>/{model.pt,report.json} (no model.pt when rejected),
// OUT/.sentierd/state.json (progress), OUT/.sentierd/rules-<fp>/ (snapshots of the good rule
// sets the jobs load), OUT/LOCK (flock; one daemon per OUT), OUT/.tmp-* (staging; removed at
// start-up).
// Replicas (--shard=i/n; runtime/daemon/daemon_manager.h, "Replicas"): n daemons share one OUT;
// each holds OUT/LOCK shared and OUT/.sentierd/replica-<i>-of-<n>.lock exclusive, keeps
// OUT/.sentierd/state-<i>-of-<n>.json, claims each version (flock on
// OUT/.sentierd/claims/<model>/<version>.lock) before its job and re-checks its published
// report; at start-up it removes only the staging dirs whose claim is free.
//
// Exit codes:
//   0  --once pass completed (whatever the outcomes), or stopped by SIGTERM/SIGINT
//   1  internal error
//   2  bad flags: unknown flag, missing --registry/--output, bad --shard/--shard_count (with
//      --shard=auto: no index from SENTIER_SHARD_INDEX or the host name's -<ordinal>, no count
//      from --shard_count or SENTIER_SHARD_COUNT, or the index not below the count), a bad
//      pipeline option (--mode, --gate, --device, the memory policy, ...: "--<flag> must be
//      ..."), bad --workers/--poll_interval_ms, --device=cuda on a build without CUDA, or
//      the rule set fails to load at start-up (there is no previous good rule set)
//   3  OUT is locked by another sentierd ("output '<OUT>' is locked by another sentierd"; with
//      --shard: "... another sentierd with --shard=i/n" for a second replica of one shard,
//      "... without --shard" beside a daemon that runs alone, and the other way round)
//   4  registry unreadable ("registry unreadable: cannot read '<REG>': ...") or output
//      unwritable ("output unwritable: ...")
//   5  --metrics_port set and --metrics_address:--metrics_port cannot be bound: taken, not an
//      address of this machine, or a name that does not resolve ("cannot serve metrics on
//      ADDR:PORT: Address already in use"); checked first, before OUT is touched
//
// Endpoints (with --metrics_port; on --metrics_address only, default 127.0.0.1): /metrics
// (Prometheus text format, runtime/daemon/daemon_metrics.h lists the metrics), /healthz (200
// "ok" while the process runs), /readyz (200 "ready" once a rule set is loaded and a registry
// poll has succeeded; 503 with the reason before).
//
// Messages (glog on stderr; every line about a version starts with "[model/version]"):
//   [m/v] published <status>: <reason> (…)                one line per job
//   [m/v] job: rejected: <reason>                          from the job process
//   [m/v] rejected: job process crashed (signal N: …) / exited with status N / timed out after Ns
//   [m/v] kept the earlier artifact '…': the re-run was rejected
//   [m/v] job: cannot write the output: <path>: No space left on device (or another errno)
//   [m/v] output not written (…); retried in N s             nothing recorded or published;
//   [m/v] publish failed: …; retried in N s                  N = 1 s, doubling up to 60 s
//   [m/v] refused: <file> is not readable (Permission denied) | is a symlink leading outside
//         the registry | has N bytes, above
//         --max_model_bytes=M | is not a regular file
//   registry: ignoring '<path>': model names must match … / version directories must be named
//         by a positive number without leading zeros / a symlink leading outside the registry
//   rules: <file>:<line>:<col>: <message>; keeping the previous rule set <fp>
//   rules: loaded N rules, fingerprint <fp>
//   state: corrupt state file '<path>': …; rebuilding from published reports
//   [m/v] claimed by another replica; left to it            (--shard; once per version)
//   [m/v] already published by another replica; adopted its report   (--shard)
// Job reasons (report.json "reason"; "decision" names the clause, runtime/pipeline/pipeline.h): "load
// failure: …" (names the file), "placement failure: …", "count failure: the optimized graph does
// not run: …", "validation failure on cpu|cuda: …", "optimizer error: …",
// "crash: …", "job process crashed …", "timed out after N s", "rule selection failed: …",
// "refused: …", "bad sentier.json: …"; unchanged (original published): "The rules found nothing
// to rewrite: no rule applied …", "No set of rules made the model faster on cuda[ within the
// peak-memory bound] …", "Every set of rules that changes the model needed more peak memory …",
// "The selection's gain was not confirmed …", "The optimized model was not faster on the GPU
// …", "The optimized model needed more peak GPU memory than the memory policy allows …", "The
// optimized graph runs more kernel launches per …"; a reused decision's reason starts "Decision reused
// from version N: " (runtime/pipeline/decision.cc words them all).
// At the end of --once, one line per model on stdout:
//   sentierd: <model>: v1 optimized, v2 unchanged, …; latest v2 (architecture changed)
//
// Hidden flags (job child): --job --job_model --job_version --job_source --job_stage
// --job_rules --job_options (the pipeline options as one JSON value: EncodeOptions)
// --job_reuse_report --job_reuse_version. --job_command=PROGRAM runs each job as PROGRAM with those flags instead of
// this binary (a wrapper that sets limits, or injects faults in tests, then execs sentierd; see
// ExecJobLauncher in runtime/daemon/daemon_manager.h).
//
// There are no test hooks in this binary: the end-to-end tests crash or hang a job through
// --job_command=testing/sentierd_fault_job.sh, and slow down publication with the test-only
// build tools/sentierd_publish_delay.cc.
//
// tools/sentierd_main.cc parses and checks the flags, builds ManagerOptions, serves /metrics,
// /healthz and /readyz, forwards signals through a self-pipe and maps the manager's status to the
// exit code; the work is runtime/daemon/daemon_manager.h's.
#include "tools/sentierd_main.h"

int main(int argc, char** argv) { return sentier::SentierdMain(argc, argv); }
