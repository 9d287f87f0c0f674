#!/usr/bin/env bash
# rootfs_test.sh — builds the image root file system with build_rootfs.sh from the built sentierd
# (under TEST_TMPDIR, never in the source tree) and runs the daemon inside it, as the image's
# sentierd user, under chroot (run_in_rootfs.sh: the set-up of a container runtime, which cannot
# start containers on these machines):
#  - every library sentierd needs resolves inside the root file system (its loader's --list);
#  - `sentierd --once` over the bundled example registry, mounted read-only at
#    /srv/sentier/registry, exits 0 and publishes every version (ranker/1,2, towers/1,2) with
#    model.pt and a report.json whose status is optimized or unchanged;
#  - a bad flag exits 2 inside it as outside; the registry is left untouched.
# Needs root (mount namespaces, chroot); skips with a message otherwise.
set -uo pipefail
RUN="${TEST_SRCDIR:?run under bazel test}/sentier"
if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: rootfs_test needs root (unshare --mount, mount, chroot); run it as root"
  exit 0
fi
for tool in unshare chroot mount readelf; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed"; exit 0; }
done
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
R="$TEST_TMPDIR/rootfs"
rm -rf "$R"
if ! "$RUN/deploy/image/build_rootfs.sh" "$R" --sentierd="$RUN/tools/sentierd" \
       --rules="$RUN/patterns" --make_example_model="$RUN/tools/make_example_model"; then
  echo "FAIL: build_rootfs.sh"; exit 1
fi
IN="$RUN/deploy/image/run_in_rootfs.sh"

# The loader inside resolves every library from the root file system alone.
interp="$(readelf -l "$R/usr/bin/sentierd" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')"
libs="$("$IN" "$R" --user=0:0 -- "$interp" --list /usr/bin/sentierd 2>&1)"
if [[ $? -eq 0 && "$libs" != *"not found"* && "$libs" == *libtorch* ]]; then
  ok "every shared library resolves inside the root file system ($(grep -c '=>' <<<"$libs") libraries)"
else
  fail "libraries inside the root file system: $(grep 'not found' <<<"$libs" | head -5)"
fi
for f in usr/share/sentier/patterns/vertical.rules usr/share/sentier/debian-packages.txt etc/passwd; do
  [[ -s "$R/$f" ]] || fail "the root file system has no /$f"
done
grep -q '^sentierd:x:10001:10001:' "$R/etc/passwd" || fail "/etc/passwd has no sentierd user"
grep -q '^libtorch' "$R/usr/share/sentier/debian-packages.txt" \
  || fail "debian-packages.txt does not name LibTorch's package"

# The example registry, bound read-only where the manifests mount the registry.
REG="$R/usr/share/sentier/example-registry"
before="$(cd "$REG" && find . -type f -exec sha256sum {} + | sort)"
expected="ranker/1 ranker/2 towers/1 towers/2"
for v in $expected; do [[ -s "$REG/$v/model.pt" ]] || fail "example registry has no $v"; done

out="$("$IN" "$R" --registry="$REG" -- /usr/bin/sentierd --once \
        --registry=/srv/sentier/registry --output=/var/lib/sentierd/out \
        --rules=/usr/share/sentier/patterns --device=cpu 2>"$TEST_TMPDIR/sentierd.log")"
rc=$?
echo "$out"
if [[ $rc -eq 0 ]]; then ok "sentierd --once inside the root file system exits 0"; else
  fail "sentierd --once exited $rc"; tail -20 "$TEST_TMPDIR/sentierd.log"; fi
OUT="$R/var/lib/sentierd/out"
for v in $expected; do
  report="$OUT/$v/report.json"
  if [[ ! -s "$report" ]]; then fail "$v: no report.json"; continue; fi
  status="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["status"])' "$report")"
  case "$status" in
    optimized|unchanged) [[ -s "$OUT/$v/model.pt" ]] && ok "$v published: $status" \
                           || fail "$v: status $status but no model.pt" ;;
    *) fail "$v: status '$status' ($(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("reason",""))' "$report"))" ;;
  esac
  owner="$(stat -c %u "$report")"
  [[ "$owner" == 10001 ]] || fail "$v: report.json owned by uid $owner, not the sentierd user"
done
[[ "$out" == *"sentierd: ranker: v1 "*"sentierd: towers: v1 "* ]] || fail "no per-model summary"
after="$(cd "$REG" && find . -type f -exec sha256sum {} + | sort)"
[[ "$before" == "$after" ]] && ok "the registry is unchanged" || fail "the registry changed"

# A bad flag inside: exit 2, as documented.
"$IN" "$R" -- /usr/bin/sentierd --registry=/srv/sentier/registry --output=/var/lib/sentierd/out \
  --shard=auto >/dev/null 2>"$TEST_TMPDIR/bad.log"
rc=$?
[[ $rc -eq 2 ]] && grep -q "no shard" "$TEST_TMPDIR/bad.log" && ok "a bad flag exits 2 inside" \
  || fail "--shard=auto without a count: exit $rc: $(cat "$TEST_TMPDIR/bad.log")"

# Nothing stays mounted.
if grep -qF " $R/" /proc/self/mounts; then fail "mounts left under $R"; else ok "nothing left mounted"; fi

rm -rf "$R"
echo "rootfs_test: $fails failure(s)"
(( fails == 0 ))
