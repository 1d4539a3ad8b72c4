# A clean Debian 12 root for tests that must run without this machine's packages (sourced by
# sdk/deb_install_test.sh and gpu/bundle_test.sh; needs root, and debootstrap with the network to
# Debian's mirror the first time). The root is made with debootstrap --variant=minbase from the
# mirror this machine's apt uses and cached as a tarball in ~/.cache/troupe-deb-test/ (delete it
# to start from Debian again).
#   debian_root_make DIR        unpacks the root into DIR (an empty directory)
#   debian_root_mount DIR SOURCE TARGET [mount options...]
#                               mounts SOURCE at DIR/TARGET, remembered for cleanup
#   debian_root_cleanup DIR     kills processes whose root is DIR, unmounts, removes DIR

debian_root_mounted=()

# The mirror of this machine's apt sources (deb822 .sources or a sources.list line) for bookworm.
debian_root_mirror() {
  local file
  for file in /etc/apt/sources.list.d/*.sources; do
    [ -f "$file" ] || continue
    awk 'BEGIN{RS=""; FS="\n"} /Suites:[^\n]*bookworm( |$|\n)/ {
           for (i = 1; i <= NF; i++) if ($i ~ /^URIs:/) { split($i, u, " "); print u[2]; exit } }' "$file"
  done | head -n1
  grep -hsE '^deb\s+(\[[^]]*\]\s+)?\S+\s+bookworm\s' /etc/apt/sources.list /etc/apt/sources.list.d/*.list |
    sed -E 's/^deb\s+(\[[^]]*\]\s+)?(\S+).*/\2/' | head -n1 || true  # no sources.list: fine
}

debian_root_make() {
  local root="$1" cache="$HOME/.cache/troupe-deb-test"
  local tarball="$cache/bookworm-minbase.tar"
  if [ -f "$tarball" ]; then
    echo "== Debian 12 root from the cached $tarball"
    tar -C "$root" -xf "$tarball"
  else
    command -v debootstrap >/dev/null || { echo "needs debootstrap (apt-get install debootstrap)" >&2; return 1; }
    local mirror_url
    mirror_url="$(debian_root_mirror | head -n1)"
    [ -n "$mirror_url" ] || { echo "no bookworm mirror in /etc/apt/sources*" >&2; return 1; }
    echo "== debootstrap --variant=minbase bookworm from $mirror_url (cached afterwards)"
    debootstrap --variant=minbase bookworm "$root" "$mirror_url" > "$root.debootstrap.log" 2>&1 ||
      { tail -n 20 "$root.debootstrap.log"; rm -f "$root.debootstrap.log"; return 1; }
    rm -f "$root.debootstrap.log"
    mkdir -p "$cache"
    tar -C "$root" -cf "$tarball.partial" . && mv "$tarball.partial" "$tarball"
  fi
  chmod 0755 "$root"  # mktemp's 0700 (kept in the cached tarball too) would shut out other users
}

debian_root_mount() {  # debian_root_mount ROOT SOURCE TARGET [options...]
  mkdir -p "$1/$3"
  mount "${@:4}" "$2" "$1/$3"
  debian_root_mounted+=("$1/$3")
}

debian_root_cleanup() {
  local root="$1" pid i
  [ -d "$root" ] || return 0
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$root" ] && kill -9 "$pid" 2>/dev/null || true
  done
  for ((i = ${#debian_root_mounted[@]} - 1; i >= 0; i--)); do
    umount "${debian_root_mounted[i]}" 2>/dev/null || umount -l "${debian_root_mounted[i]}" || true
  done
  debian_root_mounted=()
  rm -rf --one-file-system "$root"
}
