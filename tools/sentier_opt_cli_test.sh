#!/usr/bin/env bash
# sentier_opt_cli_test.sh — the command-line contract of sentier_opt and sentier_check: exit
# codes, messages that name the bad file (file:line:col for rules), no partial outputs, and the
# JSON reports.
set -u
RUN="${TEST_SRCDIR}/sentier"
OPT="$RUN/tools/sentier_opt"
MAKE="$RUN/tools/make_example_model"
CHECK="$RUN/tools/sentier_check"
PLANTED="$RUN/testdata/planted"
RULES="$RUN/patterns"
T="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
passes=0

check() {  # check NAME EXPECTED_EXIT GREP_PATTERN -- command...
  local name="$1" want="$2" pattern="$3"
  shift 4
  "$@" >"$T/out.txt" 2>&1
  local got=$?
  if [[ "$got" != "$want" ]]; then
    echo "FAIL $name: exit $got, want $want"; cat "$T/out.txt"; fails=$((fails + 1)); return
  fi
  if [[ -n "$pattern" ]] && ! grep -qE -- "$pattern" "$T/out.txt"; then
    echo "FAIL $name: output lacks /$pattern/"; cat "$T/out.txt"; fails=$((fails + 1)); return
  fi
  passes=$((passes + 1))
}

"$MAKE" --model=waste --out_model="$T/model.pt" --out_inputs="$T/inputs.pt" || { echo "cannot make model"; exit 1; }

# --list_rules: name<TAB>family<TAB>file:line, at least 12 vertical rules.
check list_rules 0 "" -- "$OPT" --list_rules --rules="$RULES"
n=$(grep -cP '^[a-z0-9_]+\tvertical\t[^\t]+\.rules:[0-9]+$' "$T/out.txt")
if (( n < 12 )); then echo "FAIL list_rules: $n vertical rules"; fails=$((fails + 1)); fi

# Success, with report: sha256 of the output matches the file written.
check optimize 0 "rewrites" -- "$OPT" --input="$T/model.pt" --output="$T/opt.pt" --inputs="$T/inputs.pt" --rules="$RULES" --report="$T/report.json"
want_sha=$(sha256sum "$T/opt.pt" | cut -d' ' -f1)
grep -q "\"artifact_sha256\": \"$want_sha\"" "$T/report.json" || { echo "FAIL report sha256"; cat "$T/report.json"; fails=$((fails + 1)); }
for key in rules_fingerprint rule_counts canonicalize nodes_before nodes_after source_sha256; do
  grep -q "\"$key\"" "$T/report.json" || { echo "FAIL report lacks $key"; fails=$((fails + 1)); }
done
# The report follows the schema sentierd's report.json follows too.
"$RUN/tools/check_report" --schema="$RUN/runtime/report_schema.json" "$T/report.json" \
  || { echo "FAIL report does not follow runtime/report_schema.json"; fails=$((fails + 1)); }

# Bad inputs: exit 2, the file named, no output written.
rm -f "$T/bad_out.pt"
check missing_input 2 "nope\.pt" -- "$OPT" --input="$T/nope.pt" --output="$T/bad_out.pt" --rules="$RULES"
: >"$T/empty.pt"
check empty_input 2 "empty\.pt.*empty" -- "$OPT" --input="$T/empty.pt" --output="$T/bad_out.pt" --rules="$RULES"
head -c 300 "$T/model.pt" >"$T/truncated.pt"
check truncated_input 2 "truncated\.pt" -- "$OPT" --input="$T/truncated.pt" --output="$T/bad_out.pt" --rules="$RULES"
head -c 4096 /dev/urandom >"$T/random.pt"
check random_input 2 "random\.pt" -- "$OPT" --input="$T/random.pt" --output="$T/bad_out.pt" --rules="$RULES"
printf 'graph(%%x : Float(2, 3)):\n  %%y : Tensor = aten::relu(%%x\n' >"$T/broken.ir"
# Archives saved by a newer PyTorch, made from a torch 2.11 archive (LibTorch 2.11 reads the
# stored ones): one whose code calls an operator this LibTorch lacks (the same length, so that its
# debug records still line up), one whose file format version is past this LibTorch's.
python3 - "$RUN/testdata/models/torch2.11/transformer/scripted.pt" "$T" <<'PY' || { echo "cannot make the newer archives"; exit 1; }
import sys, zipfile
src, out = sys.argv[1:]
def rewrite(dst, edit):
    changed = 0
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(f"{out}/{dst}", "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            new = edit(info.filename, data)
            changed += new != data
            zout.writestr(info, new)
    assert changed == 1, (dst, changed)
rewrite("newer_op.pt", lambda name, data: data.replace(
    b"torch.scaled_dot_product_attention(", b"torch.scaled_dot_product_attn_2099(")
    if name.endswith(".py") else data)
rewrite("newer_format.pt", lambda name, data: b"9999\n" if name.endswith("/version") else data)
PY
# The operator and the likely cause are named (the message of LibTorch's loader starts with an
# empty line).
check newer_torch_archive 2 "newer_op\.pt': Unknown builtin op: aten::scaled_dot_product_attn_2099.*newer PyTorch" -- "$OPT" --input="$T/newer_op.pt" --output="$T/bad_out.pt" --rules="$RULES"
check newer_archive_format 2 "newer_format\.pt': .*version 9999, but the maximum supported version for reading is [0-9]+.*PyTorch installation may be too old" -- "$OPT" --input="$T/newer_format.pt" --output="$T/bad_out.pt" --rules="$RULES"
# Sample inputs of another model: the graph does not run on them. The warning quotes the cause
# (the interpreter's RuntimeError), not the first line of LibTorch's traceback.
check samples_of_another_model 0 "no shape facts: running the graph on the sample inputs failed: RuntimeError: list index out of range" -- "$OPT" --input="$RUN/testdata/models/torch1.13/wide/scripted.pt" --output="$T/wide_other.pt" --inputs="$RUN/testdata/models/torch1.13/towers/inputs.pt" --rules="$RULES"
# An output or report that cannot be written is refused before any work: nothing is written.
check output_dir_missing 2 "cannot write into the directory '$T/no_such_dir'" -- "$OPT" --input="$T/model.pt" --output="$T/no_such_dir/out.pt" --rules="$RULES"
check report_dir_missing 2 "cannot write into the directory '$T/no_such_dir'" -- "$OPT" --input="$T/model.pt" --output="$T/report_dir_missing.pt" --report="$T/no_such_dir/r.json" --rules="$RULES"
[[ ! -e "$T/report_dir_missing.pt" ]] || { echo "FAIL report_dir_missing: the artifact was written"; fails=$((fails + 1)); }
check check_report_dir_missing 2 "cannot write into the directory '$T/no_such_dir'" -- "$CHECK" --reference="$T/model.pt" --candidate="$T/model.pt" --inputs="$T/inputs.pt" --report="$T/no_such_dir/c.json"
# Without --inputs nothing is known of the sizes: the message says why nothing applied.
check no_inputs_hint 0 "no rule applied \(0 rewrites; without --inputs no sizes are known" -- "$OPT" --input="$RUN/testdata/models/torch1.13/towers/scripted.pt" --output="$T/towers_noinputs.pt" --rules="$RULES"
# Without --cost=measure the step users run decides whether a larger graph is written:
# feature_groups' batched form runs more ops per forward (20 -> 27) and fewer per training step
# (the backward of 7 linears and 8 relus becomes 2 and 1), so it is written by default and kept
# original with --mode=inference; both counts are in the report.
FG="$RUN/testdata/models/torch1.13/gated_bags"
check step_count_decides 0 "rewrites \(" -- "$OPT" --input="$FG/scripted.pt" --inputs="$FG/inputs.pt" --output="$T/fg.pt" --report="$T/fg.json" --rules="$RULES"
num() { grep -oE "\"$1\": [0-9]+" "$T/fg.json" | grep -oE '[0-9]+$'; }
# The training step decides: gated_bags' batched form (its bags as one embedding_bag) makes more
# kernel launches per forward and fewer per training step.
fb=$(num kernel_launches_per_forward_before); fa=$(num kernel_launches_per_forward_after)
sb=$(num kernel_launches_per_training_step_before); sa=$(num kernel_launches_per_training_step_after)
if ! grep -q '"status": "optimized"' "$T/fg.json" || ! (( fa > fb && sa < sb && sb > fb )); then
  echo "FAIL step_count_decides report: launches per forward $fb -> $fa, training step $sb -> $sa"
  fails=$((fails + 1))
fi
# Judged by the forward (inference), every rule together makes more kernel launches than the
# original (the batched bags' offsets); sentier_opt publishes the rewrite without
# batch_embedding_bag_offsets, which makes fewer, and the report says what it left out.
check forward_count_for_inference 0 "rewrites \(" -- "$OPT" --input="$FG/scripted.pt" --inputs="$FG/inputs.pt" --output="$T/fg_inf.pt" --report="$T/fg_inf.json" --mode=inference --rules="$RULES"
if ! grep -qE 'Left out: batch_embedding_bag_offsets \(with every rule that fired the graph made [0-9]+ kernel launches per forward' "$T/fg_inf.json" ||
   ! grep -q '"untimed_dropped_rules": \[' "$T/fg_inf.json"; then
  echo "FAIL forward_count_for_inference report:"; cat "$T/fg_inf.json"; fails=$((fails + 1))
fi
check broken_ir 2 "broken\.ir" -- "$OPT" --input="$T/broken.ir" --output="$T/bad_out.ir" --rules="$RULES"
check bad_samples 2 "random\.pt" -- "$OPT" --input="$T/model.pt" --output="$T/bad_out.pt" --inputs="$T/random.pt" --rules="$RULES"
[[ -e "$T/bad_out.pt" || -e "$T/bad_out.ir" ]] && { echo "FAIL partial output left behind"; fails=$((fails + 1)); }
ls -A "$T" | grep -q '^\.tmp-' && { echo "FAIL temp file left behind"; fails=$((fails + 1)); }

# Bad rule files: file:line:col, exit 2.
printf 'rule r1\n  family vertical\n  description d\n  match\n    %%y = aten::catt(%%l, $d)\n  rewrite\n    replace %%y with %%l\nend\n' >"$T/unknown_op.rules"
check unknown_op 2 "unknown_op\.rules:5:10: unknown operator 'aten::catt'" -- "$OPT" --list_rules --rules="$T/unknown_op.rules"
printf 'rule r2\n  family vertical\n  description d\n  match\n    %%y = aten::relu(%%x)\n  where\n    bogus(%%x)\n  rewrite\n    replace %%y with %%x\nend\n' >"$T/unknown_fn.rules"
check unknown_function 2 "unknown_fn\.rules:7:5: unknown function 'bogus'" -- "$OPT" --list_rules --rules="$T/unknown_fn.rules"
printf 'rule r3\n  family vertical\n  description d\n  match\n    %%y = aten::relu(%%x)\n  rewrite\n    replace %%y with %%z\nend\n' >"$T/unknown_capture.rules"
check unknown_capture 2 "unknown_capture\.rules:7:21: unknown capture '%z'" -- "$OPT" --list_rules --rules="$T/unknown_capture.rules"
printf 'rule r4\n  family vertical\n  match\n    %%y = aten::relu(%%x\n' >"$T/syntax.rules"
check syntax_error 2 "syntax\.rules:4:[0-9]+: expected" -- "$OPT" --list_rules --rules="$T/syntax.rules"
check bad_rules_path 2 "no_such_dir" -- "$OPT" --input="$T/model.pt" --output="$T/bad_out.pt" --rules="$T/no_such_dir"

# --cost=measure: times the result and keeps only rewrites that pay (CPU timing here).
check cost_measure 0 "cost: all rules" -- "$OPT" --input="$T/model.pt" --output="$T/cost.pt" --inputs="$T/inputs.pt" --rules="$RULES" --cost=measure --device=cpu --mode=inference
# --gate=on is the flag's name; --cost=measure an old alias that says so once.
check gate_on 0 "cost: all rules" -- "$OPT" --input="$T/model.pt" --output="$T/gate.pt" --inputs="$T/inputs.pt" --rules="$RULES" --gate=on --device=cpu --mode=inference --report="$T/gate.json"
grep -q '"gate": "on"' "$T/gate.json" || { echo "FAIL gate_on: the report's options lack the gate"; fails=$((fails + 1)); }
check cost_alias_notice 0 "note: --cost is an old name of --gate: use --gate=on" -- "$OPT" --input="$T/model.pt" --output="$T/cost.pt" --inputs="$T/inputs.pt" --rules="$RULES" --cost=measure --device=cpu --mode=inference
check gate_bad_value 2 "--gate must be auto, on or off, not 'maybe'" -- "$OPT" --input="$T/model.pt" --output="$T/gate.pt" --rules="$RULES" --gate=maybe
check gate_needs_inputs 2 "needs a .pt model and --inputs" -- "$OPT" --input="$T/model.pt" --output="$T/gate2.pt" --rules="$RULES" --gate=on
check bad_trials 2 "--validation_trials must be >= 1" -- "$OPT" --input="$T/model.pt" --output="$T/trials.pt" --rules="$RULES" --validation_trials=0
# The gate measures the artifact in the layout it writes: with --param_layout=stacked, every
# measured set has stacked parameters (report: selection.param_layout).
TOWERS="$RUN/testdata/models/torch1.13/towers"
check cost_measure_stacked 0 "cost: all rules" -- "$OPT" --input="$TOWERS/scripted.pt" --output="$T/cost_stacked.pt" --inputs="$TOWERS/inputs.pt" --rules="$RULES" --cost=measure --device=cpu --param_layout=stacked --report="$T/cost_stacked.json"
# (The report is indented by two per level: the selection's keys by four.)
grep -qE '^    "param_layout": "stacked",?$' "$T/cost_stacked.json" ||
  { echo "FAIL cost_measure_stacked: the gate did not measure the stacked layout"; grep -A3 '"selection"' "$T/cost_stacked.json"; fails=$((fails + 1)); }
check memory_margin_word 2 "--memory_margin: memory margin must be auto or a number" -- "$OPT" --input="$T/model.pt" --output="$T/mm.pt" --inputs="$T/inputs.pt" --rules="$RULES" --cost=measure --memory_margin=lots
[[ ! -e "$T/mm.pt" ]] || { echo "FAIL a bad --memory_margin wrote an output"; fails=$((fails + 1)); }
check cost_needs_inputs 2 "needs a .pt model and --inputs" -- "$OPT" --input="$T/model.pt" --output="$T/cost.pt" --rules="$RULES" --cost=measure
check cost_bad_value 2 "--cost must be none or measure" -- "$OPT" --input="$T/model.pt" --output="$T/cost.pt" --rules="$RULES" --cost=bogus
check bad_mode 2 "--mode must be training or inference, not 'bogus'" -- "$OPT" --input="$T/model.pt" --output="$T/mode.pt" --inputs="$T/inputs.pt" --rules="$RULES" --mode=bogus
[[ ! -e "$T/mode.pt" ]] || { echo "FAIL bad_mode: an output was written"; fails=$((fails + 1)); }
check bad_timing 2 "--timing must be auto, interpreter or executor, not 'fuser'" -- "$OPT" --input="$T/model.pt" --output="$T/timing.pt" --inputs="$T/inputs.pt" --rules="$RULES" --timing=fuser
check bad_stall 2 "--executor_stall_s must be >= 0" -- "$OPT" --input="$T/model.pt" --output="$T/timing.pt" --inputs="$T/inputs.pt" --rules="$RULES" --executor_stall_s=-1
[[ ! -e "$T/timing.pt" ]] || { echo "FAIL timing: an output was written"; fails=$((fails + 1)); }
# Timing with the executor's optimizations (LibTorch 2.x; 1.13 refuses it, which
# equivalence_checker_test checks there): the gate times the steps that way and says so, without
# falling back to the interpreter.
check timing_executor 0 "cost: all rules" -- "$OPT" --input="$T/model.pt" --output="$T/timing_executor.pt" --inputs="$T/inputs.pt" --rules="$RULES" --cost=measure --device=cpu --mode=inference --timing=executor --report="$T/timing_executor.json"
if ! grep -qE '^    "timing": "executor",?$' "$T/timing_executor.json" || grep -q '"timing_fallback"' "$T/timing_executor.json"; then
  echo "FAIL timing_executor: the gate did not time with the executor"; grep -A12 '"selection"' "$T/timing_executor.json"; fails=$((fails + 1))
fi

# Bad usage.
check unknown_flag 2 "unknown flag" -- "$OPT" --inptu=x
check no_input 2 "--input is required" -- "$OPT" --output="$T/x.pt" --rules="$RULES"
printf 'graph(%%x : Float(2, 3)):\n  %%y : Tensor = aten::relu(%%x)\n  return (%%y)\n' >"$T/ok.ir"
check ir_to_pt 2 "output needs a module" -- "$OPT" --input="$T/ok.ir" --output="$T/x.pt" --rules="$RULES"
check ir_to_ir 0 "rewrites" -- "$OPT" --input="$T/ok.ir" --output="$T/ok.out.ir" --rules="$RULES"
check bad_enable 2 "bad --enable regex" -- "$OPT" --list_rules --rules="$RULES" --enable='('

# sentier_check: 0 equivalent (with --time: step times and peak memory in the report), 1 not
# equivalent (a planted wrong rule: relu dropped), 2 bad input.
check check_equivalent 0 "^sentier_check: equivalent .*peak memory per forward .* per training step" -- \
  "$CHECK" --reference="$T/model.pt" --candidate="$T/opt.pt" --inputs="$T/inputs.pt" --device=cpu --trials=1 --time --report="$T/check.json"
for key in peak_bytes_per_forward peak_bytes_per_training_step training_step_ms '"equivalent": true'; do
  grep -q "$key" "$T/check.json" || { echo "FAIL check report lacks $key"; cat "$T/check.json"; fails=$((fails + 1)); }
done
check planted_drop_relu 0 "planted_drop_relu" -- "$OPT" --input="$T/model.pt" --output="$T/planted.pt" --inputs="$T/inputs.pt" --rules="$PLANTED/drop_relu.rules"
check check_not_equivalent 1 "output\[0\] differs on samples inputs" -- \
  "$CHECK" --reference="$T/model.pt" --candidate="$T/planted.pt" --inputs="$T/inputs.pt" --device=cpu --trials=1
# Planted gradient-only bugs (testdata/planted): the forward is exact, a parameter's gradient is
# not. sentier_check names the parameter; the gate (--cost=measure, which checks every measured
# set) refuses the rules.
"$MAKE" --model=feature_towers --out_model="$T/ft.pt" --out_inputs="$T/ft_in.pt" || { echo "cannot make model"; exit 1; }
for planted in detach_weight halve_bias_gradient stack_detached_weights; do
  check "planted_$planted" 0 "rewrites" -- "$OPT" --input="$T/ft.pt" --output="$T/ft_$planted.pt" \
    --inputs="$T/ft_in.pt" --rules="$PLANTED/$planted.rules" --allow_growth
  check "check_$planted" 1 "grad of param [a-z0-9_]+ " -- \
    "$CHECK" --reference="$T/ft.pt" --candidate="$T/ft_$planted.pt" --inputs="$T/ft_in.pt" --device=cpu --trials=1
  check "gate_$planted" 1 "not equivalent: grad of param" -- "$OPT" --input="$T/ft.pt" \
    --output="$T/ft_gate.pt" --inputs="$T/ft_in.pt" --rules="$PLANTED/$planted.rules" --cost=measure --device=cpu
done
[[ ! -e "$T/ft_gate.pt" ]] || { echo "FAIL the gate wrote an output for a planted rule"; fails=$((fails + 1)); }
# Stacked parameters (--param_layout=stacked) on the Python-authored towers model: the artifact
# is equivalent (gradients compared under the original names), and sentier_state converts its
# checkpoints to the original names and back, strictly. 18 aten ops: the layer norm's affine step
# is folded into the second batched linear (fold_scale_shift_into_baddbmm: addcmul out; a small
# mul and baddbmm on the weights in).
STATE="$RUN/tools/sentier_state"
TW="$RUN/testdata/models/torch1.13/towers"
check stacked 0 "aten ops per forward 322 -> 18" -- "$OPT" --input="$TW/scripted.pt" --output="$T/tw_stacked.pt" \
  --inputs="$TW/inputs.pt" --param_layout=stacked --report="$T/tw_stacked.json"
grep -q '"name": "l1.stacked_weight"' "$T/tw_stacked.json" || { echo "FAIL stacked report"; fails=$((fails + 1)); }
"$RUN/tools/check_report" --schema="$RUN/runtime/report_schema.json" "$T/tw_stacked.json" || { echo "FAIL stacked report schema"; fails=$((fails + 1)); }
check check_stacked 0 "^sentier_check: equivalent" -- "$CHECK" --reference="$TW/scripted.pt" \
  --candidate="$T/tw_stacked.pt" --inputs="$TW/inputs.pt" --device=cpu --trials=1
check state_export 0 "6 tensors" -- "$STATE" --artifact="$T/tw_stacked.pt" --export --out="$T/sd_stacked.pt"
check state_to_original 0 "384 tensors \(original names\)" -- "$STATE" --artifact="$T/tw_stacked.pt" \
  --to_original --in="$T/sd_stacked.pt" --out="$T/sd_original.pt"
check state_from_original 0 "6 tensors" -- "$STATE" --artifact="$T/tw_stacked.pt" \
  --from_original --in="$T/sd_original.pt" --out="$T/sd_back.pt"
cmp -s "$T/sd_stacked.pt" "$T/sd_back.pt" || { echo "FAIL checkpoint round trip changed bytes"; fails=$((fails + 1)); }
check state_strict 2 "unexpected key l1.stacked_weight|missing key" -- "$STATE" --artifact="$T/tw_stacked.pt" \
  --from_original --in="$T/sd_stacked.pt" --out="$T/sd_bad.pt"
[[ ! -e "$T/sd_bad.pt" ]] || { echo "FAIL sentier_state wrote a bad checkpoint"; fails=$((fails + 1)); }
check state_not_stacked 2 "stores no stacked parameters" -- "$STATE" --artifact="$TW/scripted.pt" --export --out="$T/x.pt"
check bad_layout 2 "--param_layout must be original, stacked or auto" -- "$OPT" --input="$TW/scripted.pt" --output="$T/x.pt" --param_layout=flat
check check_bad_inputs 2 "random\.pt.*not a well-formed archive" -- \
  "$CHECK" --reference="$T/model.pt" --candidate="$T/opt.pt" --inputs="$T/random.pt" --device=cpu
check check_missing_candidate 2 "nope\.pt" -- \
  "$CHECK" --reference="$T/model.pt" --candidate="$T/nope.pt" --inputs="$T/inputs.pt" --device=cpu

echo "$passes passed, $fails failed"
(( fails == 0 ))
