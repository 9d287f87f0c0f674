#!/usr/bin/env bash
# sentierd_e2e_test.sh — the real sentierd binary on a temp registry built with
# make_example_model: publication, settling, rejections, rule reloads, the lock, SIGTERM, and
# kill -9 during publishing followed by a restart.
set -u
RUN="${TEST_SRCDIR:-$PWD/bazel-bin/tools/sentierd_e2e_test.runfiles}/sentier"
source "$RUN/tools/sentierd_test_lib.sh"
T="${TEST_TMPDIR:-$(mktemp -d)}/e2e"
rm -rf "$T"; mkdir -p "$T"

# wait_for FILE [SECONDS]
wait_for() { local i; for ((i = 0; i < ${2:-60} * 10; i++)); do [[ -e "$1" ]] && return 0; sleep 0.1; done; return 1; }
fp_of() { grep -o '"rules_fingerprint": "[0-9a-f]*"' "$1" | cut -d'"' -f4; }

R="$T/reg"; O="$T/out"; RULES="$T/rules"; LOG="$T/daemon.log"
mkdir -p "$R" "$RULES"
cp "$RUN"/patterns/*.rules "$RULES"/
put "$R" ranker 1 waste 1
put "$R" towers 1 towers 1
put "$R" towers 2 feature_towers 1
mkdir -p "$T/src"; "$MAKE" --model=waste --seed=3 --batch=8 --out_model="$T/src/model.pt" --out_inputs="$T/src/inputs.pt"

# Bad flags: 2; unreadable registry: 4.
"$D" --registry="$R" --output="$O" --shard=3/2 >"$T/f.txt" 2>&1; [[ $? == 2 ]] && ok "bad shard -> 2" || fail "bad shard"
"$D" --registry="$R" --output="$O" --device=cuda >"$T/f.txt" 2>&1; [[ $? == 2 ]] && grep -q CUDA "$T/f.txt" && ok "cuda on cpu build -> 2" || fail "cuda"
"$D" --registry="$R" --output="$O" --mode=bogus >"$T/f.txt" 2>&1; [[ $? == 2 ]] && ok "bad mode -> 2" || fail "bad mode"
"$D" --registry="$R" --output="$O" --bogus_flag >"$T/f.txt" 2>&1; [[ $? == 2 ]] && ok "unknown flag -> 2" || fail "unknown flag"
"$D" --registry="$R" --output="$O" --select_rules=maybe >"$T/f.txt" 2>&1; [[ $? == 2 ]] && grep -q "select_rules" "$T/f.txt" && ok "bad --select_rules -> 2" || fail "bad select_rules"
"$D" --registry="$R" --output="$O" --gate=maybe >"$T/f.txt" 2>&1; [[ $? == 2 ]] && grep -q -- "--gate must be auto, on or off" "$T/f.txt" && ok "bad --gate -> 2" || fail "bad gate"
"$D" --registry="$R" --output="$O" --timing=fuser >"$T/f.txt" 2>&1; [[ $? == 2 ]] && grep -q "must be auto, interpreter or executor" "$T/f.txt" && ok "bad --timing -> 2" || fail "bad timing"
"$D" --registry="$R" --output="$O" --executor_stall_s=-1 >"$T/f.txt" 2>&1; [[ $? == 2 ]] && grep -q "executor_stall_s must be >= 0" "$T/f.txt" && ok "bad --executor_stall_s -> 2" || fail "bad executor_stall_s"
mkdir -p "$T/reg_timing"
"$D" --registry="$T/reg_timing" --output="$T/out_timing" --timing=executor --once >"$T/f.txt" 2>&1
rc=$?
if grep -q "needs LibTorch 2.x" "$T/f.txt"; then
  [[ $rc == 2 ]] && ok "--timing=executor refused on LibTorch 1.x -> 2" || fail "--timing=executor on 1.x: exit $rc"
else
  [[ $rc == 0 ]] && ok "--timing=executor accepted (LibTorch 2.x)" || { fail "--timing=executor: exit $rc"; tail -3 "$T/f.txt"; }
fi
"$D" --registry="$T/nope" --output="$T/out-x" --once >"$T/f.txt" 2>&1; [[ $? == 4 ]] && ok "unreadable registry -> 4" || { fail "unreadable registry"; cat "$T/f.txt"; }

PORT=$((20000 + RANDOM % 20000))
FAULT_JOB_SENTIERD="$D" FAULT_JOB_CRASH_MODEL=crash-me "$D" --registry="$R" --output="$O" --rules="$RULES" \
  --job_command="$RUN/testing/sentierd_fault_job.sh" --poll_interval_ms=200 --metrics_port=$PORT >"$LOG" 2>&1 &
PID=$!

# 1. Versions present at start are published; architecture change recorded.
if wait_for "$O/towers/2/report.json" 120 && wait_for "$O/ranker/1/report.json" 5; then
  s=$(status_of "$O/ranker/1/report.json")
  [[ "$s" == optimized || "$s" == unchanged ]] && ok "ranker/1 $s" || fail "ranker/1 status $s"
  sha=$(sha256sum "$O/ranker/1/model.pt" | cut -d' ' -f1)
  grep -q "\"artifact_sha256\": \"$sha\"" "$O/ranker/1/report.json" && ok "sha256 matches" || fail "sha256"
  grep -q '"architecture_changed": true' "$O/towers/2/report.json" && ok "towers/2 architecture changed" || fail "arch change"
  for k in source_sha256 architecture_fingerprint rules_fingerprint rule_counts nodes_before nodes_after aten_ops_per_forward_before aten_ops_per_forward_after validation timings_ms; do
    grep -q "\"$k\"" "$O/ranker/1/report.json" || fail "report lacks $k"
  done
  # Every report follows runtime/report_schema.json, the schema sentier_opt --report follows.
  if "$RUN/tools/check_report" --schema="$RUN/runtime/report_schema.json" "$O"/*/*/report.json; then
    ok "reports follow the schema"
  else
    fail "reports do not follow runtime/report_schema.json"
  fi
else
  fail "initial versions not published"; cat "$LOG"
fi

# 2. Half-written version: not taken while it grows, taken once complete.
mkdir -p "$R/ranker/2"
size=$(stat -c %s "$T/src/model.pt")
for n in 1 2 3 4 5 6 7 8 9 10 11 12; do head -c $((size * n / 13)) "$T/src/model.pt" >"$R/ranker/2/model.pt"; sleep 0.1; done
[[ -e "$O/ranker/2" ]] && fail "half-written version taken" || ok "half-written version not taken"
cp "$T/src/model.pt" "$R/ranker/2/model.pt"; cp "$T/src/inputs.pt" "$R/ranker/2/inputs.pt"
if wait_for "$O/ranker/2/report.json" 60; then
  s=$(status_of "$O/ranker/2/report.json"); [[ "$s" != rejected ]] && ok "completed version $s" || { fail "completed version rejected"; cat "$O/ranker/2/report.json"; }
else fail "ranker/2 not published"; fi

# 3. Corrupt, truncated, missing inputs, crash: rejected with a reason, daemon alive.
mkdir -p "$R/tmp-stage/bad/1"; head -c 4096 /dev/urandom >"$R/tmp-stage/bad/1/model.pt"; cp "$T/src/inputs.pt" "$R/tmp-stage/bad/1/"; mv "$R/tmp-stage/bad" "$R/bad"
mkdir -p "$R/trunc/tmp-1"; head -c 300 "$T/src/model.pt" >"$R/trunc/tmp-1/model.pt"; cp "$T/src/inputs.pt" "$R/trunc/tmp-1/"; mv "$R/trunc/tmp-1" "$R/trunc/1"
mkdir -p "$R/noinputs/tmp-1"; cp "$T/src/model.pt" "$R/noinputs/tmp-1/"; mv "$R/noinputs/tmp-1" "$R/noinputs/1"
mkdir -p "$R/crash-me/tmp-1"; cp "$T/src/"*.pt "$R/crash-me/tmp-1/"; mv "$R/crash-me/tmp-1" "$R/crash-me/1"
for m in bad trunc noinputs crash-me; do
  if wait_for "$O/$m/1/report.json" 60; then
    s=$(status_of "$O/$m/1/report.json")
    [[ "$s" == rejected && ! -e "$O/$m/1/model.pt" ]] && ok "$m rejected: $(grep -o '"reason": "[^"]*"' "$O/$m/1/report.json")" || fail "$m: $s"
  else fail "$m not reported"; fi
done
grep -q 'inputs.pt' "$O/noinputs/1/report.json" || fail "noinputs reason does not name inputs.pt"
grep -q 'crashed' "$O/crash-me/1/report.json" || fail "crash reason"
kill -0 $PID 2>/dev/null && ok "daemon alive after rejections" || fail "daemon died"

# 4. Metrics and health, on --metrics_address (127.0.0.1 by default) only.
if command -v curl >/dev/null; then
  curl -sf "http://127.0.0.1:$PORT/healthz" | grep -q ok && ok "/healthz" || fail "/healthz"
  code=$(curl -s -o "$T/readyz.txt" -w '%{http_code}' "http://127.0.0.1:$PORT/readyz")
  [[ $code == 200 ]] && grep -q ready "$T/readyz.txt" && ok "/readyz 200 (rules loaded, polled)" || { fail "/readyz $code"; cat "$T/readyz.txt"; }
  curl -sf "http://127.0.0.1:$PORT/metrics" >"$T/metrics.txt"
  grep -q '^sentierd_versions_total{status="rejected"} 4' "$T/metrics.txt" && grep -q '# TYPE sentierd_queue_depth gauge' "$T/metrics.txt" && ok "/metrics" || { fail "/metrics"; cat "$T/metrics.txt"; }
  grep -q '^sentierd_job_duration_seconds_count [0-9]' "$T/metrics.txt" && grep -q '# TYPE sentierd_job_duration_seconds histogram' "$T/metrics.txt" && ok "job duration histogram" || fail "job duration histogram"
  # The last successful poll: whole seconds, within 120 s of now.
  ts=$(grep '^sentierd_last_successful_poll_timestamp_seconds ' "$T/metrics.txt" | cut -d' ' -f2)
  [[ "$ts" =~ ^[0-9]+$ ]] && (( ts > $(date +%s) - 120 && ts <= $(date +%s) + 1 )) \
    && ok "poll timestamp $ts" || fail "poll timestamp '$ts' is not a recent integer Unix time"
fi
if command -v ss >/dev/null; then
  listening=$(ss -Hltnp | grep "pid=$PID," | awk '{print $4}' | sort -u | tr '\n' ' ')
  [[ "$listening" == "127.0.0.1:$PORT " ]] && ok "listens on 127.0.0.1:$PORT only" || fail "listening sockets: '$listening'"
else
  echo "skip: no ss (iproute2): the listening sockets are not checked"
fi
# A taken port or an address that cannot be bound: exit 5 at start, with the address named.
timeout 60 "$D" --registry="$R" --output="$T/out-port" --rules="$RULES" --metrics_port=$PORT >"$T/f.txt" 2>&1; rc=$?
[[ $rc == 5 ]] && grep -q "cannot serve metrics on 127.0.0.1:$PORT: Address already in use" "$T/f.txt" && ok "taken port -> 5" || { fail "taken port: exit $rc"; cat "$T/f.txt"; }
timeout 60 "$D" --registry="$R" --output="$T/out-port" --rules="$RULES" --metrics_port=$PORT --metrics_address=192.0.2.1 >"$T/f.txt" 2>&1; rc=$?
[[ $rc == 5 ]] && grep -q "cannot serve metrics on 192.0.2.1:$PORT: Cannot assign requested address" "$T/f.txt" && ok "bad --metrics_address -> 5" || { fail "bad address: exit $rc"; cat "$T/f.txt"; }
[[ -e "$T/out-port/LOCK" ]] && fail "output touched before the metrics failure" || ok "nothing written before the metrics failure"

# 5. Rule file edited: latest versions re-processed, earlier ones not.
fp1=$(fp_of "$O/ranker/2/report.json"); fp_old_v1=$(fp_of "$O/ranker/1/report.json")
awk '/^rule /{n++} n==1{print} /^end/{if(n==1) exit}' "$RULES/vertical.rules" | sed '1s/^rule \([a-z0-9_]*\)/rule \1_e2e_copy/' >>"$RULES/vertical.rules"
reprocessed=0
for ((i = 0; i < 600; i++)); do
  f2=$(fp_of "$O/ranker/2/report.json"); f3=$(fp_of "$O/towers/2/report.json")
  [[ -n "$f2" && "$f2" != "$fp1" && "$f3" == "$f2" ]] && { reprocessed=1; break; }
  sleep 0.1
done
(( reprocessed )) && ok "rule edit: latest versions re-processed" || { fail "rule edit not picked up"; tail -20 "$LOG"; }
[[ "$(fp_of "$O/ranker/1/report.json")" == "$fp_old_v1" ]] && ok "earlier version not re-processed" || fail "ranker/1 re-processed"
fp2=$(fp_of "$O/ranker/2/report.json")

# 6. Broken rule file: logged with file:line, previous rules kept.
printf 'rule broken\n  family vertical\n  match\n    %%y = aten::nope(\n' >"$RULES/zz_broken.rules"
sleep 1
grep -q 'zz_broken.rules:[0-9]*' "$LOG" && ok "broken rule file logged" || fail "broken rule not logged"
put "$R" ranker 3 waste 4
if wait_for "$O/ranker/3/report.json" 60; then
  [[ "$(fp_of "$O/ranker/3/report.json")" == "$fp2" ]] && ok "previous rules kept" || fail "rules fp changed"
else fail "ranker/3 not published"; fi
kill -0 $PID 2>/dev/null || fail "daemon died on broken rules"

# 7. Second daemon on the same output: exit 3.
"$D" --registry="$R" --output="$O" --rules="$RULES" --once >"$T/second.txt" 2>&1
[[ $? == 3 ]] && grep -q 'locked by another sentierd' "$T/second.txt" && ok "second daemon -> 3" || { fail "second daemon"; cat "$T/second.txt"; }
# ... also with its endpoints up when the lock is found: they close, the exit is 3.
timeout 60 "$D" --registry="$R" --output="$O" --rules="$RULES" --once --metrics_port=$((PORT + 1)) >"$T/second.txt" 2>&1
[[ $? == 3 ]] && ok "second daemon with --metrics_port -> 3" || { fail "second daemon with --metrics_port"; cat "$T/second.txt"; }

# 8. SIGTERM: exit 0, no temp dirs.
put "$R" towers 3 towers 5
sleep 0.5
kill -TERM $PID; wait $PID; rc=$?
[[ $rc == 0 ]] && ok "SIGTERM -> 0" || fail "SIGTERM exit $rc"
ls -a "$O" | grep -q '^\.tmp-' && fail "temp dirs left after SIGTERM" || ok "no temp dirs after SIGTERM"
grep -q 'published' "$LOG" && grep -q '\[ranker/1\]' "$LOG" || fail "log lines lack model/version"

# 9. kill -9 during publishing, 20 times at varied points, then a restart finishes the work.
rm -f "$RULES/zz_broken.rules"  # at start-up a broken rule set is bad flags (exit 2)
R2="$T/reg2"; O2="$T/out2"; mkdir -p "$R2"
for m in a b c d; do for v in 1 2; do mkdir -p "$R2/$m/$v"; cp "$T/src/"*.pt "$R2/$m/$v/"; done; done
for ((k = 0; k < 20; k++)); do
  "$RUN/tools/sentierd_publish_delay" --publish_delay_ms=$((k % 4 * 50)) --registry="$R2" --output="$O2" \
    --rules="$RULES" --poll_interval_ms=50 --workers=2 >>"$T/kill.log" 2>&1 &
  p=$!
  sleep "0.$((RANDOM % 9 + 1))$((RANDOM % 10))"
  kill -9 $p; wait $p 2>/dev/null
done
"$D" --registry="$R2" --output="$O2" --rules="$RULES" --poll_interval_ms=50 --once >"$T/final.txt" 2>>"$T/kill.log"
rc=$?
[[ $rc == 0 ]] && ok "--once after kills -> 0" || fail "--once exit $rc"
good=0
for m in a b c d; do for v in 1 2; do
  rep="$O2/$m/$v/report.json"
  if [[ -f "$rep" && -f "$O2/$m/$v/model.pt" ]]; then
    sha=$(sha256sum "$O2/$m/$v/model.pt" | cut -d' ' -f1)
    grep -q "\"artifact_sha256\": \"$sha\"" "$rep" && good=$((good + 1)) || fail "$m/$v sha mismatch"
  else fail "$m/$v missing or partial"; fi
done; done
[[ $good == 8 ]] && ok "all 8 versions published once, complete" || fail "$good/8 complete"
ls -a "$O2" | grep -q '^\.tmp-' && fail "temp dirs left" || ok "no temp dirs"
n=$(grep -c '^sentierd: [a-d]: v1 [a-z]*, v2 [a-z]*; latest v2' "$T/final.txt")
[[ $n == 4 ]] && ok "per-model summary" || { fail "summary"; cat "$T/final.txt"; }
# A further --once run redoes nothing.
"$D" --registry="$R2" --output="$O2" --rules="$RULES" --poll_interval_ms=50 --once >/dev/null 2>"$T/again.log"
grep -q 'job started' "$T/again.log" && fail "restart redid finished work" || ok "restart redoes nothing"

# Rule selection (on with CUDA; forced on here, timed on the CPU): the report carries the
# selection's measurements, and the artifact is what the selected rules produce, or the
# original when no set was faster.
R3="$T/reg3"; O3="$T/out3"; mkdir -p "$R3"
put "$R3" sel 1 waste 1
"$D" --registry="$R3" --output="$O3" --rules="$RULES" --poll_interval_ms=50 --once --select_rules=on >"$T/sel.txt" 2>&1
rep="$O3/sel/1/report.json"
if [[ -f "$rep" ]]; then
  for k in '"selection"' '"dropped_rules"' '"original_peak_bytes"' '"within_memory"' '"select"'; do
    grep -q "$k" "$rep" || fail "selection report lacks $k"
  done
  s=$(status_of "$rep")
  if [[ "$s" == optimized ]]; then
    grep -q '"faster": true' "$rep" && ok "selection: optimized with the rules that pay" || fail "optimized without a faster selection"
  elif [[ "$s" == unchanged ]]; then
    grep -q "No set of rules made the model faster" "$rep" && cmp -s "$R3/sel/1/model.pt" "$O3/sel/1/model.pt" &&
      ok "selection: nothing paid, the original published" || { fail "unchanged without the selection's reason"; cat "$rep"; }
  else fail "selection: status $s"; cat "$rep"; fi
else fail "selection: sel/1 not published"; cat "$T/sel.txt"; fi

echo "sentierd_e2e_test: $fails failure(s)"
[[ $fails == 0 ]]
