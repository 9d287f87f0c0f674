#!/usr/bin/env bash
# deploy_test.sh — checks deploy/ against the built sentierd:
#  1. the systemd unit verifies (`systemd-analyze verify` on a copy whose ExecStart is the built
#     sentierd), its SIGTERM grace matches --shutdown_grace_s, and its exposure
#     (`systemd-analyze security --offline`) stays at or below 2.5;
#  2. the Kubernetes manifests parse and carry what check_manifests.py asks, every flag they pass
#     exists in `sentierd --help`; broken copies (shard count != replicas, a flag sentierd lacks,
#     a writable registry) are caught;
#  3. the Prometheus alert rules pass `promtool check rules` and `promtool test rules`;
#  4. --shard=auto: replicas on hosts named sentierd-0..2 split a registry between them, each
#     model once, and one beyond --shard_count exits 2.
# A part whose tool is missing (systemd-analyze, promtool, python3's yaml) is skipped with a
# message; tools/setup_deps.sh installs them.
set -uo pipefail
RUNFILES="${TEST_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)/bazel-bin/deploy/deploy_test.runfiles}/sentier"
[[ -d "$RUNFILES" ]] || RUNFILES="$(cd "$(dirname "$0")/.." && pwd)"
SENTIERD="$RUNFILES/tools/sentierd"
DEPLOY="$RUNFILES/deploy"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "ok: $*"; }
[[ -x "$SENTIERD" ]] || { echo "FAIL: $SENTIERD not built"; exit 1; }

# ---- 1. systemd unit
UNIT="$DEPLOY/systemd/sentierd.service"
if command -v systemd-analyze >/dev/null; then
  mkdir -p "$TMP/unit"
  sed "s#^ExecStart=/usr/local/bin/sentierd#ExecStart=$(readlink -f "$SENTIERD")#" "$UNIT" \
    > "$TMP/unit/sentierd.service"
  grep -q "^ExecStart=$(readlink -f "$SENTIERD")" "$TMP/unit/sentierd.service" \
    || fail "unit: ExecStart=/usr/local/bin/sentierd not found to substitute"
  # verify warns (unknown keys, bad values) on stderr with status 0: any output fails.
  if out=$(systemd-analyze verify "$TMP/unit/sentierd.service" 2>&1) && [[ -z "$out" ]]; then
    pass "unit: systemd-analyze verify"
  else
    fail "unit: systemd-analyze verify: $out"
  fi
  # The check must catch a broken unit: a misspelt key.
  sed 's/^ProtectHome=yes/ProtectHome=yess/' "$TMP/unit/sentierd.service" > "$TMP/unit/broken.service"
  out=$(systemd-analyze verify "$TMP/unit/broken.service" 2>&1)
  [[ "$out" == *"yess"* ]] && pass "unit: a broken copy is reported" \
    || fail "unit: a broken copy passed verify: $out"
  if systemd-analyze security --offline=yes --threshold=25 "$TMP/unit/sentierd.service" \
       > "$TMP/unit/security.txt" 2>&1; then
    pass "unit: $(grep -o 'Overall exposure level.*' "$TMP/unit/security.txt")"
  else
    fail "unit: exposure above 2.5: $(tail -3 "$TMP/unit/security.txt")"
  fi
  for want in "User=sentierd" "ProtectSystem=strict" "NoNewPrivileges=yes" "PrivateTmp=yes" \
              "ProtectHome=yes" "Restart=on-failure" "KillSignal=SIGTERM" "KillMode=mixed" \
              "ReadOnlyPaths=-/srv/sentier/registry" "ReadWritePaths=/var/lib/sentierd" \
              "RestartPreventExitStatus=2 3"; do
    grep -qxF "$want" "$UNIT" || fail "unit: no line '$want'"
  done
  grace=$(grep -o -- '--shutdown_grace_s=[0-9]*' "$UNIT" | cut -d= -f2)
  stop=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)$/\1/p' "$UNIT")
  if [[ -n "$grace" && -n "$stop" ]] && (( stop >= grace + 5 && stop <= grace + 60 )); then
    pass "unit: TimeoutStopSec=$stop covers --shutdown_grace_s=$grace plus a margin"
  else
    fail "unit: TimeoutStopSec='$stop' must be --shutdown_grace_s='$grace' + 5..60 s"
  fi
  # Every flag the unit passes is one sentierd knows.
  # Every flag ExecStart passes (the line and its continuations) is one sentierd knows.
  "$SENTIERD" --help > "$TMP/unit/help.txt" 2>&1
  flags=$(sed -n '/^ExecStart=/,/[^\\]$/p' "$UNIT" | grep -o -- '--[a-z_0-9]*' | sort -u)
  [[ -n "$flags" ]] || fail "unit: no flags found in ExecStart"
  for f in $flags; do
    grep -qE "^\s+-${f#--} \(" "$TMP/unit/help.txt" || fail "unit: sentierd has no flag $f"
  done
else
  echo "SKIP: systemd-analyze is not installed (apt-get install systemd): the unit is not verified"
fi

# ---- 2. Kubernetes manifests
if python3 -c 'import yaml' 2>/dev/null; then
  "$SENTIERD" --help > "$TMP/help.txt" 2>&1
  if python3 "$DEPLOY/check_manifests.py" "$DEPLOY/k8s" "$TMP/help.txt"; then
    pass "manifests"
  else
    fail "manifests (above)"
  fi
  # Broken copies must fail, each for its own reason.
  broken() {  # broken NAME SED_EXPR EXPECTED_MESSAGE
    rm -rf "$TMP/k8s-$1" && cp -rL "$DEPLOY/k8s" "$TMP/k8s-$1" && chmod -R u+w "$TMP/k8s-$1"
    sed -i "$2" "$TMP/k8s-$1/statefulset.yaml"
    out=$(python3 "$DEPLOY/check_manifests.py" "$TMP/k8s-$1" "$TMP/help.txt" 2>&1)
    if [[ $? -ne 0 && "$out" == *"$3"* ]]; then pass "manifests: $1 is caught"; else fail "manifests: $1 passed: $out"; fi
  }
  broken shard_count 's/--shard_count=3/--shard_count=4/' "must equal spec.replicas"
  broken unknown_flag 's/--workers=1/--wokers=1/' "--wokers is not a flag of sentierd"
  broken writable_registry '/mountPath: \/srv\/sentier\/registry/{n;s/readOnly: true/readOnly: false/}' "registry mount must be readOnly"
  broken no_readyz 's#path: /readyz#path: /healthz#' "readinessProbe must GET /readyz"
  rm -rf "$TMP/k8s-bad-yaml" && cp -rL "$DEPLOY/k8s" "$TMP/k8s-bad-yaml" && chmod -R u+w "$TMP/k8s-bad-yaml"
  printf 'kind: [unclosed\n' >> "$TMP/k8s-bad-yaml/service.yaml"
  out=$(python3 "$DEPLOY/check_manifests.py" "$TMP/k8s-bad-yaml" "$TMP/help.txt" 2>&1)
  [[ $? -ne 0 && "$out" == *"does not parse"* ]] && pass "manifests: bad YAML is caught" \
    || fail "manifests: bad YAML passed: $out"
else
  echo "SKIP: python3's yaml module is missing (apt-get install python3-yaml): manifests not checked"
fi

# ---- 3. Prometheus alert rules
if command -v promtool >/dev/null; then
  if out=$(promtool check rules "$DEPLOY/prometheus/alerts.yml" 2>&1); then
    pass "alerts: promtool check rules: $(echo "$out" | grep -o 'SUCCESS.*')"
  else
    fail "alerts: promtool check rules: $out"
  fi
  # promtool test rules resolves rule_files relative to the test file: run on copies.
  mkdir -p "$TMP/prom" && cp "$DEPLOY/prometheus/alerts.yml" "$DEPLOY/prometheus/alerts_test.yml" "$TMP/prom/"
  if out=$(cd "$TMP/prom" && promtool test rules alerts_test.yml 2>&1); then
    pass "alerts: promtool test rules"
  else
    fail "alerts: promtool test rules: $out"
  fi
else
  echo "SKIP: promtool is not installed (apt-get install prometheus): the alert rules are not checked"
fi

# ---- 4. --shard=auto as the StatefulSet runs it: three replicas named sentierd-0..2 (their own
# UTS namespace as root, else SENTIER_SHARD_INDEX) over one registry of 8 models split the
# models between them, each exactly once; a pod beyond the count exits 2.
REG="$TMP/shard-reg"
models="alpha beta delta epsilon eta gamma theta zeta"
for m in $models; do  # not archives: every version is rejected at once, which is all this needs
  mkdir -p "$REG/$m/1" && echo junk > "$REG/$m/1/model.pt" && echo junk > "$REG/$m/1/inputs.pt"
done
pod_by="the environment (SENTIER_SHARD_INDEX: not root, no UTS namespace)"
if [[ $(id -u) -eq 0 ]] && command -v unshare >/dev/null && unshare --uts true 2>/dev/null; then
  pod_by="the host name (a UTS namespace per replica)"
fi
as_pod() {  # as_pod ORDINAL SENTIERD_ARGS...: sentierd on a host named sentierd-ORDINAL
  local ordinal="$1"; shift
  if [[ "$pod_by" == "the host name"* ]]; then
    unshare --uts /bin/sh -c 'hostname "sentierd-$0" && exec "$@"' "$ordinal" "$SENTIERD" "$@"
  else
    SENTIER_SHARD_INDEX="$ordinal" "$SENTIERD" "$@"
  fi
}
taken=""
for i in 0 1 2; do
  out=$(as_pod "$i" --once --registry="$REG" --output="$TMP/shard-out$i" --shard=auto \
          --shard_count=3 --poll_interval_ms=100 --device=cpu 2>"$TMP/shard$i.log")
  rc=$?
  [[ $rc -eq 0 ]] || fail "shard auto: replica $i exited $rc: $(tail -3 "$TMP/shard$i.log")"
  taken+=" $(sed -n 's/^sentierd: \([a-z]*\): .*/\1/p' <<<"$out" | tr '\n' ' ')"
done
got=$(tr ' ' '\n' <<<"$taken" | grep -v '^$' | sort | tr '\n' ' ')
[[ "$got" == "$models " ]] && pass "shard auto: 3 replicas, ordinal from $pod_by, took each of 8 models once" \
  || fail "shard auto: the replicas took '$got', want each of '$models' once"
as_pod 3 --once --registry="$REG" --output="$TMP/shard-out3" --shard=auto --shard_count=3 \
  >/dev/null 2>"$TMP/shard3.log"
rc=$?
[[ $rc -eq 2 ]] && grep -q "shard index 3 .* is out of range for a shard count of 3" "$TMP/shard3.log" \
  && pass "shard auto: a replica beyond the count exits 2" \
  || fail "shard auto: replica 3 of 3 exited $rc: $(cat "$TMP/shard3.log")"

echo "deploy_test: $fails failure(s)"
(( fails == 0 ))
