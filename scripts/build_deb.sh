#!/usr/bin/env bash
# Builds the Debian packages of Troupe (docs/sdk.md, docs/deploy.md) into dist/:
#   troupe_<VERSION>_amd64.deb        the troupe command, libtroupe (with its headers, CMake and
#                                     pkg-config files), the systemd units, their settings as
#                                     conffiles (/etc/troupe/head.env, worker.env: commented
#                                     templates) and the system user `troupe` they run as
#                                     (made by the postinst); no LibTorch.
#   troupe-train_<VERSION>_amd64.deb  libtroupe_train (troupe/train*.h, troupe_train.pc), which
#                                     links LibTorch: it depends on troupe and Debian's LibTorch.
#
#   bash scripts/build_deb.sh [--out=DIR] [--bin-root=DIR] [--compression=xz|gzip|none]
#
# It installs the SDK (scripts/install.sh: bazel -c opt, CPU) under /usr in a staging root,
# splits it into the two packages, adds deploy/systemd's units (pointed at /usr/bin/troupe) and
# env files and deploy/debian's maintainer scripts, and packs each with dpkg-deb. Depends: is
# derived, not written by hand: dpkg-shlibdeps finds the Debian package of every library the
# packaged files load (`dpkg -S`) and the minimum version their symbols need; a library no
# package owns stops the build.
# --bin-root=DIR packages artifacts built already (DIR/sdk/libtroupe.so, ..., as in bazel-bin)
# instead of running Bazel: sdk/deb_test.sh does so (with --compression=none: dpkg-deb's xz,
# the default, takes most of the time for an unoptimised binary).
set -euo pipefail
cd "$(dirname "$0")/.."

out="dist" bin_root="" compression="xz"
for arg in "$@"; do
  case "$arg" in
    --out=*) out="${arg#*=}" ;;
    --bin-root=*) bin_root="${arg#*=}" ;;
    --compression=*) compression="${arg#*=}" ;;
    -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
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

# The train library and its headers go to troupe-train: it alone loads LibTorch.
train_root="$stage/troupe-train_${version}_amd64"
train_files=("usr/$libdir/pkgconfig/troupe_train.pc")
for header in src/train/include/troupe/*.h; do
  train_files+=("usr/include/troupe/$(basename "$header")")
done
for file in "$root/usr/$libdir/libtroupe_train.so"*; do
  train_files+=("${file#"$root/"}")
done
for file in "${train_files[@]}"; do
  install -d "$train_root/$(dirname "$file")"
  mv "$root/$file" "$train_root/$file"
done

# systemd units, with the packaged binary's path; their settings as conffiles, root-only (they
# may hold the cluster token; systemd reads them as root).
install -d "$root/lib/systemd/system" "$root/etc/troupe"
for unit in deploy/systemd/*.service; do
  sed 's|/usr/local/bin/troupe|/usr/bin/troupe|g' "$unit" > "$root/lib/systemd/system/$(basename "$unit")"
  chmod 0644 "$root/lib/systemd/system/$(basename "$unit")"
done
install -d "$root/DEBIAN" "$train_root/DEBIAN"
: > "$root/DEBIAN/conffiles"
for env_file in deploy/systemd/*.env; do
  install -m 0600 "$env_file" "$root/etc/troupe/$(basename "$env_file")"
  echo "/etc/troupe/$(basename "$env_file")" >> "$root/DEBIAN/conffiles"
done
install -m 0755 deploy/debian/troupe.postinst "$root/DEBIAN/postinst"
install -m 0755 deploy/debian/troupe.postrm "$root/DEBIAN/postrm"

# Depends: from dpkg-shlibdeps, which looks up the package of every library the packaged
# binaries and libraries load directly (NEEDED, found as the loader would) with `dpkg -S` and
# takes the minimum version from that package's symbols/shlibs files. It fails on a library no
# package owns. DEBIAN/shlibs declares each package's own library; debian/shlibs.local maps them
# for this build (troupe-train needs the troupe of its own version: no ABI promise before 1.0).
major="${version%%.*}"
printf 'libtroupe %s troupe (>= %s)\n' "$major" "$version" > "$root/DEBIAN/shlibs"
printf 'libtroupe_train %s troupe-train (>= %s)\n' "$major" "$version" > "$train_root/DEBIAN/shlibs"
install -d "$stage/shlibdeps/debian"
printf 'libtroupe %s troupe (= %s)\nlibtroupe_train %s troupe-train (= %s)\n' \
  "$major" "$version" "$major" "$version" > "$stage/shlibdeps/debian/shlibs.local"
printf 'Source: troupe\n\nPackage: troupe\nArchitecture: amd64\n\nPackage: troupe-train\nArchitecture: amd64\n' \
  > "$stage/shlibdeps/debian/control"
# shlibs_depends PACKAGE ELF...: the Depends dpkg-shlibdeps derives for the ELF files.
shlibs_depends() {
  local package="$1" out
  shift
  if ! out="$(cd "$stage/shlibdeps" && dpkg-shlibdeps -O -x"$package" -l"$root/usr/$libdir" \
    -l"$train_root/usr/$libdir" "$@" 2> "$stage/shlibdeps.log")"; then
    grep -v '^dpkg-shlibdeps: warning' "$stage/shlibdeps.log" >&2
    echo "build_deb.sh: a file of $package loads a library no Debian package provides" >&2
    return 1
  fi
  out="$(sed -n 's/^shlibs:Depends=//p' <<< "$out")"
  [ -n "$out" ] || { echo "build_deb.sh: dpkg-shlibdeps gave no Depends for $package" >&2; return 1; }
  echo "$out"
}
mapfile -t troupe_elfs < <(find "$root/usr/bin" "$root/usr/$libdir" -maxdepth 1 -type f \
  \( -name troupe -o -name '*.so.*' \))
mapfile -t train_elfs < <(find "$train_root/usr/$libdir" -maxdepth 1 -type f -name '*.so.*')
# passwd: useradd and groupadd, which the postinst runs.
depends="$(shlibs_depends troupe "${troupe_elfs[@]}")"
depends+=", passwd"
train_depends="$(shlibs_depends troupe-train "${train_elfs[@]}")"
case "$depends" in
  *torch* | *c10*)
    echo "build_deb.sh: the troupe package would depend on LibTorch: $depends" >&2
    exit 1
    ;;
esac

cat > "$root/DEBIAN/control" <<EOF
Package: troupe
Version: $version
Architecture: amd64
Maintainer: Troupe developers <troupe@localhost>
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: $depends
Recommends: libmsgpack-cxx-dev
Suggests: troupe-train, cmake, pkg-config, g++, redis-server
Section: devel
Priority: optional
Description: distributed tasks, actors and objects for C++ (Ray-like)
 Troupe runs C++ functions as tasks and classes as actors on a cluster, with a
 shared-memory object store. This package holds the troupe command (head and
 worker nodes, jobs, status), the C++ SDK (libtroupe, headers, CMake and
 pkg-config files) and systemd units for head and worker nodes, which run as
 the system user troupe and read /etc/troupe/head.env and worker.env. The
 train library, which needs LibTorch, is in troupe-train.
EOF
cat > "$train_root/DEBIAN/control" <<EOF
Package: troupe-train
Version: $version
Architecture: amd64
Maintainer: Troupe developers <troupe@localhost>
Installed-Size: $(du -sk --exclude=DEBIAN "$train_root" | cut -f1)
Depends: $train_depends
Recommends: libtorch-dev
Section: devel
Priority: optional
Description: Troupe's train library: data-parallel training over Troupe actors
 libtroupe_train with its headers (troupe/train.h, train_data.h, train_torch.h)
 and pkg-config file: data-parallel training over Troupe worker actors, with
 LibTorch integration. The CMake target Troupe::train comes with it.
EOF

mkdir -p "$out"
for package_root in "$root" "$train_root"; do
  # The shared libraries' symlinks and cache: the ldconfig trigger, as debhelper would add.
  echo "activate-noawait ldconfig" > "$package_root/DEBIAN/triggers"
  (cd "$package_root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
    xargs -0 md5sum > DEBIAN/md5sums)
  dpkg-deb --root-owner-group -Z"$compression" --build "$package_root" \
    "$out/$(basename "$package_root").deb" >/dev/null
  echo "$out/$(basename "$package_root").deb"
done
echo "troupe Depends: $depends"
echo "troupe-train Depends: $train_depends"
