# sentierd_test_lib.sh — helpers shared by the sentierd end-to-end tests (sourced, not run).
# The test sets RUN (its runfiles root) before sourcing; this sets D (sentierd), MAKE
# (make_example_model) and the pass/fail counters.
D="$RUN/tools/sentierd"
MAKE="$RUN/tools/make_example_model"
fails=0
passes=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; passes=$((passes + 1)); }
status_of() { grep -o '"status": "[a-z]*"' "$1" | head -1 | cut -d'"' -f4; }
put() {  # put REG MODEL VERSION EXAMPLE SEED: staged then renamed, as registry writers do
  mkdir -p "$1/$2/tmp-$3"
  "$MAKE" --model="$4" --seed="$5" --batch=8 --out_model="$1/$2/tmp-$3/model.pt" \
    --out_inputs="$1/$2/tmp-$3/inputs.pt" || { echo "cannot make model"; exit 1; }
  mv "$1/$2/tmp-$3" "$1/$2/$3"
}
