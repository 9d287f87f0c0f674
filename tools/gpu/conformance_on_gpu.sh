#!/usr/bin/env bash
# conformance_on_gpu.sh — on the GPU machine: the Optimus conformance set
# (testdata/optimus_conformance/) with the machine's torch, in up to three parts.
#
#   tools/gpu/conformance_on_gpu.sh [--archives] [--table] [--sentierd] [--batch=4096]
#                                   [--modules=a,b] [--workers=6] [--sentierd_timeout=480]
#
# --archives  writes the set's torch 2.x archives (make_conformance.py --out
#             testdata/optimus_conformance/torch2.11, batch 8 as in the repository) and the corpus
#             model deepfm_columns's (make_corpus.py --out testdata/models/torch2.11), and packs
#             both into ${OUT}/torch2.11-archives.tar.gz (paths from the repository root).
# --table     writes the set at --batch (scripted and traced), optimizes every archive with
#             build/cmake/sentier_opt (defaults: every rule, no gate) and runs
#             testdata/optimus_conformance/gpu_table.py: CUDA kernels per training step and per
#             forward of TorchScript as saved, Sentier's artifact and torch.compile with Optimus's
#             fusions. ${OUT}/conformance-gpu.{md,json}, conformance-gpu-opt.log.
# --sentierd  a registry of the scripted archives at --batch, one version each, through
#             `sentierd --once --device=cuda` with its defaults, stopped after --sentierd_timeout
#             seconds (the jobs it finished keep their reports);
#             ${OUT}/conformance-sentierd.{md,log}, conformance-reports.tar.gz.
# sentier_opt and sentierd are built first where build/cmake lacks them.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build}"
do_archives=0; do_table=0; do_sentierd=0
batch=4096; modules=""; workers=6; sd_timeout=480
for a in "$@"; do
  case "$a" in
    --archives) do_archives=1 ;;
    --table) do_table=1 ;;
    --sentierd) do_sentierd=1 ;;
    --batch=*) batch="${a#--batch=}" ;;
    --modules=*) modules="${a#--modules=}" ;;
    --workers=*) workers="${a#--workers=}" ;;
    --sentierd_timeout=*) sd_timeout="${a#--sentierd_timeout=}" ;;
    *) echo "conformance_on_gpu: unknown argument '$a'" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
conf=testdata/optimus_conformance
rc=0

if [[ $do_archives == 1 ]]; then
  python3 $conf/make_conformance.py --out $conf/torch2.11 >"$out/conformance-archives.log" 2>&1 &&
  python3 testdata/models/make_corpus.py --out testdata/models/torch2.11 --models deepfm_columns \
    >>"$out/conformance-archives.log" 2>&1 || { tail -20 "$out/conformance-archives.log"; rc=1; }
  tar -czf "$out/torch2.11-archives.tar.gz" $conf/torch2.11 testdata/models/torch2.11/deepfm_columns
  echo "archives: $(find $conf/torch2.11 -name '*.pt' | wc -l) files; $(head -1 "$out/conformance-archives.log")"
fi

if [[ $do_table == 1 || $do_sentierd == 1 ]]; then
  need=""
  [[ -x build/cmake/sentier_opt ]] || need="sentier_opt"
  [[ $do_sentierd == 0 || -x build/cmake/sentierd ]] || need="${need:+$need,}sentierd"
  if [[ -n "$need" ]]; then tools/gpu/build_and_test.sh --build_only --targets="$need" || exit 1; fi
  work=build/conformance-gpu
  rm -rf "$work"; mkdir -p "$work"
  python3 $conf/make_conformance.py --out "$work/b$batch" --batch "$batch" ${modules:+--modules "$modules"} \
    >"$work/make.log" 2>&1 || { tail -20 "$work/make.log"; exit 1; }
fi

if [[ $do_table == 1 ]]; then
  start=$(date +%s)
  find "$work/b$batch" -name scripted.pt -o -name traced.pt | sort |
    xargs -P 8 -I{} sh -c 'a={}; SENTIER_RULES_DIR=$PWD/patterns build/cmake/sentier_opt --input=$a \
      --inputs=$(dirname $a)/inputs.pt --output=${a%.pt}.opt.pt 2>&1 | tail -1' \
    >"$out/conformance-gpu-opt.log" 2>&1
  echo "sentier_opt over $(find "$work/b$batch" -name '*.opt.pt' | wc -l) archives in $(( $(date +%s) - start )) s"
  python3 $conf/gpu_table.py --dir "$work/b$batch" --workers "$workers" \
    --json "$out/conformance-gpu.json" --markdown "$out/conformance-gpu.md" \
    >"$out/conformance-gpu.log" 2>&1 || rc=1
  grep -c "^| " "$out/conformance-gpu.md" | sed 's/^/table rows (with header): /'
  grep "n/a" "$out/conformance-gpu.md" | head -5
fi

if [[ $do_sentierd == 1 ]]; then
  reg="$work/reg"
  for d in "$work/b$batch"/*/; do
    m=$(basename "$d")
    mkdir -p "$reg/$m/1"
    cp "$d/scripted.pt" "$reg/$m/1/model.pt"
    cp "$d/inputs.pt" "$reg/$m/1/inputs.pt"
  done
  start=$(date +%s)
  SENTIER_RULES_DIR="$PWD/patterns" timeout -s TERM "$sd_timeout" build/cmake/sentierd --once \
    --registry="$reg" --output="$work/out" --device=cuda --workers=1 --rules="$PWD/patterns" \
    >"$out/conformance-sentierd.log" 2>&1
  echo "sentierd --device=cuda: exit $? in $(( $(date +%s) - start )) s over $(ls "$reg" | wc -l) models"
  tar -C "$work/out" -czf "$out/conformance-reports.tar.gz" --exclude=model.pt --exclude=.sentierd .
  python3 $conf/gpu_table.py --sentierd_reports "$work/out" --markdown "$out/conformance-sentierd.md" |
    tail -8
fi
exit "$rc"
