#!/usr/bin/env bash
# The SDK as a user gets it (docs/sdk.md): lays out the install tree from the built libraries
# (sdk/layout.sh), then, against that tree and never against bazel-bin:
#   1. the libraries: SONAME, version symlinks, and only public symbols exported;
#   2. every installed header compiles on its own (nothing internal is missing);
#   3. examples/cmake_project builds with find_package(Troupe) and runs tasks, an actor,
#      Put/Get, a two-worker train run and a two-worker LibTorch run on an embedded cluster;
#   4. the pkg-config one-liner of docs/sdk.md builds the same program, which runs;
#   5. the .debs (scripts/build_deb.sh --bin-root): troupe and troupe-train, their files, a
#      Depends: line that covers every library the packaged binaries and libraries load directly
#      and, for troupe, no LibTorch; the units run as User=troupe and read env files the package
#      ships as root-only conffiles; the postinst makes the system user (stand-in commands);
#   6. bin/troupe --version agrees with VERSION.
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
  non_troupe="$(grep -vE '^((typeinfo|typeinfo name|vtable) for )?troupe::' <<< "$names" || true)"
  [ -z "$non_troupe" ] || fail "$name exports symbols outside troupe::"$'\n'"$(echo "$non_troupe" | head -5)"
  [ "$count" -gt 0 ] && [ "$count" -lt 200 ] || fail "$name exports $count symbols (expected 1..199)"
done
grep -q "NEEDED.*\[libtroupe.so.$major\]" <<< "$(readelf -d "$prefix/lib/libtroupe_train.so.$version")" ||
  fail "libtroupe_train.so does not load libtroupe.so.$major (it must share its runtime)"

export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
step "2. each installed header compiles alone"
for header in "$prefix"/include/troupe/*.h; do
  flags="$(pkg-config --cflags troupe)"
  case "$header" in *train_torch.h) flags+=" $(pkg-config --cflags troupe_train)" ;; esac
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

step "5. the .debs"
deb_dir="$tmp/dist"
(cd "$src" && TMPDIR="$tmp" bash scripts/build_deb.sh --bin-root="$src" --out="$deb_dir")
deb="$deb_dir/troupe_${version}_amd64.deb"
train_deb="$deb_dir/troupe-train_${version}_amd64.deb"
info="$(dpkg-deb --info "$deb")"
train_info="$(dpkg-deb --info "$train_deb")"
contents="$(dpkg-deb --contents "$deb" | awk '{print $6}')"
train_contents="$(dpkg-deb --contents "$train_deb" | awk '{print $6}')"
for field in "Package: troupe" "Version: $version" "Architecture: amd64"; do
  grep -q "^ $field\$" <<< "$info" || fail ".deb control lacks '$field'"
done
for field in "Package: troupe-train" "Version: $version" "Architecture: amd64"; do
  grep -q "^ $field\$" <<< "$train_info" || fail "troupe-train's control lacks '$field'"
done
for path in ./usr/bin/troupe ./usr/lib/x86_64-linux-gnu/libtroupe.so.$version \
  ./usr/include/troupe/api.h ./usr/include/troupe/collective.h \
  ./usr/lib/x86_64-linux-gnu/cmake/Troupe/TroupeConfig.cmake \
  ./usr/lib/x86_64-linux-gnu/pkgconfig/troupe.pc ./lib/systemd/system/troupe-head.service \
  ./lib/systemd/system/troupe-worker.service ./etc/troupe/head.env ./etc/troupe/worker.env; do
  grep -qx "$path" <<< "$contents" || fail ".deb lacks $path"
done
for path in ./usr/lib/x86_64-linux-gnu/libtroupe_train.so.$version ./usr/include/troupe/train.h \
  ./usr/include/troupe/train_torch.h ./usr/lib/x86_64-linux-gnu/pkgconfig/troupe_train.pc; do
  grep -qx "$path" <<< "$train_contents" || fail "troupe-train lacks $path"
  ! grep -qx "$path" <<< "$contents" || fail "the troupe package holds $path (troupe-train's)"
done
depends="$(sed -n 's/^ Depends: //p' <<< "$info")"
train_depends="$(sed -n 's/^ Depends: //p' <<< "$train_info")"
[ -n "$depends" ] || fail ".deb has no Depends"
# The CLI and libtroupe need no LibTorch (131 MB): only troupe-train depends on it.
! grep -qiE 'torch|c10' <<< "$depends" || fail "the troupe package depends on LibTorch: $depends"
grep -q 'libtorch' <<< "$train_depends" || fail "troupe-train does not depend on LibTorch: $train_depends"
[[ ", $train_depends," == *", troupe (= $version),"* ]] ||
  fail "troupe-train does not depend on troupe (= $version): $train_depends"
# The settings of the units are conffiles, root-only: they hold the cluster token.
control="$tmp/deb_control"
dpkg-deb --control "$deb" "$control"
for env_file in head.env worker.env; do
  grep -qx "/etc/troupe/$env_file" "$control/conffiles" || fail "/etc/troupe/$env_file is no conffile"
  mode="$(dpkg-deb --contents "$deb" | awk -v p="./etc/troupe/$env_file" '$6 == p {print $1}')"
  [ "$mode" = "-rw-------" ] || fail "/etc/troupe/$env_file has mode $mode, want -rw-------"
done
# Check the Depends line against the libraries, independently of build_deb.sh's own loop.
extract="$tmp/deb_root"
dpkg-deb -x "$deb" "$extract"
dpkg-deb -x "$train_deb" "$extract"
for unit in troupe-head troupe-worker; do
  file="$extract/lib/systemd/system/$unit.service"
  grep -q "^ExecStart=/usr/bin/troupe " "$file" || fail "$unit.service does not run /usr/bin/troupe"
  grep -qx "User=troupe" "$file" || fail "$unit.service does not run as User=troupe"
  grep -qx "Group=troupe" "$file" || fail "$unit.service does not run as Group=troupe"
  grep -qx "StateDirectory=troupe" "$file" || fail "$unit.service has no StateDirectory=troupe"
  env_file="$(sed -n 's/^EnvironmentFile=-\{0,1\}//p' "$file")"
  [ -f "$extract$env_file" ] || fail "$unit.service reads $env_file, which the package does not ship"
done
! LD_LIBRARY_PATH="$extract/usr/lib/x86_64-linux-gnu" ldd "$extract/usr/bin/troupe" |
  grep -iE 'libtorch|libc10' || fail "the packaged troupe loads LibTorch"
# The postinst, with stand-ins for the commands it runs (recorded, nothing changed on this
# machine): a new user and group `troupe`, /var/lib/troupe owned by it; an existing user is kept.
stubs="$tmp/stubs"
mkdir -p "$stubs"
for command in groupadd useradd install systemctl; do
  printf '#!/bin/sh\necho "%s $*" >> "%s/calls"\n' "$command" "$stubs" > "$stubs/$command"
done
printf '#!/bin/sh\nexit "${GETENT_STATUS:-2}"\n' > "$stubs/getent"
chmod +x "$stubs"/*
PATH="$stubs:$PATH" sh "$control/postinst" configure || fail "postinst configure exited with $?"
calls="$(cat "$stubs/calls" 2>/dev/null || true)"
grep -qx "groupadd --system troupe" <<< "$calls" || fail "postinst made no group troupe: $calls"
grep -qE '^useradd --system .*--home-dir /var/lib/troupe .*--shell /usr/sbin/nologin .* troupe$' \
  <<< "$calls" || fail "postinst made no system user troupe: $calls"
grep -qx "install -d -o troupe -g troupe -m 0750 /var/lib/troupe" <<< "$calls" ||
  fail "postinst did not make /var/lib/troupe for troupe: $calls"
rm -f "$stubs/calls"
GETENT_STATUS=0 PATH="$stubs:$PATH" sh "$control/postinst" configure || fail "postinst (again) exited with $?"
! grep -qE '^(useradd|groupadd)' "$stubs/calls" || fail "postinst re-made an existing user: $(cat "$stubs/calls")"
# Every library a packaged file loads directly (NEEDED, found by ldd), mapped to its package by
# one `dpkg -S`, must be in its package's Depends (what those libraries load is their packages'
# business).
check_depends() {  # check_depends DEPENDS ELF...
  local package_depends="$1" elf needed resolved path lib package
  shift
  local libs=()
  for elf in "$@"; do
    resolved="$(LD_LIBRARY_PATH="$extract/usr/lib/x86_64-linux-gnu" ldd "$elf")"
    for needed in $(readelf -d "$elf" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
      case "$needed" in libtroupe*) continue ;; esac
      path="$(awk -v n="$needed" '$1 == n && $3 ~ /^\// {print $3} $1 ~ "/" n "$" {print $1}' <<< "$resolved" | head -n1)"
      [ -n "$path" ] || { fail "$(basename "$elf") needs $needed, which ldd does not find"; continue; }
      libs+=("$(realpath "$path")")
    done
  done
  mapfile -t libs < <(printf '%s\n' "${libs[@]}" | sort -u)
  local owners covered=0
  owners="$(dpkg -S "${libs[@]}" "${libs[@]#/usr}" 2>/dev/null | grep -v '^diversion' || true)"
  for lib in "${libs[@]}"; do
    package="$(awk -F': ' -v a="$lib" -v b="${lib#/usr}" '$2 == a || $2 == b {print $1; exit}' <<< "$owners")"
    package="${package%%,*}"
    package="${package%%:*}"
    if [ -z "$package" ]; then
      fail "$lib belongs to no package"
    elif [[ ", $package_depends," != *", $package "* && ", $package_depends," != *", $package,"* ]]; then
      fail "Depends lacks $package (for $lib)"
    else
      covered=$((covered + 1))
    fi
  done
  echo "${#libs[@]} directly loaded libraries, $covered covered by Depends: $package_depends"
}
check_depends "$depends" "$extract/usr/bin/troupe" \
  "$extract/usr/lib/x86_64-linux-gnu/libtroupe.so.$version"
check_depends "$train_depends" "$extract/usr/lib/x86_64-linux-gnu/libtroupe_train.so.$version"

step "6. one version"
cli_version="$("$prefix/bin/troupe" --version)"
[ "$cli_version" = "troupe $version" ] || fail "bin/troupe --version says '$cli_version', VERSION says $version"

echo
if [ "$failures" -gt 0 ]; then
  echo "sdk_test: $failures failure(s)"
  exit 1
fi
echo "sdk_test: all checks passed"
