#!/usr/bin/env bash
# sentierd_replicas_test.sh — sentierd replicas as they are deployed: N daemons with --shard=i/N
# over one registry and one shared output directory (a shared volume). Three replicas publish
# every version exactly once; a replica killed with -9 while its job runs, then restarted, loses
# nothing and publishes nothing twice; three replicas stopped and replaced by four while versions
# keep arriving still process every version exactly once, and so do four replicas replaced by two
# that start before the four stop (a rolling update: a model's old and new owners overlap). Every wait is a poll with a deadline;
# every daemon is killed at the end (trap).
set -u
RUN="${TEST_SRCDIR:-$PWD/bazel-bin/tools/sentierd_replicas_test.runfiles}/sentier"
source "$RUN/tools/sentierd_test_lib.sh"
T="${TEST_TMPDIR:-$(mktemp -d)}/replicas"
rm -rf "$T"; mkdir -p "$T"
R="$T/reg"; O="$T/out"; RULES="$T/rules"; GATE="$T/gate"
mkdir -p "$R" "$RULES" "$T/src1" "$T/src2"
cp "$RUN"/patterns/*.rules "$RULES"/

declare -A PID  # "i/n" -> the pid of the replica running with --shard=i/n
ALL=()          # every process started, killed at exit
cleanup() { local p; for p in "${ALL[@]}"; do kill -9 "$p" 2>/dev/null; done; }
trap cleanup EXIT

# start I N: a replica with --shard=I/N; its log is $T/r<I>of<N>.<k>.log (k: start count). The
# fault job makes the jobs of model "slow" wait for $GATE.
starts=0
start() {
  starts=$((starts + 1))
  FAULT_JOB_SENTIERD="$D" FAULT_JOB_GATE_MODEL=slow FAULT_JOB_GATE="$GATE" "$D" --registry="$R" \
    --output="$O" --rules="$RULES" --shard="$1/$2" --poll_interval_ms=100 --workers=2 \
    --mode=inference --job_command="$RUN/testing/sentierd_fault_job.sh" >"$T/r$1of$2.$starts.log" 2>&1 &
  PID["$1/$2"]=$!
  ALL+=($!)
}
# add MODEL VERSION SRC: staged then renamed into the registry, as registry writers do.
add() { mkdir -p "$R/$1/tmp-$2"; cp "$3"/*.pt "$R/$1/tmp-$2/"; mv "$R/$1/tmp-$2" "$R/$1/$2"; }
versions() { local d; for d in "$R"/*/[0-9]*; do echo "${d#$R/}"; done; }
# count WHAT KEY: lines "[KEY] WHAT" over every replica's log ("job started", "published").
count() { cat "$T"/r*.log | grep -cF "[$2] $1"; }
# wait_published SECONDS: until every version in the registry has a report.
wait_published() {
  local i v missing
  for ((i = 0; i < $1 * 10; i++)); do
    missing=0
    for v in $(versions); do [[ -e "$O/$v/report.json" ]] || { missing=1; break; }; done
    (( missing )) || return 0
    sleep 0.1
  done
  return 1
}
# wait_grep PATTERN FILE SECONDS
wait_grep() { local i; for ((i = 0; i < $3 * 10; i++)); do grep -qF "$1" "$2" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
# once_each [KEY...]: every version in the registry published exactly once and started by exactly
# one job, except the KEYs, whose first job was killed with its replica (started twice).
once_each() {
  local v p s bad=0 twice=" $* "
  for v in $(versions); do
    p=$(count published "$v"); s=$(count "job started" "$v")
    [[ "$twice" == *" $v "* ]] && s=$((s - 1))
    if [[ $p != 1 || $s != 1 ]]; then fail "$v published $p time(s), started $s time(s)"; bad=1; fi
  done
  return $bad
}
no_leftovers() {
  local tmp claims
  tmp=$(ls -a "$O" | grep -c '^\.tmp-')
  claims=$(find "$O/.sentierd/claims" -name '*.lock' 2>/dev/null | wc -l)
  [[ $tmp == 0 && $claims == 0 ]] && ok "$1: no staging dirs, no claims left" ||
    { fail "$1: $tmp staging dir(s), $claims claim(s) left"; ls -a "$O"; }
}

"$MAKE" --model=waste --seed=1 --batch=8 --out_model="$T/src1/model.pt" --out_inputs="$T/src1/inputs.pt" || exit 1
"$MAKE" --model=towers --seed=2 --batch=8 --out_model="$T/src2/model.pt" --out_inputs="$T/src2/inputs.pt" || exit 1
MODELS=(m01 m02 m03 m04 m05 m06 m07 m08 m09 m10 m11 m12)
for m in "${MODELS[@]}"; do add "$m" 1 "$T/src1"; add "$m" 2 "$T/src2"; done
add slow 1 "$T/src1"

# 1. Three replicas over one registry (12 models x 2 versions, and slow/1, whose job waits) and
#    one output.
for i in 0 1 2; do start $i 3; done
ok_all=1
for ((k = 0; k < 3000; k++)); do
  ok_all=1
  for m in "${MODELS[@]}"; do for v in 1 2; do [[ -e "$O/$m/$v/report.json" ]] || ok_all=0; done; done
  (( ok_all )) && break
  sleep 0.1
done
if (( ok_all )); then ok "3 replicas: 24 versions published"; else fail "3 replicas: versions missing"; tail -5 "$T"/r*.log; fi
bad=0
for m in "${MODELS[@]}"; do for v in 1 2; do
  p=$(count published "$m/$v"); s=$(count "job started" "$m/$v")
  [[ $p == 1 && $s == 1 ]] || { fail "$m/$v published $p time(s), started $s time(s)"; bad=1; }
done; done
(( bad )) || ok "3 replicas: each version started by one replica, published once"
n=$(grep -l "job started" "$T"/r*of3.*.log | wc -l)
[[ $n == 3 ]] && ok "3 replicas: all three ran jobs" || fail "only $n replica(s) ran jobs"
"$RUN/tools/check_report" --schema="$RUN/runtime/report_schema.json" "$O"/m*/*/report.json >/dev/null &&
  ok "reports follow the schema" || fail "reports do not follow the schema"
# Two daemons of one shard exclude each other; so do a replica and a daemon without --shard.
"$D" --registry="$R" --output="$O" --rules="$RULES" --shard=1/3 --once >"$T/second.txt" 2>&1
[[ $? == 3 ]] && grep -q 'with --shard=1/3' "$T/second.txt" && ok "second replica of shard 1/3 -> 3" ||
  { fail "second replica of a shard"; cat "$T/second.txt"; }
"$D" --registry="$R" --output="$O" --rules="$RULES" --once >"$T/alone.txt" 2>&1
[[ $? == 3 ]] && ok "daemon without --shard beside replicas -> 3" || { fail "daemon without --shard"; cat "$T/alone.txt"; }

# 2. The replica running slow/1 killed with -9 mid-job, then restarted.
for ((k = 0; k < 600; k++)); do grep -qF "[slow/1] job started" "$T"/r*of3.*.log && break; sleep 0.1; done
victim_log=$(grep -lF "[slow/1] job started" "$T"/r*of3.*.log | head -1)
victim=$(basename "$victim_log" | sed 's/^r\([0-9]*\)of3\..*/\1/')
if [[ -z "$victim_log" ]]; then
  fail "slow/1 never started"
else
  stage=$(ls -a "$O" | grep '^\.tmp-slow-1-' | head -1)
  [[ -n "$stage" ]] && ok "slow/1 running on replica $victim/3 (staging $stage)" || fail "slow/1 has no staging dir"
  kill -9 "${PID[$victim/3]}"; wait "${PID[$victim/3]}" 2>/dev/null
  [[ ! -e "$O/slow/1" ]] && ok "kill -9 mid-job: nothing published, no partial artifact" || fail "slow/1 visible after the kill"
  start "$victim" 3
  newlog="$T/r${victim}of3.$starts.log"
  if wait_grep "[slow/1] job started" "$newlog" 60; then
    ok "restarted replica claimed slow/1 again"
    [[ -z "$stage" || ! -e "$O/$stage" ]] && ok "the killed job's staging dir removed" || fail "$stage left"
  else
    fail "restarted replica did not take slow/1"; tail -20 "$newlog"
  fi
  touch "$GATE"
  if wait_grep "[slow/1] published" "$newlog" 120 && [[ -f "$O/slow/1/report.json" ]]; then
    s=$(status_of "$O/slow/1/report.json")
    sha=$(sha256sum "$O/slow/1/model.pt" 2>/dev/null | cut -d' ' -f1)
    [[ "$s" != rejected ]] && grep -q "\"artifact_sha256\": \"$sha\"" "$O/slow/1/report.json" &&
      ok "slow/1 published $s after the restart, complete" || { fail "slow/1: $s"; cat "$O/slow/1/report.json"; }
  else
    fail "slow/1 not published after the restart"; tail -20 "$newlog"
  fi
  once_each slow/1 && ok "after kill -9 and restart: every version published once"
  no_leftovers "after kill -9 and restart"
fi

# 3. Resize 3 -> 4 while versions keep arriving: v3 of every model and four new models, then v4
#    of half the models, one every 0.2 s.
(
  for m in "${MODELS[@]}" n1 n2 n3 n4; do
    [[ $m == n* ]] && add "$m" 1 "$T/src1" || add "$m" 3 "$T/src1"; sleep 0.2
  done
  for m in "${MODELS[@]:0:6}"; do add "$m" 4 "$T/src2"; sleep 0.2; done
) &
WRITER=$!
ALL+=($WRITER)
for ((k = 0; k < 300; k++)); do [[ -d "$R/m04/3" ]] && break; sleep 0.1; done
for i in 0 1 2; do kill -TERM "${PID[$i/3]}"; done
rcs=""
for i in 0 1 2; do wait "${PID[$i/3]}"; rcs="$rcs$?"; done
[[ $rcs == 000 ]] && ok "3 replicas stopped with SIGTERM -> 0" || fail "SIGTERM exit codes $rcs"
for i in 0 1 2 3; do start $i 4; done
wait $WRITER
if wait_published 300; then ok "4 replicas: every version published ($(versions | wc -l))"; else
  fail "4 replicas: versions missing"; tail -5 "$T"/r*of4.*.log; fi
once_each slow/1 && ok "after the resize: every version published once, started once"
moved=0
for m in "${MODELS[@]}"; do
  before=$(grep -lF "[$m/1] published" "$T"/r*.log | sed 's/.*\/r\([0-9]*\)of3\..*/\1/')
  after=$(grep -lF "[$m/3] published" "$T"/r*.log | sed 's/.*\/r\([0-9]*\)of4\..*/\1/')
  [[ -n "$before" && -n "$after" && "$before" != "$after" ]] && moved=$((moved + 1))
done
(( moved > 0 )) && ok "$moved model(s) changed owner, taken over without redoing their published versions" ||
  fail "no model changed owner"
n=$(cat "$T"/r*of4.*.log | grep -c "state: adopted the published report")
(( n > 0 )) && ok "new owners adopted $n published version(s)" || fail "nothing adopted"
no_leftovers "after the resize"

# 4. A rolling resize 4 -> 2: the new replicas start while the old ones still run, so a model's
#    old and new owners both plan its new versions; the version's claim lets one of them run it,
#    the other adopts its report.
for i in 0 1; do start $i 2; done
(
  for m in "${MODELS[@]}"; do add "$m" 5 "$T/src2"; sleep 0.1; done
  for m in n1 n2 n3 n4; do add "$m" 2 "$T/src2"; sleep 0.1; done
) &
WRITER=$!
ALL+=($WRITER)
wait $WRITER
wait_published 300 && ok "old and new replicas together: every version published" ||
  { fail "rolling resize: versions missing"; tail -5 "$T"/r*of2.*.log; }
rcs=""
for i in 0 1 2 3; do kill -TERM "${PID[$i/4]}"; done
for i in 0 1 2 3; do wait "${PID[$i/4]}"; rcs="$rcs$?"; done
[[ $rcs == 0000 ]] && ok "4 replicas stopped with SIGTERM -> 0" || fail "SIGTERM exit codes $rcs"
once_each slow/1 && ok "after the rolling resize: every version published once, started once"
echo "rolling resize: $(cat "$T"/r*.log | grep -c 'claimed by another replica') version(s) left to" \
  "the replica holding their claim, $(cat "$T"/r*.log | grep -c 'already published by another replica')" \
  "adopted after their claim was released"
no_leftovers "after the rolling resize"
rcs=""
for i in 0 1; do kill -TERM "${PID[$i/2]}"; done
for i in 0 1; do wait "${PID[$i/2]}"; rcs="$rcs$?"; done
[[ $rcs == 00 ]] && ok "2 replicas stopped with SIGTERM -> 0" || fail "SIGTERM exit codes $rcs"

echo "sentierd_replicas_test: $passes passed, $fails failure(s)"
[[ $fails == 0 ]]
