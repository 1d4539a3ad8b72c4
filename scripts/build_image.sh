#!/usr/bin/env bash
# Builds Troupe's container image without any image registry:
#   bash scripts/build_image.sh [path/to/troupe_VERSION_amd64.deb]   (default: the newest dist/troupe_*_amd64.deb;
#   troupe-train_VERSION_amd64.deb beside it, if there, is installed too)
# -> dist/troupe-image.tar, an OCI archive holding the image troupe:VERSION (Debian's ~ and + in
#    the version become -). Load it with `podman load -i dist/troupe-image.tar`.
#
# The image is a Debian 12 (bookworm) root filesystem made by debootstrap from Debian's packages
# (cached as a tarball under ~/.cache/troupe-image, so a rebuild takes seconds), the .deb
# installed into it with apt (its Depends: come from Debian), committed with buildah as one layer:
# entrypoint `troupe`, default command `--help`, ports 6380 (GCS) and 8265 (HTTP API), user
# `troupe` (uid 1000), TROUPE_TEMP_DIR=/tmp/troupe. Needs root (debootstrap, chroot, mounts).
# The Debian mirror is the one apt already uses on this machine (read at run time).
#
# Environment: TROUPE_IMAGE_CACHE (default ~/.cache/troupe-image), TROUPE_IMAGE_OUTPUT (default
# dist/troupe-image.tar), TROUPE_IMAGE_KEEP_ROOTFS=DIR (also leave the image's root filesystem
# in DIR, for inspection with chroot; scripts/image_test.sh uses it).
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "build_image.sh: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || fail "run as root (debootstrap, chroot and buildah's storage need it)"

deb="${1:-}"
if [ -z "$deb" ]; then
  deb="$(ls -t dist/troupe_*_amd64.deb 2>/dev/null | head -n1 || true)"
  [ -n "$deb" ] || fail "no .deb given and none in dist/: run scripts/build_deb.sh first, or pass its path"
fi
[ -f "$deb" ] || fail "no such file: $deb"
deb="$(realpath "$deb")"
version="$(dpkg-deb --field "$deb" Version)"
# The train library (troupe-train, which brings LibTorch), when built beside the .deb: programs
# run in the image may use it, as with the single package before the split.
train_deb="$(dirname "$deb")/troupe-train_${version}_amd64.deb"
# An image tag allows [A-Za-z0-9_.-]: Debian's ~ and + become -.
tag="$(printf '%s' "$version" | tr -c 'A-Za-z0-9_.\n-' '-')"

missing=()
for tool in debootstrap:debootstrap buildah:buildah; do
  command -v "${tool%%:*}" >/dev/null || missing+=("${tool##*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "Installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

# The mirror and security mirror apt uses here (deb822 .sources or one-line .list files).
apt_uri() {  # $1: a regex the suite must match
  local files=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources)
  python3 - "$1" "${files[@]}" <<'PY'
import os, re, sys
want = re.compile(sys.argv[1])
for path in sys.argv[2:]:
    if not os.path.isfile(path):
        continue
    text = open(path).read()
    if path.endswith(".sources"):
        for stanza in re.split(r"\n\s*\n", text):
            fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.M))
            if "deb" in fields.get("Types", "").split() and any(
                    want.fullmatch(s) for s in fields.get("Suites", "").split()):
                print(fields["URIs"].split()[0]); sys.exit(0)
    else:
        for line in text.splitlines():
            m = re.match(r"\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", line)
            if m and want.fullmatch(m.group(2)):
                print(m.group(1)); sys.exit(0)
PY
}
mirror="$(apt_uri 'bookworm')"
security="$(apt_uri 'bookworm-security' || true)"
[ -n "$mirror" ] || fail "found no Debian bookworm mirror in apt's sources on this machine"

cache="${TROUPE_IMAGE_CACHE:-$HOME/.cache/troupe-image}"
base_tar="$cache/debian-bookworm-minbase.tar"
mkdir -p "$cache" dist
work="$(mktemp -d /tmp/troupe-image.XXXXXX)"
rootfs="$work/rootfs"
container=""
# A private, temporary buildah storage: nothing is left in the machine's container storage.
buildah_flags=(--root "$work/storage" --runroot "$work/run" --storage-driver vfs)

cleanup() {
  for m in "$rootfs/proc" "$rootfs/dev"; do
    mountpoint -q "$m" 2>/dev/null && umount -l "$m"
  done
  [ -n "$container" ] && buildah "${buildah_flags[@]}" rm "$container" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

# 1. The Debian root filesystem (cached).
if [ ! -f "$base_tar" ]; then
  echo "== debootstrap bookworm (minbase) -> $base_tar"
  debootstrap --variant=minbase bookworm "$work/base" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log" >&2; fail "debootstrap failed (log above)"; }
  tar -C "$work/base" --numeric-owner -cf "$base_tar.partial" .
  mv "$base_tar.partial" "$base_tar"
  rm -rf "$work/base"
fi
mkdir -p "$rootfs"
tar -C "$rootfs" --numeric-owner -xf "$base_tar"

# 2. The .deb, installed with apt so that its Depends: are resolved from Debian.
echo "== apt install $(basename "$deb") into the root filesystem"
{
  printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\n' "$mirror"
  printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
  if [ -n "$security" ]; then
    printf '\nTypes: deb\nURIs: %s\nSuites: bookworm-security\nComponents: main\n' "$security"
    printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n'
  fi
} >"$rootfs/etc/apt/sources.list.d/debian.sources"
rm -f "$rootfs/etc/apt/sources.list"
cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
cp "$deb" "$rootfs/tmp/troupe.deb"
debs=(/tmp/troupe.deb)
if [ -f "$train_deb" ]; then
  cp "$train_deb" "$rootfs/tmp/troupe-train.deb"
  debs+=(/tmp/troupe-train.deb)
fi
mount -t proc proc "$rootfs/proc"
mount --bind /dev "$rootfs/dev"
in_root() { chroot "$rootfs" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"; }
# The image's user, uid 1000 (the Kubernetes manifests run as it), made before the package, whose
# postinst keeps an existing `troupe` user.
in_root useradd --uid 1000 --user-group --create-home --home-dir /home/troupe \
  --shell /usr/sbin/nologin troupe
in_root apt-get update -qq
in_root apt-get install -y -qq --no-install-recommends "${debs[@]}" >"$work/apt.log" 2>&1 ||
  { tail -n 30 "$work/apt.log" >&2; fail "apt-get install of ${debs[*]##*/} failed (log above)"; }
in_root troupe --help >/dev/null || fail "troupe does not run inside the root filesystem"
in_root install -d -o troupe -g troupe -m 0755 /tmp/troupe
in_root apt-get clean
umount -l "$rootfs/proc" "$rootfs/dev"
rm -rf "$rootfs/tmp/troupe.deb" "$rootfs/tmp/troupe-train.deb" "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin
# The machine's mirror is not the image's business: the image's apt uses Debian's own name.
sed -i "s|$mirror|http://deb.debian.org/debian|; s|${security:-@none@}|http://deb.debian.org/debian-security|" \
  "$rootfs/etc/apt/sources.list.d/debian.sources"
: >"$rootfs/etc/resolv.conf"
if [ -n "${TROUPE_IMAGE_KEEP_ROOTFS:-}" ]; then
  rm -rf "$TROUPE_IMAGE_KEEP_ROOTFS"
  mkdir -p "$TROUPE_IMAGE_KEEP_ROOTFS"
  cp -a "$rootfs/." "$TROUPE_IMAGE_KEEP_ROOTFS/"
fi

# 3. The image: the root filesystem as one layer, and its configuration.
echo "== buildah commit troupe:$tag"
tar -C "$rootfs" --numeric-owner -cf "$work/rootfs.tar" .
container="$(buildah "${buildah_flags[@]}" from scratch)"
buildah "${buildah_flags[@]}" add "$container" "$work/rootfs.tar" / >/dev/null
buildah "${buildah_flags[@]}" config \
  --entrypoint '["troupe"]' --cmd '--help' \
  --port 6380/tcp --port 8265/tcp \
  --env TROUPE_TEMP_DIR=/tmp/troupe \
  --user troupe --workingdir /home/troupe \
  --stop-signal SIGTERM \
  --label org.opencontainers.image.title=troupe \
  --label org.opencontainers.image.version="$version" \
  --label org.opencontainers.image.description="Troupe: an actor-based distributed task framework for C++" \
  --label org.opencontainers.image.base.name=debian:bookworm \
  "$container"
buildah "${buildah_flags[@]}" commit --quiet --format oci "$container" "troupe:$tag" >/dev/null
output="${TROUPE_IMAGE_OUTPUT:-dist/troupe-image.tar}"
rm -f "$output"
buildah "${buildah_flags[@]}" push --quiet "troupe:$tag" "oci-archive:$output:troupe:$tag"
echo "Built troupe:$tag -> $output ($(du -h "$output" | cut -f1))"
echo "Load it: podman load -i $output"
