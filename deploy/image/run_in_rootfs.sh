#!/usr/bin/env bash
# run_in_rootfs.sh ROOTFS [--registry=DIR] [--user=UID:GID] -- COMMAND [ARG...] — runs COMMAND
# inside the image root file system the way a container runtime would set it up, without one
# (containers cannot start on this project's machines): in a private mount namespace (nothing is
# left mounted afterwards), /proc, a /dev tmpfs with null, zero, full, random and urandom bound
# from the host, /sys read-only, DIR bound read-only at /srv/sentier/registry, then chroot as
# UID:GID (default 10001:10001, the image's sentierd user). Needs root (unshare, mount, chroot).
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: run_in_rootfs.sh ROOTFS [--registry=DIR] [--user=UID:GID] -- COMMAND..." >&2; exit 2; }
R="$(cd "$1" && pwd)"; shift
REGISTRY=""
USERSPEC=10001:10001
while [[ $# -gt 0 && "$1" != "--" ]]; do
  case "$1" in
    --registry=*) REGISTRY="$(cd "${1#*=}" && pwd)" ;;
    --user=*) USERSPEC="${1#*=}" ;;
    *) echo "run_in_rootfs: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ "${1:-}" == "--" ]] && shift
[[ $# -ge 1 ]] || { echo "run_in_rootfs: no command" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "run_in_rootfs: needs root (mount, chroot)" >&2; exit 2; }
exec unshare --mount --fork --propagation private /bin/sh -euc '
  R="$1"; REGISTRY="$2"; USERSPEC="$3"; shift 3
  mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
  mount -t tmpfs -o mode=0755,nosuid,noexec tmpfs "$R/dev"
  for d in null zero full random urandom; do : > "$R/dev/$d"; mount --bind "/dev/$d" "$R/dev/$d"; done
  mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys" 2>/dev/null || mount --rbind /sys "$R/sys"
  if [ -n "$REGISTRY" ]; then
    mount --bind "$REGISTRY" "$R/srv/sentier/registry"
    mount -o remount,bind,ro "$R/srv/sentier/registry"
  fi
  exec chroot --userspec="$USERSPEC" "$R" "$@"
' run_in_rootfs "$R" "$REGISTRY" "$USERSPEC" "$@"
