#!/usr/bin/env bash
# Lays out the SDK install tree from built artifacts (docs/sdk.md). scripts/install.sh calls it
# with bazel-bin; sdk/sdk_test.sh with the test's runfiles; scripts/build_deb.sh with a staging
# directory. It builds nothing.
#
#   sdk/layout.sh --bin-root=DIR --src-root=DIR --prefix=DIR [--destdir=DIR] [--libdir=lib]
#
# --bin-root holds sdk/libtroupe.so, sdk/libtroupe_train.so and src/cli/troupe (bazel-bin or
# runfiles); --src-root holds the repository's sources (VERSION, the public headers, sdk/*.in).
# --prefix is where the tree will live when used (written into troupe.pc); --destdir, when given,
# is where it is written now (a package's staging root). --libdir is relative to the prefix.
#
# Result, under DESTDIR/PREFIX:
#   bin/troupe
#   LIBDIR/libtroupe.so.X.Y.Z        (SONAME libtroupe.so.X; symlinks libtroupe.so.X, libtroupe.so)
#   LIBDIR/libtroupe_train.so.X.Y.Z  (same scheme)
#   LIBDIR/cmake/Troupe/TroupeConfig.cmake, TroupeConfigVersion.cmake
#   LIBDIR/pkgconfig/troupe.pc, troupe_train.pc
#   include/troupe/*.h               (the public headers: api, collective, train)
#   include/troupe/util/*.h          (ActorPool, Queue)
set -euo pipefail

bin_root="" src_root="" prefix="" destdir="" libdir="lib"
for arg in "$@"; do
  case "$arg" in
    --bin-root=*) bin_root="${arg#*=}" ;;
    --src-root=*) src_root="${arg#*=}" ;;
    --prefix=*) prefix="${arg#*=}" ;;
    --destdir=*) destdir="${arg#*=}" ;;
    --libdir=*) libdir="${arg#*=}" ;;
    *) echo "layout.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
if [ -z "$bin_root" ] || [ -z "$src_root" ] || [ -z "$prefix" ]; then
  echo "usage: layout.sh --bin-root=DIR --src-root=DIR --prefix=DIR [--destdir=DIR] [--libdir=lib]" >&2
  exit 2
fi
case "$prefix" in /*) ;; *) echo "layout.sh: --prefix must be absolute" >&2; exit 2 ;; esac

version="$(tr -d '[:space:]' < "$src_root/VERSION")"
major="${version%%.*}"
root="$destdir$prefix"

install -d "$root/bin" "$root/$libdir/cmake/Troupe" "$root/$libdir/pkgconfig" "$root/include/troupe"
install -m 0755 "$bin_root/src/cli/troupe" "$root/bin/troupe"

for name in libtroupe libtroupe_train; do
  install -m 0644 "$bin_root/sdk/$name.so" "$root/$libdir/$name.so.$version"
  ln -sfn "$name.so.$version" "$root/$libdir/$name.so.$major"
  ln -sfn "$name.so.$major" "$root/$libdir/$name.so"
done

install -d "$root/include/troupe/util"
install -m 0644 "$src_root"/src/api/include/troupe/util/*.h "$root/include/troupe/util/"
for header in "$src_root"/src/api/include/troupe/*.h "$src_root"/src/collective/include/troupe/*.h \
  "$src_root"/src/train/include/troupe/*.h; do
  install -m 0644 "$header" "$root/include/troupe/"
done

# The CMake files find the prefix relative to their own place, so the tree can be moved; the
# .pc files name it (pkg-config's convention). A prefix outside the loader's default paths gets
# an rpath in the .pc, so the one-liner's program runs without LD_LIBRARY_PATH.
to_prefix="$(realpath -m --relative-to="$prefix/$libdir/cmake/Troupe" "$prefix")"
rpath=""
case "$prefix/$libdir" in
  /usr/lib | /usr/lib/x86_64-linux-gnu | /lib | /lib/x86_64-linux-gnu) ;;
  *) rpath=" -Wl,-rpath,\${libdir}" ;;
esac
substitute() {
  sed -e "s|@VERSION@|$version|g" -e "s|@MAJOR@|$major|g" -e "s|@PREFIX@|$prefix|g" \
    -e "s|@LIBDIR@|$libdir|g" -e "s|@TO_PREFIX@|$to_prefix|g" -e "s|@RPATH@|$rpath|g" "$1" > "$2"
}
substitute "$src_root/sdk/TroupeConfig.cmake.in" "$root/$libdir/cmake/Troupe/TroupeConfig.cmake"
substitute "$src_root/sdk/TroupeConfigVersion.cmake.in" \
  "$root/$libdir/cmake/Troupe/TroupeConfigVersion.cmake"
substitute "$src_root/sdk/troupe.pc.in" "$root/$libdir/pkgconfig/troupe.pc"
substitute "$src_root/sdk/troupe_train.pc.in" "$root/$libdir/pkgconfig/troupe_train.pc"
