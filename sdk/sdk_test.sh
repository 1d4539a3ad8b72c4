#!/usr/bin/env bash
# The SDK as a user gets it (docs/sdk.md): lays out the install tree from the built libraries
# (sdk/layout.sh), then, against that tree and never against bazel-bin:
#   1. the libraries: SONAME, version symlinks, and only public symbols exported;
#   2. every installed header compiles on its own (nothing internal is missing);
#   3. examples/cmake_project builds with find_package(Troupe) and runs tasks, an actor,
#      Put/Get, a two-worker train run and a two-worker LibTorch run on an embedded cluster;
#   4. the pkg-config one-liner of docs/sdk.md builds the same program, which runs;
#   5. bin/troupe --version agrees with VERSION.
# The Debian packages are checked by sdk/deb_test.sh (//sdk:deb_test).
# The full check of the .deb — installed into a clean Debian 12 root, `troupe start --head`
# inside — is sdk/deb_install_test.sh (manual: slow, needs root and the Debian mirror).
set -euo pipefail

src="${TEST_SRCDIR:?run under bazel test}/troupe"
tmp="${TEST_TMPDIR:?}"
prefix="$tmp/prefix"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
step() { echo; echo "== $*"; }

version="$(tr -d '[:space:]' < "$src/VERSION")"
major="${version%%.*}"

step "layout under $prefix"
bash "$src/sdk/layout.sh" --bin-root="$src" --src-root="$src" --prefix="$prefix"

step "1. libraries: SONAME, symlinks, exported symbols"
for name in libtroupe libtroupe_train; do
  real="$prefix/lib/$name.so.$version"
  soname="$(readelf -d "$real" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')"
  [ "$soname" = "$name.so.$major" ] || fail "$name SONAME is '$soname', want $name.so.$major"
  [ "$(readlink "$prefix/lib/$name.so.$major")" = "$name.so.$version" ] || fail "$name.so.$major link"
  [ "$(readlink "$prefix/lib/$name.so")" = "$name.so.$major" ] || fail "$name.so link"
  exported="$(nm -D --defined-only "$real" | grep -v ' A ' | c++filt)"
  count="$(printf '%s\n' "$exported" | grep -c .)"
  echo "$name: $count exported symbols"
  # Names only (arguments stripped): the runtime's, the daemons' and generated code's classes,
  # and anything outside troupe::, must stay hidden.
  names="$(printf '%s\n' "$exported" | cut -d' ' -f3- | sed 's/(.*//; s/@.*//')"
  leaked="$(grep -E 'troupe::([a-z_]+::)*(CoreWorker|GcsServer|Raylet|ObjectStore|TrainWorker|CheckpointStore|Mesh|CpuBackend|Group|DistributedModel::Bucket)\b' <<< "$names" || true)"
  [ -z "$leaked" ] || fail "$name exports internal symbols:"$'\n'"$(echo "$leaked" | head -5)"
  # __cxa_throw: libtroupe.so wraps the C++ runtime's throw to record task exceptions' stacks.
  non_troupe="$(grep -vE '^(((typeinfo|typeinfo name|vtable) for )?troupe::|__cxa_throw$)' <<< "$names" || true)"
  [ -z "$non_troupe" ] || fail "$name exports symbols outside troupe::"$'\n'"$(echo "$non_troupe" | head -5)"
  [ "$count" -gt 0 ] && [ "$count" -lt 200 ] || fail "$name exports $count symbols (expected 1..199)"
done
grep -q "NEEDED.*\[libtroupe.so.$major\]" <<< "$(readelf -d "$prefix/lib/libtroupe_train.so.$version")" ||
  fail "libtroupe_train.so does not load libtroupe.so.$major (it must share its runtime)"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
step "2. each installed header compiles alone"
for header in "$prefix"/include/troupe/*.h; do
  flags="$(pkg-config --cflags troupe)"
  case "$header" in
    *train_torch.h) flags+=" $(pkg-config --cflags troupe_train)" ;;
    *async.h) flags+=" -std=c++20" ;;  # async actors' coroutines (it says so under C++17)
  esac
  # shellcheck disable=SC2086
  echo "#include \"troupe/$(basename "$header")\"" | g++ -fsyntax-only -x c++ $flags - ||
    fail "troupe/$(basename "$header") does not compile alone"
done
echo "$(ls "$prefix"/include/troupe/*.h | wc -l) headers checked"

step "3. examples/cmake_project with find_package(Troupe)"
cmake -S "$src/examples/cmake_project" -B "$tmp/cmake_build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Debug > "$tmp/cmake_configure.log" || { cat "$tmp/cmake_configure.log"; exit 1; }
cmake --build "$tmp/cmake_build" -j2 > "$tmp/cmake_build.log" 2>&1 || { cat "$tmp/cmake_build.log"; exit 1; }
grep -q "libtroupe.so.$major => $prefix/lib/" <<< "$(ldd "$tmp/cmake_build/troupe_app")" ||
  fail "troupe_app does not load the installed libtroupe: $(ldd "$tmp/cmake_build/troupe_app" | grep troupe)"
"$tmp/cmake_build/troupe_app" > "$tmp/app.out" 2> "$tmp/app.err" || fail "troupe_app exited with $?"
cat "$tmp/app.out"
grep -q "all results right" "$tmp/app.out" || { fail "troupe_app's results"; cat "$tmp/app.err"; }
"$tmp/cmake_build/troupe_train_check" "$tmp/train_results" > "$tmp/train.out" 2> "$tmp/train.err" ||
  { fail "troupe_train_check exited with $?"; cat "$tmp/train.err"; }
cat "$tmp/train.out"
if [ -x "$tmp/cmake_build/troupe_torch_check" ]; then
  "$tmp/cmake_build/troupe_torch_check" "$tmp/torch_results" > "$tmp/torch.out" 2> "$tmp/torch.err" ||
    { fail "troupe_torch_check exited with $?"; cat "$tmp/torch.err"; }
  cat "$tmp/torch.out"
else
  fail "troupe_torch_check was not built (is libtorch-dev installed?)"
fi

step "4. the pkg-config one-liner"
(cd "$src/examples/cmake_project" &&
  g++ main.cc $(pkg-config --cflags --libs troupe) -o "$tmp/app_pkg_config") ||
  fail "g++ main.cc \$(pkg-config --cflags --libs troupe) failed"
if [ -x "$tmp/app_pkg_config" ]; then
  grep -q "all results right" <<< "$("$tmp/app_pkg_config" 2> "$tmp/app_pkg_config.err")" ||
    { fail "the pkg-config build's results"; cat "$tmp/app_pkg_config.err"; }
fi

step "5. one version"
cli_version="$("$prefix/bin/troupe" --version)"
[ "$cli_version" = "troupe $version" ] || fail "bin/troupe --version says '$cli_version', VERSION says $version"

echo
if [ "$failures" -gt 0 ]; then
  echo "sdk_test: $failures failure(s)"
  exit 1
fi
echo "sdk_test: all checks passed"
