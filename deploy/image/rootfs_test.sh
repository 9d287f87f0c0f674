#!/usr/bin/env bash
# rootfs_test.sh — builds the image root file system with build_rootfs.sh from the built sentierd
# (under TEST_TMPDIR, never in the source tree) and runs the daemon inside it, as the image's
# sentierd user, under chroot (run_in_rootfs.sh: the set-up of a container runtime, which cannot
# start containers on these machines):
#  - every library sentierd needs resolves inside the root file system (its loader's --list);
#  - `sentierd --once` over the bundled example registry, mounted read-only at
#    /srv/sentier/registry, exits 0 and publishes every version (ranker/1,2, towers/1,2) with
#    model.pt and a report.json whose status is optimized or unchanged;
#  - a bad flag exits 2 inside it as outside; the registry is left untouched;
#  - where buildah is installed, the OCI image built from it has the entrypoint, the user and the
#    binary.
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
# LibTorch's package is named: pip torch's (the default, from .venv) in pip-packages.txt, or
# Debian's libtorch in debian-packages.txt, whichever sentierd loads.
if [[ "$(grep -o '=> [^ ]*/libtorch_cpu\.so' <<<"$libs")" == */site-packages/* ]]; then
  grep -qs '^torch [0-9]' "$R/usr/share/sentier/pip-packages.txt" || fail "pip-packages.txt does not name LibTorch's package (torch)"
else
  grep -q '^libtorch' "$R/usr/share/sentier/debian-packages.txt" || fail "debian-packages.txt does not name LibTorch's package"
fi

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

# The OCI image from the same root file system, where buildah is installed (tools/setup_deps.sh
# installs it; it builds images here, though no container can start): committed in a storage of
# the test's own (vfs driver under TEST_TMPDIR), written as an OCI layout, and its config and
# layer read back: the entrypoint, the user, the rules' variable, and /usr/bin/sentierd inside.
if command -v buildah >/dev/null; then
  S="$TEST_TMPDIR/oci-storage"
  mkdir -p "$S"
  printf '[storage]\ndriver = "vfs"\ngraphroot = "%s/graph"\nrunroot = "%s/run"\n' "$S" "$S" >"$S/storage.conf"
  export CONTAINERS_STORAGE_CONF="$S/storage.conf"
  img="localhost/sentierd-rootfs-test:$$"
  rm -rf "$R"
  if "$RUN/deploy/image/build_rootfs.sh" "$R" --sentierd="$RUN/tools/sentierd" --rules="$RUN/patterns" \
       --example_registry=none --oci="$img" >"$TEST_TMPDIR/oci.log" 2>&1 &&
     buildah push "$img" "oci:$S/layout:latest" >>"$TEST_TMPDIR/oci.log" 2>&1; then
    python3 - "$S/layout" <<'PY' && ok "OCI image: entrypoint /usr/bin/sentierd as 10001, /usr/bin/sentierd in its layer" || fail "OCI image contents"
import json, os, sys, tarfile
root = sys.argv[1]
blob = lambda d: os.path.join(root, "blobs", *d.split(":"))
index = json.load(open(os.path.join(root, "index.json")))
manifest = json.load(open(blob(index["manifests"][0]["digest"])))
config = json.load(open(blob(manifest["config"]["digest"])))["config"]
assert config["Entrypoint"] == ["/usr/bin/sentierd"], config
assert config["User"] == "10001:10001", config
assert any(e.startswith("SENTIER_RULES_DIR=") for e in config["Env"]), config
names = set()
for layer in manifest["layers"]:
    with tarfile.open(blob(layer["digest"])) as t:
        names.update(n.lstrip("./") for n in t.getnames())
assert "usr/bin/sentierd" in names and "usr/share/sentier/patterns/vertical.rules" in names, sorted(names)[:20]
PY
  else
    fail "OCI image: $(tail -5 "$TEST_TMPDIR/oci.log")"
  fi
  buildah rmi "$img" >/dev/null 2>&1 || true
  rm -rf "$S" "$R"
else
  echo "SKIP: buildah is not installed: no OCI image checked"
fi

rm -rf "$R"
echo "rootfs_test: $fails failure(s)"
(( fails == 0 ))
