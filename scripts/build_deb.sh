#!/usr/bin/env bash
# Builds the Debian package of Troupe (docs/sdk.md): dist/troupe_<VERSION>_amd64.deb.
#
#   bash scripts/build_deb.sh [--out=DIR] [--bin-root=DIR]
#
# It installs the SDK (scripts/install.sh: bazel -c opt, CPU) under /usr in a staging root —
# bin/troupe, the libraries in lib/x86_64-linux-gnu (with their cmake/ and pkgconfig/ files),
# include/troupe — adds the systemd units of deploy/systemd (pointed at /usr/bin/troupe), and
# packs it with dpkg-deb. Depends: is derived, not written by hand: dpkg-shlibdeps finds the
# Debian package of every library the packaged files load (`dpkg -S`) and the minimum version
# their symbols need; a library no package owns stops the build.
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

# Depends: from dpkg-shlibdeps, which looks up the package of every library the packaged
# binaries and libraries load directly (NEEDED, found as the loader would) with `dpkg -S` and
# takes the minimum version from that package's symbols/shlibs files. It fails on a library no
# package owns. DEBIAN/shlibs declares this package's own libraries (and lets dpkg-shlibdeps
# recognise them).
major="${version%%.*}"
install -d "$root/DEBIAN"
printf 'libtroupe %s troupe (>= %s)\nlibtroupe_train %s troupe (>= %s)\n' \
  "$major" "$version" "$major" "$version" > "$root/DEBIAN/shlibs"
mapfile -t elfs < <(find "$root/usr/bin" "$root/usr/$libdir" -maxdepth 1 -type f \
  \( -name troupe -o -name '*.so.*' \))
install -d "$stage/shlibdeps/debian"
printf 'Source: troupe\n\nPackage: troupe\nArchitecture: amd64\n' > "$stage/shlibdeps/debian/control"
if ! shlibdeps="$(cd "$stage/shlibdeps" &&
  dpkg-shlibdeps -O -xtroupe -l"$root/usr/$libdir" "${elfs[@]}" 2> "$stage/shlibdeps.log")"; then
  grep -v '^dpkg-shlibdeps: warning' "$stage/shlibdeps.log" >&2
  echo "build_deb.sh: a packaged file loads a library no Debian package provides" >&2
  exit 1
fi
depends="$(sed -n 's/^shlibs:Depends=//p' <<< "$shlibdeps")"
[ -n "$depends" ] || { echo "build_deb.sh: dpkg-shlibdeps gave no Depends" >&2; exit 1; }

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
