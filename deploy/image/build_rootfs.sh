#!/usr/bin/env bash
# build_rootfs.sh — builds sentierd's image root filesystem (a directory) from what the build
# produced and the Debian packages it needs, and, where a builder works, an OCI image from it.
#
#   deploy/image/build_rootfs.sh ROOTFS [--sentierd=BIN] [--rules=DIR]
#       [--example_registry=DIR|build|none] [--make_example_model=BIN] [--oci=NAME[:TAG]]
#
# ROOTFS gets (it must not exist, or be empty; keep it out of git: build/ or a temp directory):
#   /usr/bin/sentierd                      --sentierd (default <repo>/bazel-bin/tools/sentierd)
#   the shared libraries it needs          every library `ldd` resolves (LibTorch, Abseil, glog,
#                                          gflags, cpp-httplib, OpenSSL, libstdc++, glibc...),
#                                          copied from this machine's Debian packages at the same
#                                          paths, symbolic links included, and the ELF loader
#   /usr/share/sentier/patterns/*.rules    the rule library (--rules, default <repo>/patterns)
#   /usr/share/sentier/example-registry/   the bundled example registry (tools/
#                                          make_example_registry.sh: ranker/1,2 towers/1,2):
#                                          --example_registry=DIR copies DIR, build (the default)
#                                          makes it with make_example_model, none leaves it out
#   /usr/share/sentier/debian-packages.txt the Debian packages the files came from, with their
#                                          versions; their copyright files under /usr/share/doc
#   /usr/share/sentier/pip-packages.txt    the pip distributions the other libraries came from
#                                          (LibTorch: pip torch and its nvidia-* wheels in the
#                                          project's .venv), with their versions; their license
#                                          files under /usr/share/doc/pip/<name>
#   /etc/passwd, /etc/group                root and the user sentierd (uid/gid 10001)
#   /srv/sentier/registry, /var/lib/sentierd   mount points: the registry (read-only) and the
#                                          output root (owned by sentierd)
#   /tmp, /proc, /sys, /dev                empty mount points
# Run it:   chroot ROOTFS /usr/bin/sentierd --once --registry=/usr/share/sentier/example-registry
#               --output=/var/lib/sentierd --rules=/usr/share/sentier/patterns
# (mount /proc inside first: the daemon starts its jobs through /proc/self/exe;
# deploy/image/rootfs_test.sh does it in a private mount namespace).
#
# --oci=NAME builds an OCI image from ROOTFS with buildah (entrypoint /usr/bin/sentierd, user
# 10001, SENTIER_RULES_DIR set, port 9464) when buildah is installed; else it says so and the
# root file system is the result. Containers cannot start on the development machines of this
# project (podman's runtime fails with "setrlimit RLIMIT_NOFILE: Operation not permitted"), so the
# image is tested there as the root file system under chroot, not as a container.
# The GPU: the default LibTorch (pip torch in .venv) is the CUDA build: its libraries (libcudart,
# libcublas... from the nvidia-* wheels, at their .venv paths, which sentierd's RPATH names) come
# along through ldd, and the driver's (libcuda) are mounted into the container by the NVIDIA
# container toolkit. (With Debian's CPU LibTorch, SENTIER_TORCH_DIR=/usr, the image is CPU only.)
# Exit codes: 0 built; 2 bad usage or inputs missing; 1 a step failed.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
usage() { echo "usage: build_rootfs.sh ROOTFS [--sentierd=BIN] [--rules=DIR] [--example_registry=DIR|build|none] [--make_example_model=BIN] [--oci=NAME]" >&2; exit 2; }
die() { echo "build_rootfs: $*" >&2; exit 2; }

ROOTFS=""
SENTIERD="$REPO/bazel-bin/tools/sentierd"
RULES="$REPO/patterns"
EXAMPLE=build
MAKE_MODEL="$REPO/bazel-bin/tools/make_example_model"
OCI=""
for arg in "$@"; do
  case "$arg" in
    --sentierd=*) SENTIERD="${arg#*=}" ;;
    --rules=*) RULES="${arg#*=}" ;;
    --example_registry=*) EXAMPLE="${arg#*=}" ;;
    --make_example_model=*) MAKE_MODEL="${arg#*=}" ;;
    --oci=*) OCI="${arg#*=}" ;;
    -*) usage ;;
    *) [[ -z "$ROOTFS" ]] || usage; ROOTFS="$arg" ;;
  esac
done
[[ -n "$ROOTFS" ]] || usage
[[ -x "$SENTIERD" ]] || die "$SENTIERD is not built (bazel build //tools:sentierd)"
compgen -G "$RULES/*.rules" >/dev/null || die "no rule files in '$RULES'"
if [[ -e "$ROOTFS" && -n "$(ls -A "$ROOTFS")" ]]; then die "'$ROOTFS' exists and is not empty"; fi
command -v ldd >/dev/null || die "ldd is missing (apt-get install libc-bin)"
mkdir -p "$ROOTFS"
ROOTFS="$(cd "$ROOTFS" && pwd)"

# The top-level layout of a merged-/usr Debian: /bin, /lib, /lib64, /sbin link into /usr.
mkdir -p "$ROOTFS"/usr/{bin,sbin,lib,lib64} "$ROOTFS"/{etc,tmp,proc,sys,dev,root}
for d in bin sbin lib lib64; do ln -s "usr/$d" "$ROOTFS/$d"; done
chmod 1777 "$ROOTFS/tmp"

# copy_path PATH: copies PATH into ROOTFS at the same place, recreating each symbolic link on the
# way (libfoo.so.1 -> libfoo.so.1.2.3) and copying the file it ends at.
copied=()
copy_path() {
  local p="$1" dir target
  for _ in 1 2 3 4 5 6 7 8; do
    # The directory, as the host resolves it (/lib/x86_64-linux-gnu -> /usr/lib/x86_64-linux-gnu).
    dir="$(readlink -f "$(dirname "$p")")"
    p="$dir/$(basename "$p")"
    mkdir -p "$ROOTFS$dir"
    if [[ -L "$p" ]]; then
      target="$(readlink "$p")"
      [[ -e "$ROOTFS$p" || -L "$ROOTFS$p" ]] || ln -s "$target" "$ROOTFS$p"
      [[ "$target" == /* ]] && p="$target" || p="$dir/$target"
    else
      [[ -e "$ROOTFS$p" ]] || cp -p "$p" "$ROOTFS$p"
      copied+=("$p")
      return 0
    fi
  done
  echo "build_rootfs: too many symbolic links at $1" >&2
  return 1
}

# The binary and every library it needs, with the loader.
install -D -m 0755 "$(readlink -f "$SENTIERD")" "$ROOTFS/usr/bin/sentierd"
ldd_out="$(ldd "$SENTIERD")"
if grep -q "not found" <<<"$ldd_out"; then
  die "libraries of $SENTIERD are missing on this machine: $(grep 'not found' <<<"$ldd_out" | tr -s ' \t' ' ')"
fi
nlibs=0
while read -r lib; do
  copy_path "$lib"
  nlibs=$((nlibs + 1))
done < <(awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' <<<"$ldd_out" | sort -u)
interp="$(readelf -l "$SENTIERD" 2>/dev/null | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')"
[[ -n "$interp" ]] && copy_path "$interp"

# The rules and the example registry.
install -d "$ROOTFS/usr/share/sentier/patterns"
cp "$RULES"/*.rules "$ROOTFS/usr/share/sentier/patterns/"
[[ -f "$RULES/README.md" ]] && cp "$RULES/README.md" "$ROOTFS/usr/share/sentier/patterns/"
case "$EXAMPLE" in
  none) ;;
  build)
    [[ -x "$MAKE_MODEL" ]] || die "$MAKE_MODEL is not built (bazel build //tools:make_example_model), or pass --example_registry=none"
    MAKE_EXAMPLE_MODEL="$MAKE_MODEL" "$REPO/tools/make_example_registry.sh" "$ROOTFS/usr/share/sentier/example-registry" >/dev/null ;;
  *)
    [[ -d "$EXAMPLE" ]] || die "--example_registry='$EXAMPLE' is not a directory"
    cp -rL "$EXAMPLE" "$ROOTFS/usr/share/sentier/example-registry" ;;
esac

# The Debian packages the files came from (dpkg knows a file under /usr/lib or /lib), their
# versions and copyright files.
if command -v dpkg-query >/dev/null; then
  queries=()
  for f in "${copied[@]}"; do queries+=("$f" "${f#/usr}"); done
  pkgs="$(dpkg-query -S "${queries[@]}" 2>/dev/null | cut -d: -f1-2 | tr ', ' '\n\n' \
          | sed 's/:$//' | grep -v '^$' | sort -u || true)"
  : > "$ROOTFS/usr/share/sentier/debian-packages.txt"
  for pkg in $pkgs; do
    dpkg-query -W -f='${Package}:${Architecture} ${Version}\n' "$pkg" \
      >> "$ROOTFS/usr/share/sentier/debian-packages.txt" 2>/dev/null || continue
    name="${pkg%%:*}"
    if [[ -f "/usr/share/doc/$name/copyright" ]]; then
      install -D -m 0644 "/usr/share/doc/$name/copyright" "$ROOTFS/usr/share/doc/$name/copyright"
    fi
  done
fi

# The pip distributions the other files came from (a file under .../site-packages/ named in a
# distribution's RECORD), their versions and license files.
pips=""
for f in "${copied[@]}"; do
  [[ "$f" == */site-packages/* ]] || continue
  sp="${f%%/site-packages/*}/site-packages"
  rec="$(awk -F, -v r="${f#"$sp"/}" '$1 == r {print FILENAME; exit}' "$sp"/*.dist-info/RECORD 2>/dev/null || true)"
  if [[ -n "$rec" ]]; then pips+="$(dirname "$rec")"$'\n'; fi
done
if [[ -n "$pips" ]]; then
  : > "$ROOTFS/usr/share/sentier/pip-packages.txt"
  while read -r info; do
    [[ -n "$info" ]] || continue
    name="$(sed -n 's/^Name: *//p' "$info/METADATA" | head -1)"
    version="$(sed -n 's/^Version: *//p' "$info/METADATA" | head -1)"
    echo "$name $version" >> "$ROOTFS/usr/share/sentier/pip-packages.txt"
    doc="$ROOTFS/usr/share/doc/pip/$name"
    for lic in "$info"/LICENSE* "$info"/COPYING* "$info"/NOTICE* "$info"/licenses; do
      if [[ -e "$lic" ]]; then mkdir -p "$doc"; cp -r "$lic" "$doc/"; fi
    done
  done < <(sort -u <<<"$pips")
fi

# Users, and the mount points.
cat > "$ROOTFS/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/usr/sbin/nologin
sentierd:x:10001:10001:Sentier daemon:/var/lib/sentierd:/usr/sbin/nologin
PASSWD
cat > "$ROOTFS/etc/group" <<'GROUP'
root:x:0:
sentierd:x:10001:
GROUP
echo "passwd: files" > "$ROOTFS/etc/nsswitch.conf"
install -d -m 0755 "$ROOTFS/srv/sentier/registry"
install -d -m 0755 -o 10001 -g 10001 "$ROOTFS/var/lib/sentierd" 2>/dev/null \
  || install -d -m 0755 "$ROOTFS/var/lib/sentierd"
# The loader's cache: the libraries are in the default directories, the cache only speeds it up.
if command -v ldconfig >/dev/null; then ldconfig -r "$ROOTFS" 2>/dev/null || true; fi

echo "build_rootfs: $ROOTFS: sentierd, $nlibs shared libraries and the loader, $(find "$ROOTFS/usr/share/sentier/patterns" -name '*.rules' | wc -l) rule files, $(wc -l < "$ROOTFS/usr/share/sentier/debian-packages.txt" 2>/dev/null || echo 0) Debian packages, $(wc -l < "$ROOTFS/usr/share/sentier/pip-packages.txt" 2>/dev/null || echo 0) pip packages, $(du -sh "$ROOTFS" | cut -f1)"

# The OCI image, where buildah works.
if [[ -n "$OCI" ]]; then
  if ! command -v buildah >/dev/null; then
    echo "build_rootfs: buildah is not installed: no OCI image (the root file system is built)"
  else
    c="$(buildah from scratch)"
    trap 'buildah rm "$c" >/dev/null 2>&1 || true' EXIT
    buildah copy "$c" "$ROOTFS" / >/dev/null
    buildah config --entrypoint '["/usr/bin/sentierd"]' --user 10001:10001 \
      --env SENTIER_RULES_DIR=/usr/share/sentier/patterns --env GLOG_logtostderr=1 \
      --port 9464 --workingdir /var/lib/sentierd \
      --label org.opencontainers.image.title=sentierd "$c"
    buildah commit "$c" "$OCI" >/dev/null
    echo "build_rootfs: OCI image $OCI (containers cannot start on this project's machines; test it with chroot)"
  fi
fi
