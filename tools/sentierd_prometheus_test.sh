#!/usr/bin/env bash
# sentierd_prometheus_test.sh — a real Prometheus (Debian's `prometheus`) scrapes a running
# sentierd: a registry with two models, a third version added while both run; the series are read
# back through Prometheus' HTTP query API: the target is up with no scrape error, the versions
# recorded (sum of sentierd_versions_total) and the job-time histogram's count equal the versions
# in the registry. Skips (exit 0) only where /usr/bin/prometheus is missing.
set -u
RUN="${TEST_SRCDIR:-$PWD/bazel-bin/tools/sentierd_prometheus_test.runfiles}/sentier"
source "$RUN/tools/sentierd_test_lib.sh"
PROMETHEUS="${SENTIER_PROMETHEUS:-/usr/bin/prometheus}"
if [[ ! -x "$PROMETHEUS" ]]; then
  echo "SKIP: $PROMETHEUS is missing (Debian package 'prometheus'; tools/setup_deps.sh installs it)"
  exit 0
fi
command -v curl >/dev/null || { echo "FAIL: curl is missing (tools/setup_deps.sh installs it)"; exit 1; }
T="${TEST_TMPDIR:-$(mktemp -d)}/prom"
rm -rf "$T"; mkdir -p "$T"

DPID=""; PROM_PID=""
cleanup() {
  [[ -n "$DPID" ]] && kill "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null
  [[ -n "$PROM_PID" ]] && kill "$PROM_PID" 2>/dev/null && wait "$PROM_PID" 2>/dev/null
  return 0
}
trap cleanup EXIT

# free_port: a TCP port on 127.0.0.1 nothing listens on now.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# wait_until SECONDS COMMAND...: runs COMMAND every 0.25 s until it succeeds; 1 after SECONDS.
wait_until() {
  local limit=$1 i; shift
  for ((i = 0; i < limit * 4; i++)); do "$@" && return 0; sleep 0.25; done
  return 1
}
http_ok() { curl -sf --max-time 2 -o /dev/null "$1"; }
# query PROMQL: the value of the query's first sample through /api/v1/query ("" when none).
query() {
  curl -sf --max-time 5 --get --data-urlencode "query=$1" "http://127.0.0.1:$PPORT/api/v1/query" |
    python3 -c 'import json, sys
r = json.load(sys.stdin)["data"]["result"]
print(r[0]["value"][1] if r else "")' 2>/dev/null
}
query_is() { [[ "$(query "$1")" == "$2" ]]; }

R="$T/reg"; O="$T/out"; RULES="$T/rules"
mkdir -p "$R" "$RULES"
cp "$RUN"/patterns/*.rules "$RULES"/
put "$R" ranker 1 waste 1
put "$R" towers 1 towers 1

DPORT=$(free_port)
"$D" --registry="$R" --output="$O" --rules="$RULES" --device=cpu --poll_interval_ms=200 \
  --metrics_port="$DPORT" >"$T/sentierd.log" 2>&1 &
DPID=$!
wait_until 60 http_ok "http://127.0.0.1:$DPORT/readyz" && ok "sentierd ready on 127.0.0.1:$DPORT" ||
  { fail "sentierd not ready"; tail -20 "$T/sentierd.log"; exit 1; }

PPORT=$(free_port)
cat >"$T/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: sentierd
    static_configs:
      - targets: ['127.0.0.1:$DPORT']
EOF
"$PROMETHEUS" --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/tsdb" \
  --web.listen-address="127.0.0.1:$PPORT" >"$T/prometheus.log" 2>&1 &
PROM_PID=$!
wait_until 60 http_ok "http://127.0.0.1:$PPORT/-/ready" && ok "prometheus ready on 127.0.0.1:$PPORT" ||
  { fail "prometheus not ready"; tail -20 "$T/prometheus.log"; exit 1; }
wait_until 30 query_is 'up{job="sentierd"}' 1 && ok 'up{job="sentierd"} == 1' ||
  fail "up{job=\"sentierd\"} is '$(query 'up{job="sentierd"}')'"

# A new version while both run.
wait_until 120 test -e "$O/towers/1/report.json" || fail "towers/1 not published"
put "$R" towers 2 feature_towers 1
wait_until 120 test -e "$O/towers/2/report.json" && ok "towers/2 published while scraped" ||
  { fail "towers/2 not published"; tail -20 "$T/sentierd.log"; }

versions=$(find "$R" -mindepth 2 -maxdepth 2 -type d -regex '.*/[1-9][0-9]*' | wc -l)
published=$(find "$O" -mindepth 3 -maxdepth 3 -name report.json | wc -l)
[[ $versions == 3 && $published == 3 ]] && ok "3 versions in the registry, 3 reports" ||
  fail "registry has $versions versions, output $published reports"
# Prometheus has scraped the final counts once they appear (bounded: 30 s of 1 s scrapes).
if wait_until 30 query_is 'sum(sentierd_versions_total)' "$versions"; then
  ok "sum(sentierd_versions_total) == $versions"
else
  fail "sum(sentierd_versions_total) is '$(query 'sum(sentierd_versions_total)')', want $versions"
fi
if wait_until 30 query_is 'sentierd_job_duration_seconds_count{job="sentierd"}' "$versions"; then
  ok "sentierd_job_duration_seconds_count == $versions"
else
  fail "sentierd_job_duration_seconds_count is '$(query 'sentierd_job_duration_seconds_count')', want $versions"
fi
query_is 'sentierd_versions_seen_total' "$versions" && ok "sentierd_versions_seen_total == $versions" ||
  fail "sentierd_versions_seen_total is '$(query sentierd_versions_seen_total)'"
# Histogram buckets are usable by PromQL (+Inf bucket == count).
query_is 'sentierd_job_duration_seconds_bucket{le="+Inf"}' "$versions" && ok "+Inf bucket == count" ||
  fail "+Inf bucket is '$(query 'sentierd_job_duration_seconds_bucket{le="+Inf"}')'"
now=$(date +%s)
poll=$(query 'sentierd_last_successful_poll_timestamp_seconds')
[[ "$poll" =~ ^[0-9]+$ ]] && (( poll > now - 60 && poll <= now + 1 )) && ok "last successful poll $poll" ||
  fail "last successful poll '$poll'"
# No scrape errors: the target is still up and its last scrape has no error.
query_is 'up{job="sentierd"}' 1 && ok "still up" || fail "target down at the end"
health=$(curl -sf --max-time 5 "http://127.0.0.1:$PPORT/api/v1/targets" | python3 -c 'import json, sys
t = json.load(sys.stdin)["data"]["activeTargets"]
print(";".join(x["health"] + ":" + x["lastError"] for x in t))')
[[ "$health" == "up:" ]] && ok "target health up, no last error" || fail "targets: '$health'"

echo "sentierd_prometheus_test: $passes passed, $fails failure(s)"
[[ $fails == 0 ]]
