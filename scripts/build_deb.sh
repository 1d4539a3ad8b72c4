#!/usr/bin/env bash
# Builds the Debian package of Troupe (docs/sdk.md): dist/troupe_<VERSION>_amd64.deb.
#
#   bash scripts/build_deb.sh [--out=DIR] [--bin-root=DIR]
#
# It installs the SDK (scripts/install.sh: bazel -c opt, CPU) under /usr in a staging root —
# bin/troupe, the libraries in lib/x86_64-linux-gnu (with their cmake/ and pkgconfig/ files),
# include/troupe — adds the systemd units of deploy/systemd (pointed at /usr/bin/troupe), and
# packs it with dpkg-deb. Depends: is derived, not written by hand: every library `ldd` finds for
# the packaged binaries is looked up with `dpkg -S`, and its package is required at (at least)
# the installed upstream version; a library no package owns stops the build.
# --bin-root=DIR packages artifacts built already (DIR/sdk/libtroupe.so, ..., as in bazel-bin)
# instead of running Bazel: sdk/sdk_test.sh does so.
set -euo pipefail
cd "$(dirname "$0")/.."

out="dist" bin_root=""
for arg in "$@"; do
  case "$arg" in
    --out=*) out="${arg#*=}" ;;
    --bin-root=*) bin_root="${arg#*=}" ;;
    -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "build_deb.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done

version="$(tr -d '[:space:]' < VERSION)"
libdir="lib/x86_64-linux-gnu"
stage="$(mktemp -d "${TMPDIR:-/tmp}/troupe-deb.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
root="$stage/troupe_${version}_amd64"

if [ -n "$bin_root" ]; then
  bash sdk/layout.sh --bin-root="$bin_root" --src-root="$PWD" --prefix=/usr --destdir="$root" \
    --libdir="$libdir"
else
  bash scripts/install.sh --prefix=/usr --destdir="$root" --libdir="$libdir"
fi

# systemd units, with the packaged binary's path.
install -d "$root/lib/systemd/system"
for unit in deploy/systemd/*.service; do
  sed 's|/usr/local/bin/troupe|/usr/bin/troupe|g' "$unit" > "$root/lib/systemd/system/$(basename "$unit")"
  chmod 0644 "$root/lib/systemd/system/$(basename "$unit")"
done

# The package that owns a library path, trying the path as given and resolved (Debian 12 merges
# /lib into /usr/lib, but dpkg records the path the package shipped).
owner_of() {
  local path="$1" candidate
  for candidate in "$path" "$(realpath "$path")" "${path#/usr}" "/usr$path"; do
    if dpkg -S "$candidate" >/dev/null 2>&1; then
      dpkg -S "$candidate" 2>/dev/null | head -n1 | cut -d: -f1
      return 0
    fi
  done
  return 1
}

# Every library the packaged ELF files load, except the package's own.
declare -A packages=()
missing=()
while IFS= read -r elf; do
  while IFS= read -r path; do
    case "$(basename "$path")" in libtroupe.so* | libtroupe_train.so*) continue ;; esac
    if package="$(owner_of "$path")"; then
      packages["$package"]=1
    else
      missing+=("$path (needed by ${elf#"$root"})")
    fi
  done < <(LD_LIBRARY_PATH="$root/usr/$libdir" ldd "$elf" |
    awk '/=> \// {print $3} /^\t\/[^ ]+ \(/ {print $1}')
done < <(find "$root/usr/bin" "$root/usr/$libdir" -maxdepth 1 -type f \( -name troupe -o -name '*.so.*' \))
if [ ${#missing[@]} -gt 0 ]; then
  printf 'build_deb.sh: no Debian package owns %s\n' "${missing[@]}" >&2
  exit 1
fi
depends=""
for package in $(printf '%s\n' "${!packages[@]}" | sort); do
  installed="$(dpkg-query -W -f='${Version}' "$package")"
  depends+="${depends:+, }$package (>= ${installed%-*})"
done

install -d "$root/DEBIAN"
cat > "$root/DEBIAN/control" <<EOF
Package: troupe
Version: $version
Architecture: amd64
Maintainer: Troupe developers <troupe@localhost>
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: $depends
Recommends: libmsgpack-cxx-dev
Suggests: cmake, pkg-config, g++, libtorch-dev, redis-server
Section: devel
Priority: optional
Description: distributed tasks, actors and objects for C++ (Ray-like)
 Troupe runs C++ functions as tasks and classes as actors on a cluster, with a
 shared-memory object store. This package holds the troupe command (head and
 worker nodes, jobs, status), the C++ SDK (libtroupe, libtroupe_train, headers,
 CMake and pkg-config files) and systemd units for head and worker nodes.
EOF
# The shared libraries' symlinks and cache: the ldconfig trigger, as debhelper would add.
echo "activate-noawait ldconfig" > "$root/DEBIAN/triggers"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
  xargs -0 md5sum > DEBIAN/md5sums)

mkdir -p "$out"
dpkg-deb --root-owner-group -Zxz --build "$root" "$out/troupe_${version}_amd64.deb" >/dev/null
echo "$out/troupe_${version}_amd64.deb"
echo "Depends: $depends"
