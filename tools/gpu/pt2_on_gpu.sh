#!/usr/bin/env bash
# pt2_on_gpu.sh — exported programs (.pt2) on the GPU machine, after tools/gpu/build_and_test.sh
# built build/cmake (it builds sentierd and sentier_opt itself where they are missing).
#
#   tools/gpu/pt2_on_gpu.sh [--sets=corpus,conformance] [--models=a,b] [--workers=2]
#                           [--sentierd_timeout=420] [--no_client | --client_only] [--device=cuda]
#                           [--compare=a,b --batch=4096 --compare_modes=... --timeout=200]
#
# --sets: the checked-in archives (testdata/models/pt2 at batch 16, testdata/optimus_conformance/pt2
#   at batch 8, each with its own sample inputs) as a registry, REG/<set>_<name>/1/model.pt2,
#   through `sentierd --once --device=cuda` with its defaults (--workers jobs at once on the one
#   GPU, stopped after --sentierd_timeout), then tools/gpu/train_client.py: the plain Python client
#   that loads the original and the published .pt2 with torch.export.load, moves them to the GPU
#   (move_to_device_pass), trains both 20 steps from the same state and requires the same losses;
#   all versions in one process (--version_timeout 0: an exported program runs no TorchScript
#   fuser that could stall). --sets= (empty) skips this part.
# --client_only runs the client over the registry and output an earlier run left in build/pt2-gpu
# (a second call on a machine still warm).
# --device=cpu runs the --sets part on the CPU (a smoke test of this script off the GPU machine).
# --compare: these corpus models exported at --batch on this machine (make_pt2.py --batch), and
#   their TorchScript archives (testdata/models/torch2.11) with inputs at the same batch, each
#   optimized by sentier_opt (defaults), timed by bench/compare_torch_compile.py: TorchScript
#   original and Sentier's .pt, the exported program's module() original and Sentier's .pt2,
#   torch.compile of the exported module without and with Optimus (training step, forward, CUDA
#   kernels, peak memory, compile time).
#
# Writes to ${OUT:-build}: pt2-sentierd.log, pt2-reports.md (tools/gpu/report_table.py),
# pt2-reports.tar.gz, pt2-client.{md,json,log}; pt2-compare.{md,json,log}, pt2-compare-opt.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build}"
sets=corpus,conformance
models=""
workers=2
sd_timeout=420
client=1
client_only=0
compare=""
batch=4096
modes=ts_original,ts_sentier,pt2_original,pt2_sentier,compile_pt2,compile_pt2_optimus
timeout=200
device=cuda
for a in "$@"; do
  case "$a" in
    --sets=*) sets="${a#--sets=}" ;;
    --models=*) models="${a#--models=}" ;;
    --workers=*) workers="${a#--workers=}" ;;
    --sentierd_timeout=*) sd_timeout="${a#--sentierd_timeout=}" ;;
    --no_client) client=0 ;;
    --client_only) client_only=1 ;;
    --compare=*) compare="${a#--compare=}" ;;
    --batch=*) batch="${a#--batch=}" ;;
    --compare_modes=*) modes="${a#--compare_modes=}" ;;
    --timeout=*) timeout="${a#--timeout=}" ;;
    --device=*) device="${a#--device=}" ;;
    *) echo "pt2_on_gpu: unknown argument '$a'" >&2; exit 2 ;;
  esac
done
if [[ ! -x build/cmake/sentierd || ! -x build/cmake/sentier_opt ]]; then
  tools/gpu/build_and_test.sh --build_only --targets=sentierd,sentier_opt || exit 1
fi
mkdir -p "$out"
rc=0

if [[ -n "$sets" && $client_only == 0 ]]; then
  work=build/pt2-gpu
  rm -rf "$work"; mkdir -p "$work/reg"
  for s in ${sets//,/ }; do
    case "$s" in
      corpus) dir=testdata/models/pt2 ;;
      conformance) dir=testdata/optimus_conformance/pt2 ;;
      *) echo "pt2_on_gpu: unknown set '$s'" >&2; exit 2 ;;
    esac
    for f in "$dir"/*.pt2; do
      m=$(basename "$f" .pt2)
      [[ -z "$models" || ",$models," == *",$m,"* ]] || continue
      mkdir -p "$work/reg/${s}_$m/1"
      cp "$f" "$work/reg/${s}_$m/1/model.pt2"
    done
  done
  echo "registry: $(ls "$work/reg" | wc -l) exported programs ($sets)"
  start=$(date +%s)
  SENTIER_RULES_DIR="$PWD/patterns" timeout -s TERM "$sd_timeout" build/cmake/sentierd --once \
    --registry="$work/reg" --output="$work/out" --device="$device" --workers="$workers" \
    --rules="$PWD/patterns" >"$out/pt2-sentierd.log" 2>&1
  rc=$?
  echo "sentierd --device=$device: exit $rc in $(( $(date +%s) - start )) s"
  grep -E "^sentierd: [a-z_0-9]+: " "$out/pt2-sentierd.log" | grep -v -E ": v[0-9]+ (optimized|unchanged)" | head -20
  tar -C "$work/out" -czf "$out/pt2-reports.tar.gz" --exclude=model.pt2 --exclude=.sentierd .
  python3 tools/gpu/report_table.py "$work/out" "$out/pt2-reports.md" >/dev/null
  python3 - "$work/out" <<'EOF'
import collections, glob, json, sys
c = collections.Counter()
for p in glob.glob(sys.argv[1] + "/*/*/report.json"):
    r = json.load(open(p))
    c[(p.split("/")[-3].split("_")[0], r.get("status"))] += 1
for k in sorted(c):
    print("  %s %s: %d" % (k[0], k[1], c[k]))
EOF
fi
if [[ -n "$sets" && $client == 1 ]]; then
  work=build/pt2-gpu
  [[ -d "$work/out" ]] || { echo "pt2_on_gpu: no sentierd output in $work/out" >&2; exit 1; }
  PYTHONUNBUFFERED=1 python3 tools/gpu/train_client.py --registry "$work/reg" --output "$work/out" \
    --device "$device" --version_timeout 0 --rounds 2 --iters 2 \
    --json "$out/pt2-client.json" --markdown "$out/pt2-client.md" >"$out/pt2-client.log" 2>&1
  crc=$?
  tail -1 "$out/pt2-client.log"
  grep -c "match (" "$out/pt2-client.md" | sed 's/^/  client rows with matching losses: /'
  grep -v "match (" "$out/pt2-client.md" | tail -n +3 | head -20
  [[ $crc == 0 ]] || rc=1
fi

if [[ -n "$compare" ]]; then
  work=build/pt2-compare
  rm -rf "$work"; mkdir -p "$work/inputs" "$work/pt2" "$work/export"
  python3 testdata/models/make_corpus.py --out "$work/inputs" --batch "$batch" --inputs_only \
    --models "$compare" >"$out/pt2-compare-inputs.log" 2>&1 || { tail -20 "$out/pt2-compare-inputs.log"; exit 1; }
  python3 testdata/models/make_pt2.py --set corpus --only "$compare" --batch "$batch" --out "$work/pt2" \
    >"$out/pt2-compare-export.log" 2>&1 || { tail -20 "$out/pt2-compare-export.log"; exit 1; }
  : >"$out/pt2-compare-opt.log"
  for m in ${compare//,/ }; do
    d="$work/export/$m"
    mkdir -p "$d"
    archive=testdata/models/torch2.11/$m/scripted.pt
    [[ -f "$archive" ]] || archive=testdata/models/torch2.11/$m/traced.pt
    cp "$archive" "$d/original.pt"
    cp "$work/inputs/$m/inputs.pt" "$d/inputs.pt"
    cp "$work/pt2/$m.pt2" "$d/original.pt2"
    build/cmake/sentier_opt --input="$d/original.pt" --inputs="$d/inputs.pt" --rules="$PWD/patterns" \
      --output="$d/optimized.pt" >>"$out/pt2-compare-opt.log" 2>&1 || echo "sentier_opt failed on $m.pt"
    build/cmake/sentier_opt --input="$d/original.pt2" --rules="$PWD/patterns" \
      --output="$d/optimized.pt2" >>"$out/pt2-compare-opt.log" 2>&1 || echo "sentier_opt failed on $m.pt2"
  done
  grep -E "^sentier_opt: .*->" "$out/pt2-compare-opt.log" | sed -E 's/: [0-9]+ rewrites \(.*\);/:/'
  python3 bench/compare_torch_compile.py --export_dir="$work/export" --corpus_dir=testdata/models \
    --models="$compare" --modes="$modes" --timeout="$timeout" --ts_executor=default \
    --markdown="$out/pt2-compare.md" --json="$out/pt2-compare.json" >"$out/pt2-compare.log" 2>&1 || rc=1
  cat "$out/pt2-compare.md"
fi
exit "$rc"
