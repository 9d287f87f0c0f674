#!/usr/bin/env bash
# sentierd_hostile_test.sh — the real sentierd on hostile registries: planted wrong rules (every
# affected version rejected by validation, nothing published), random-byte and empty archives,
# sample inputs of the wrong arity or shape, and entry names that are not model names (spaces,
# non-ASCII, control characters), zip-bomb-like and unreadable archives, and a full disk under
# OUT. The daemon must finish its pass (exit 0), publish nothing it could not validate, and
# publish what a full disk held back once space returns.
set -u
RUN="${TEST_SRCDIR:-$PWD/bazel-bin/tools/sentierd_hostile_test.runfiles}/sentier"
source "$RUN/tools/sentierd_test_lib.sh"
T="${TEST_TMPDIR:-$(mktemp -d)}/hostile"
rm -rf "$T"; mkdir -p "$T"

# 1. Planted wrong rule: relu(x) -> x. Every version with a relu must be rejected by validation.
R="$T/reg1"; O="$T/out1"; mkdir -p "$R" "$T/wrong"
cat >"$T/wrong/wrong.rules" <<'RULES'
rule planted_drop_relu
  family vertical
  description a wrong rule: relu(x) is not x
  match
    %y = aten::relu(%x)
  rewrite
    replace %y with %x
end
RULES
put "$R" ranker 1 waste 1
put "$R" towers 1 towers 1
"$D" --once --registry="$R" --output="$O" --rules="$T/wrong" --poll_interval_ms=100 >"$T/log1" 2>&1
rc=$?
[[ $rc == 0 ]] && ok "pass completed with wrong rules" || { fail "exit $rc with wrong rules"; tail -5 "$T/log1"; }
for v in ranker/1 towers/1; do
  s=$(status_of "$O/$v/report.json" 2>/dev/null)
  if [[ "$s" == rejected ]] && grep -q "validation failure" "$O/$v/report.json" && [[ ! -e "$O/$v/model.pt" ]]; then
    ok "$v rejected by validation, nothing published"
  else
    fail "$v: status '$s'"; cat "$O/$v/report.json" 2>/dev/null | head -20
  fi
done

# 1b. Planted gradient-only rules (testdata/planted): every output exact, a weight's or a bias's
# gradient lost. Validation on the CPU compares the gradients of every parameter: rejected.
PLANTED="$RUN/testdata/planted"
for planted in detach_weight halve_bias_gradient stack_detached_weights; do
  R="$T/reg_$planted"; O="$T/out_$planted"; mkdir -p "$R" "$T/rules_$planted"
  cp "$PLANTED/$planted.rules" "$T/rules_$planted/"
  put "$R" towers 1 feature_towers 1   # towers of tanh(linear(...)): every planted rule applies
  "$D" --once --registry="$R" --output="$O" --rules="$T/rules_$planted" --device=cpu \
    --poll_interval_ms=100 >"$T/log_$planted" 2>&1
  s=$(status_of "$O/towers/1/report.json" 2>/dev/null)
  if [[ "$s" == rejected ]] && grep -q "validation failure.*grad of param" "$O/towers/1/report.json" \
      && [[ ! -e "$O/towers/1/model.pt" ]]; then
    ok "$planted: rejected ($(grep -o 'grad of param [^ ]*' "$O/towers/1/report.json" | head -1))"
  else
    fail "$planted: status '$s'"; grep '"reason"' "$O/towers/1/report.json" 2>/dev/null
  fi
done

# 2. Hostile files and names, with the shipped rules.
R="$T/reg2"; O="$T/out2"; mkdir -p "$R"
put "$R" good 1 waste 1
mkdir -p "$R/random/1" "$R/empty/1" "$R/arity/1" "$R/shape/1"
head -c 65536 /dev/urandom >"$R/random/1/model.pt"; cp "$R/good/1/inputs.pt" "$R/random/1/"
: >"$R/empty/1/model.pt"; cp "$R/good/1/inputs.pt" "$R/empty/1/"
"$MAKE" --model=waste --batch=8 --out_model="$R/arity/1/model.pt" --out_inputs="$T/unused.pt"
"$MAKE" --model=unbind_mix --batch=8 --out_model="$T/um.pt" --out_inputs="$R/shape/1/inputs.pt"
cp "$R/arity/1/model.pt" "$R/shape/1/model.pt"
"$MAKE" --model=towers --batch=8 --out_model="$T/tw.pt" --out_inputs="$T/tw_in.pt"
cp "$T/tw_in.pt" "$R/arity/1/inputs.pt"   # towers' inputs have another width than waste's
mkdir -p "$R/my model/1" "$R/modèle/1" "$R/$(printf 'bad\tname')/1" "$R/good/01"
for d in "$R/my model/1" "$R/modèle/1" "$R/$(printf 'bad\tname')/1" "$R/good/01"; do
  cp "$R/good/1/model.pt" "$R/good/1/inputs.pt" "$d/"
done
"$D" --once --registry="$R" --output="$O" --poll_interval_ms=100 >"$T/log2" 2>&1
rc=$?
[[ $rc == 0 ]] && ok "pass completed on a hostile registry" || { fail "exit $rc on a hostile registry"; tail -5 "$T/log2"; }
s=$(status_of "$O/good/1/report.json" 2>/dev/null)
[[ "$s" == optimized || "$s" == unchanged ]] && ok "good/1 $s" || fail "good/1 status '$s'"
for m in random empty arity shape; do
  s=$(status_of "$O/$m/1/report.json" 2>/dev/null)
  if [[ "$s" == rejected && ! -e "$O/$m/1/model.pt" ]]; then
    ok "$m/1 rejected: $(grep -o '"reason": "[^"]*' "$O/$m/1/report.json" | cut -c12-90)"
  else
    fail "$m/1 status '$s'"
  fi
done
for bad in "my model" "modèle" "$(printf 'bad\tname')"; do
  [[ ! -e "$O/$bad" ]] && ok "ignored name '$bad'" || fail "published '$bad'"
done
[[ ! -e "$O/good/01" ]] && ok "ignored version 01" || fail "published version 01"
ls -A "$O" | grep -q '^\.tmp' && fail "temp dir left behind" || ok "no temp dirs"

# 3. Zip-bomb-like archive: the first central directory entry of a real model.pt patched to
# claim 4 GiB uncompressed while storing a few hundred bytes. Refused before LibTorch reads it.
R="$T/reg3"; O="$T/out3"; mkdir -p "$R"
put "$R" good 1 waste 1
mkdir -p "$R/bomb/1"
cp "$R/good/1/model.pt" "$R/good/1/inputs.pt" "$R/bomb/1/"
cd_at=$(grep -obUaP 'PK\x01\x02' "$R/bomb/1/model.pt" | head -1 | cut -d: -f1)
printf '\xf0\xff\xff\xff' | dd of="$R/bomb/1/model.pt" bs=1 seek=$((cd_at + 24)) conv=notrunc status=none
"$D" --once --registry="$R" --output="$O" --poll_interval_ms=100 >"$T/log3" 2>&1
rc=$?
s=$(status_of "$O/bomb/1/report.json" 2>/dev/null)
if [[ $rc == 0 && "$s" == rejected && ! -e "$O/bomb/1/model.pt" ]] &&
   grep -q "claims 4294967280 bytes uncompressed" "$O/bomb/1/report.json"; then
  ok "zip-bomb-like archive rejected: $(grep -o '"reason": "[^"]*' "$O/bomb/1/report.json" | cut -c12-140)"
else
  fail "zip-bomb-like archive: exit $rc, status '$s'"; grep -h reason "$O/bomb/1/report.json" 2>/dev/null
fi
s=$(status_of "$O/good/1/report.json" 2>/dev/null)
[[ "$s" == optimized || "$s" == unchanged ]] && ok "good/1 beside it $s" || fail "good/1 status '$s'"

# 4. Unreadable files: model.pt without read permission is refused with the reason; once made
# readable (chmod, which changes no mtime) the version is taken up again. Root reads anything
# through its DAC capabilities, so as root the daemon runs without them (setpriv).
U="$T/unr"; mkdir -p "$U/reg"
put "$U/reg" locked 1 waste 2
chmod 000 "$U/reg/locked/1/model.pt"
run_as=()
if [[ $(id -u) == 0 ]]; then
  run_as=(setpriv --bounding-set=-dac_override,-dac_read_search --inh-caps=-dac_override,-dac_read_search)
fi
if ! "${run_as[@]}" cat "$U/reg/locked/1/model.pt" >/dev/null 2>&1; then
  "${run_as[@]}" "$D" --once --registry="$U/reg" --output="$U/out" --poll_interval_ms=100 >"$T/log4" 2>&1
  rc=$?
  s=$(status_of "$U/out/locked/1/report.json" 2>/dev/null)
  if [[ $rc == 0 && "$s" == rejected ]] && grep -q "model.pt is not readable (Permission denied)" "$U/out/locked/1/report.json"; then
    ok "unreadable model.pt refused: $(grep -o '"reason": "[^"]*' "$U/out/locked/1/report.json" | cut -c12-100)"
  else
    fail "unreadable model.pt: exit $rc, status '$s'"; tail -5 "$T/log4"
  fi
  chmod 644 "$U/reg/locked/1/model.pt"
  "${run_as[@]}" "$D" --once --registry="$U/reg" --output="$U/out" --poll_interval_ms=100 >"$T/log4b" 2>&1
  s=$(status_of "$U/out/locked/1/report.json" 2>/dev/null)
  [[ "$s" == optimized || "$s" == unchanged ]] && ok "made readable: taken up again, $s" ||
    { fail "after chmod: status '$s'"; tail -5 "$T/log4b"; }
else
  echo "SKIP unreadable files: a mode-000 file stays readable here (root without setpriv?)"
fi

# 5. Disk full on OUT: OUT on a small tmpfs filled to the brim (or, where mounting is not
# allowed, a 16 KiB file-size limit put on the running daemon with prlimit, which its jobs
# inherit). The job's write of a 150 KB model fails: a clear error naming the version, nothing
# published or half-published, nothing recorded, retries backing off; when space returns a later
# try publishes it. SENTIER_TEST_NO_TMPFS=1 forces the file-size variant.
R="$T/reg5"; mkdir -p "$R"
M="$T/small"; mkdir -p "$M"
O="$M/out"
how=fsize
if [[ -z "${SENTIER_TEST_NO_TMPFS:-}" ]] && mount -t tmpfs -o size=4m tmpfs "$M" 2>/dev/null; then
  how=tmpfs
fi
mkdir -p "$O"
"$D" --registry="$R" --output="$O" --poll_interval_ms=200 >"$T/log5" 2>&1 &
dpid=$!
sleep 1
# The file-size limit only once the daemon ignores SIGXFSZ (the first thing it does, but loading
# LibTorch before main can take longer than a second on a loaded machine): bit 24 of SigIgn.
for i in $(seq 1 150); do
  ign=$(awk '/^SigIgn:/ {print $2}' "/proc/$dpid/status" 2>/dev/null)
  [[ -n "$ign" ]] && (( (16#$ign >> 24) & 1 )) && break
  sleep 0.2
done
# ... and once it has its rule set (the snapshot of the rule files it writes under OUT is larger
# than the limit; the limit is for the jobs' writes).
for i in $(seq 1 150); do grep -q "rules: loaded" "$T/log5" && break; sleep 0.2; done
if [[ $how == tmpfs ]]; then
  dd if=/dev/zero of="$M/filler" bs=4k status=none 2>/dev/null  # until the disk is full
  truncate -s -64K "$M/filler"                                     # 64 KiB left: less than model.pt
else
  prlimit --pid $dpid --fsize=16384:unlimited
fi
put "$R" big 1 feature_towers 1
# The write that fails first may be the job's (model.pt) or the daemon's (report.json).
for i in $(seq 1 50); do grep -q "\[big/1\] .*retried in" "$T/log5" && break; sleep 0.2; done
sleep 1
if grep -q "\[big/1\] \(job: cannot write the output\|publish failed\): .*\(No space left on device\|File too large\)" "$T/log5" &&
   grep -q "\[big/1\] .*retried in" "$T/log5"; then
  ok "disk full ($how): clear error naming big/1"
else
  fail "disk full ($how): no error naming big/1"; grep "big/1" "$T/log5" | tail -5
fi
[[ ! -e "$O/big/1" ]] && ok "disk full: nothing published for big/1" || fail "disk full: $O/big/1 exists"
kill -0 $dpid 2>/dev/null && ok "disk full: daemon still running" || fail "disk full: daemon died"
sleep 2
tries=$(grep -c "\[big/1\] .*retried in" "$T/log5")
# Polls every 200 ms, but retries back off (1 s, 2 s, 4 s): a few tries in these 3-4 s, not 15.
(( tries >= 1 && tries <= 4 )) && ok "disk full: $tries tries, backing off" || fail "disk full: $tries tries"
if [[ $how == tmpfs ]]; then rm -f "$M/filler"; else prlimit --pid $dpid --fsize=unlimited; fi
for i in $(seq 1 100); do [[ -e "$O/big/1/report.json" ]] && break; sleep 0.2; done
s=$(status_of "$O/big/1/report.json" 2>/dev/null)
if [[ "$s" == optimized || "$s" == unchanged ]] && [[ -s "$O/big/1/model.pt" ]]; then
  want=$(grep -o '"artifact_sha256": "[0-9a-f]*' "$O/big/1/report.json" | cut -d'"' -f4)
  got=$(sha256sum "$O/big/1/model.pt" | cut -d' ' -f1)
  [[ "$want" == "$got" ]] && ok "space returned: big/1 published $s, artifact intact" ||
    fail "space returned: artifact sha $got, report says $want"
else
  fail "space returned: big/1 status '$s'"; tail -5 "$T/log5"
fi
kill -TERM $dpid; wait $dpid
rc=$?
[[ $rc == 0 ]] && ok "disk full: daemon exits 0 on SIGTERM" || fail "disk full: exit $rc on SIGTERM"
ls -a "$O" | grep -q '^\.tmp' && { fail "disk full: temp dir left behind"; ls -la "$O"; } || ok "disk full: no temp dirs left"
[[ $how == tmpfs ]] && umount "$M"

echo "hostile registry: $passes passed, $fails failed"
(( fails == 0 ))
