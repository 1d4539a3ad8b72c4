#!/usr/bin/env bash
# The Debian packages (docs/sdk.md, docs/deploy.md), built by scripts/build_deb.sh --bin-root from
# the libraries and the troupe binary Bazel built (as sdk_test.sh uses them), checked without
# installing anything on this machine:
#   - troupe and troupe-train hold their files (the train library only in troupe-train);
#   - each Depends: covers every library its packaged files load directly (dpkg -S), troupe's
#     names no LibTorch and its troupe binary loads none (ldd); troupe-train depends on LibTorch
#     and on the troupe of its version;
#   - /etc/troupe/head.env and worker.env are shipped as root-only conffiles; both units run as
#     User=troupe with StateDirectory=troupe and read an env file the package ships;
#   - the postinst, run with stand-ins for the commands it calls (recorded, nothing changed),
#     makes the system user and group troupe and /var/lib/troupe owned by them, and keeps a user
#     that exists.
# The full check, installed into a clean Debian 12 root: sdk/deb_install_test.sh (manual).
set -euo pipefail

src="${TEST_SRCDIR:?run under bazel test}/troupe"
tmp="${TEST_TMPDIR:?}"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
version="$(tr -d '[:space:]' < "$src/VERSION")"

deb_dir="$tmp/dist"
(cd "$src" && TMPDIR="$tmp" bash scripts/build_deb.sh --bin-root="$src" --out="$deb_dir" \
  --compression=none)
deb="$deb_dir/troupe_${version}_amd64.deb"
train_deb="$deb_dir/troupe-train_${version}_amd64.deb"
[ -f "$train_deb" ] || fail "no troupe-train package: $train_deb"
info="$(dpkg-deb --info "$deb")"
train_info="$(dpkg-deb --info "$train_deb" || true)"
contents="$(dpkg-deb --contents "$deb" | awk '{print $6}')"
train_contents="$(dpkg-deb --contents "$train_deb" | awk '{print $6}' || true)"
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
  grep -qx "/etc/troupe/$env_file" "$control/conffiles" 2>/dev/null ||
    fail "/etc/troupe/$env_file is no conffile"
  mode="$(dpkg-deb --contents "$deb" | awk -v p="./etc/troupe/$env_file" '$6 == p {print $1}')"
  [ "$mode" = "-rw-------" ] || fail "/etc/troupe/$env_file has mode $mode, want -rw-------"
done
# Check the Depends line against the libraries, independently of build_deb.sh's own loop.
extract="$tmp/deb_root"
dpkg-deb -x "$deb" "$extract"
[ ! -f "$train_deb" ] || dpkg-deb -x "$train_deb" "$extract"
for unit in troupe-head troupe-worker; do
  file="$extract/lib/systemd/system/$unit.service"
  grep -q "^ExecStart=/usr/bin/troupe " "$file" || fail "$unit.service does not run /usr/bin/troupe"
  grep -qx "User=troupe" "$file" || fail "$unit.service does not run as User=troupe"
  grep -qx "Group=troupe" "$file" || fail "$unit.service does not run as Group=troupe"
  grep -qx "StateDirectory=troupe" "$file" || fail "$unit.service has no StateDirectory=troupe"
  env_file="$(sed -n 's/^EnvironmentFile=-\{0,1\}//p' "$file")"
  [ -n "$env_file" ] && [ -f "$extract$env_file" ] ||
    fail "$unit.service reads '$env_file', which the package does not ship"
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
[ -f "$control/postinst" ] || fail "the package has no postinst"
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
[ ! -f "$train_deb" ] ||
  check_depends "$train_depends" "$extract/usr/lib/x86_64-linux-gnu/libtroupe_train.so.$version"

echo
if [ "$failures" -gt 0 ]; then
  echo "deb_test: $failures failure(s)"
  exit 1
fi
echo "deb_test: all checks passed"
