#!/usr/bin/env bash
# The .deb on a clean Debian 12 (docs/sdk.md): a minimal root made with debootstrap, the troupe
# package installed in it by apt (which fetches the Depends: from Debian's mirror), checked for
# what its postinst sets up (the system user troupe, /var/lib/troupe) and for no LibTorch, then
# `troupe start --head`, `troupe status` and `troupe stop` inside as the user troupe (as the
# systemd units run it), with the root's own loopback-only network.
# Slow (about a minute with the cached root, more the first time) and it needs root, the
# network to Debian's mirror and debootstrap; run by hand, not by scripts/test.sh:
#
#   sudo bash scripts/build_deb.sh && sudo bash sdk/deb_install_test.sh [dist/troupe_<v>_amd64.deb]
#
# The mirror is the one apt on this machine uses. The bootstrapped root is cached as a tarball in
# ~/.cache/troupe-deb-test/ (delete it to start from Debian again). Everything it mounts is
# unmounted on exit; troupe runs in PID and network namespaces of its own.
set -euo pipefail
cd "$(dirname "$0")/.."

version="$(tr -d '[:space:]' < VERSION)"
deb="$(realpath "${1:-dist/troupe_${version}_amd64.deb}")"
[ -f "$deb" ] || { echo "no package at $deb: run scripts/build_deb.sh first" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "deb_install_test.sh needs root (debootstrap, chroot, mount)" >&2; exit 1; }

source scripts/debian_root.sh
root="$(mktemp -d /tmp/troupe-deb-root.XXXXXX)"
trap 'debian_root_cleanup "$root"' EXIT
debian_root_make "$root"

mount_in() { debian_root_mount "$root" "$@"; }  # mount_in SOURCE TARGET [options...]
mount_in proc /proc -t proc
mount_in /dev /dev --bind
mount_in tmpfs /dev/shm -t tmpfs  # the node's object store, private to this root
mount_in tmpfs /tmp -t tmpfs
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp "$deb" "$root/tmp/"

echo "== apt-get install ./$(basename "$deb") in the clean root"
chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
  bash -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends /tmp/$(basename "$deb")" \
  > "$root/tmp/apt.log" 2>&1 || { tail -n 30 "$root/tmp/apt.log"; exit 1; }
grep -E '^(Setting up|Unpacking) troupe' "$root/tmp/apt.log" || true
echo "installed: $(chroot "$root" dpkg-query -W -f='${Package} ${Version} ${Status}' troupe)"

echo "== what the package set up: no LibTorch, the user troupe, its state directory, the env files"
! chroot "$root" dpkg-query -W -f='${Package}\n' 'libtorch*' 2>/dev/null | grep -q . ||
  { echo "FAIL: installing troupe pulled in LibTorch"; exit 1; }
chroot "$root" getent passwd troupe || { echo "FAIL: no user troupe"; exit 1; }
[ "$(chroot "$root" stat -c '%U:%G %a' /var/lib/troupe)" = "troupe:troupe 750" ] ||
  { echo "FAIL: /var/lib/troupe is $(chroot "$root" stat -c '%U:%G %a' /var/lib/troupe)"; exit 1; }
for env_file in /etc/troupe/head.env /etc/troupe/worker.env; do
  [ "$(chroot "$root" stat -c '%U %a' "$env_file")" = "root 600" ] ||
    { echo "FAIL: $env_file is missing or not root-only"; exit 1; }
done

echo "== as the units do: troupe start --head / status / stop as user troupe, TROUPE_TEMP_DIR=/var/lib/troupe (own network and PID namespaces)"
# --net: loopback only, so the head's ports cannot clash with anything on this machine and no
# traffic leaves. --pid with its own /proc: `troupe stop` sees only this root's processes, and
# whatever is left when the script ends dies with the namespace.
unshare --net --pid --fork --mount --mount-proc="$root/proc" -- \
  bash -c 'ip link set lo up && exec "$@"' _ chroot "$root" /usr/bin/env -i \
  PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root bash -euo pipefail -c '
    as_troupe() { runuser -u troupe -- env HOME=/var/lib/troupe TROUPE_TEMP_DIR=/var/lib/troupe "$@"; }
    as_troupe troupe --version
    as_troupe troupe start --head --num-cpus=1
    as_troupe troupe status
    as_troupe troupe stop
    ! as_troupe troupe status >/dev/null 2>&1 || { echo "a cluster still runs after troupe stop"; exit 1; }
  ' || { echo "FAIL: troupe in the clean root"; exit 1; }
echo "deb_install_test: the .deb installs on a clean Debian 12 and troupe start --head works"
