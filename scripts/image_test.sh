#!/usr/bin/env bash
# The container image's test (slow: builds the image; run by hand, not by scripts/test.sh):
#   bash scripts/image_test.sh [path/to/troupe_VERSION_amd64.deb]   (default: the newest in dist/)
# also `bazel test //tests:image_test` (tagged manual; the .deb from dist/).
#
# 1. Builds dist/troupe-image.tar with scripts/build_image.sh.
# 2. Inspects it: entrypoint ["troupe"], user troupe, ports 6380 and 8265, one layer; in its root
#    filesystem (chroot) /usr/bin/troupe exists and `ldd` resolves every library.
# 3. Runs it with podman (private vfs storage under a temp dir, nothing left behind): a head and a
#    worker in two containers on a podman network form a cluster (`troupe status` shows 2 alive
#    nodes, joined with the head's join_command: TLS with the CA pin) and a worker stopped with
#    SIGTERM (`podman stop`) exits 0 and shows DEAD. Then the same with the arguments of
#    deploy/kubernetes/base: a CA made with the image's `troupe tls make-ca`, a head given the
#    token and that CA (--token, --ca-cert/--ca-key mounted read-only, --tls-san=NAME,
#    --bind=0.0.0.0) and a worker given only ca.crt joining by the head's name
#    (`--address=NAME:6380 --ca-cert=...`, as through the Service), all TLS; the worker's
#    readiness probe (`troupe status`) passes and its preStop (`troupe stop`) ends it.
#    If plain podman cannot run containers here,
#    it retries with runc, cgroupfs and no default ulimits (what this sandbox needs); if that
#    fails too it prints the error and runs the same head and worker from the image's root
#    filesystem with chroot instead (loopback, two temp roots).
# TROUPE_IMAGE_TEST_CHROOT=1 skips podman and takes the chroot path. Needs root. Ends with
# "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."

passed=0
failed=0
check() {  # check NAME COMMAND...: runs the command, counts and prints the result
  local name="$1"; shift
  if "$@"; then passed=$((passed + 1)); echo "PASS: $name"
  else failed=$((failed + 1)); echo "FAIL: $name"; fi
}
finish() { echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit $?; }

if [ "$(id -u)" -ne 0 ]; then echo "SKIP: needs root"; echo "0 passed, 0 failed, 1 skipped"; exit 0; fi
command -v podman >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc skopeo >/dev/null
for tool in skopeo runc; do
  command -v "$tool" >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$tool" >/dev/null
done

work="$(mktemp -d /tmp/troupe-image-test.XXXXXX)"
image_tar="$work/troupe-image.tar"
rootfs="$work/rootfs"
podman_flags=(--root "$work/podman/root" --runroot "$work/podman/run" --storage-driver vfs)
network="troupe-image-test-$$"
chroot_pids=()
cleanup() {
  podman "${podman_flags[@]}" rm -f -t 0 troupe-test-head troupe-test-worker troupe-test-head2 \
    troupe-test-worker2 >/dev/null 2>&1
  podman "${podman_flags[@]}" network rm -f "$network" >/dev/null 2>&1
  for pid in "${chroot_pids[@]}"; do kill "$pid" 2>/dev/null; done
  if [ -d "$rootfs/tmp" ]; then
    for root in head worker; do
      chroot "$rootfs" troupe stop --force --temp-dir="/tmp/test-$root" >/dev/null 2>&1
    done
  fi
  for m in "$rootfs/proc" "$rootfs/dev/shm" "$rootfs/dev"; do
    mountpoint -q "$m" 2>/dev/null && umount -l "$m"
  done
  podman "${podman_flags[@]}" rmi -a -f >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

# 1. Build.
if ! TROUPE_IMAGE_OUTPUT="$image_tar" TROUPE_IMAGE_KEEP_ROOTFS="$rootfs" \
    bash scripts/build_image.sh "$@"; then
  echo "FAIL: scripts/build_image.sh"; failed=1; finish
fi
passed=$((passed + 1))
mkdir -p dist && cp "$image_tar" dist/troupe-image.tar

# 2. Inspect.
config="$(skopeo inspect --config "oci-archive:$image_tar")"
layers="$(skopeo inspect "oci-archive:$image_tar" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["Layers"]))')"
config_ok() {
  python3 - "$config" <<'PY'
import json, sys
c = json.loads(sys.argv[1])["config"]
problems = []
if c.get("Entrypoint") != ["troupe"]: problems.append(f"entrypoint {c.get('Entrypoint')}")
if c.get("User") != "troupe": problems.append(f"user {c.get('User')}")
for port in ("6380/tcp", "8265/tcp"):
    if port not in c.get("ExposedPorts", {}): problems.append(f"port {port} not exposed")
if "TROUPE_TEMP_DIR=/tmp/troupe" not in c.get("Env", []): problems.append("TROUPE_TEMP_DIR")
print("image config:", json.dumps(c))
if problems: print("problems:", problems)
sys.exit(1 if problems else 0)
PY
}
check "image config (entrypoint, user, ports, env)" config_ok
check "one layer (got $layers)" test "$layers" = 1
check "/usr/bin/troupe in the image" test -x "$rootfs/usr/bin/troupe"
libraries_resolve() {
  local out; out="$(chroot "$rootfs" ldd /usr/bin/troupe)" || return 1
  echo "$out" | grep -c '=>' | sed 's/^/libraries: /'
  ! echo "$out" | grep 'not found'
}
check "ldd /usr/bin/troupe resolves every library inside the image" libraries_resolve

# 3. Run: podman as is, else with what this sandbox needs, else chroot.
image="localhost/troupe:$(skopeo inspect "oci-archive:$image_tar" | python3 -c \
  'import json,sys; print(json.load(sys.stdin)["Labels"]["org.opencontainers.image.version"])' |
  tr -c 'A-Za-z0-9_.\n-' '-')"
podman "${podman_flags[@]}" load -q -i "$image_tar" >/dev/null
podman_run_error=""
if [ -n "${TROUPE_IMAGE_TEST_CHROOT:-}" ]; then
  podman_run_error="not tried (TROUPE_IMAGE_TEST_CHROOT is set)"
elif ! podman_run_error="$(podman "${podman_flags[@]}" run --rm "$image" --help 2>&1 >/dev/null)"; then
  echo "plain podman cannot run a container here: $podman_run_error"
  printf '[containers]\ndefault_ulimits = []\n' >"$work/containers.conf"
  export CONTAINERS_CONF="$work/containers.conf"
  podman_flags+=(--runtime runc --cgroup-manager cgroupfs)
  if ! podman_run_error="$(podman "${podman_flags[@]}" run --rm "$image" --help 2>&1 >/dev/null)"; then
    echo "podman with runc, cgroupfs, no default ulimits cannot either: $podman_run_error"
    podman_run_error="podman: $podman_run_error"
  else
    echo "podman runs containers with: runc, --cgroup-manager=cgroupfs, default_ulimits = []"
    podman_run_error=""
  fi
fi

alive_nodes() {  # alive_nodes COMMAND...: prints the number of ALIVE nodes `troupe status` sees
  "$@" troupe status --format=json 2>/dev/null |
    python3 -c 'import json,sys; print(sum(n["state"] == "ALIVE" for n in json.load(sys.stdin)["nodes"]))' 2>/dev/null
}
wait_for_nodes() {  # wait_for_nodes N COMMAND...
  local want="$1"; shift
  for _ in $(seq 1 60); do
    [ "$(alive_nodes "$@")" = "$want" ] && return 0
    sleep 0.5
  done
  echo "status: $("$@" troupe status 2>&1)"
  return 1
}

if [ -z "$podman_run_error" ]; then
  P=(podman "${podman_flags[@]}")
  # A subnet used only by this test's bridge; the head gets a fixed address in it.
  "${P[@]}" network create --subnet 10.213.77.0/24 "$network" >/dev/null
  token="troupe_$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')_$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  "${P[@]}" run -d --name troupe-test-head --network "$network" --ip 10.213.77.10 "$image" \
    start --head --block --node-ip-address=10.213.77.10 --num-cpus=1 --token="$token" >/dev/null
  check "head container is up" wait_for_nodes 1 "${P[@]}" exec troupe-test-head
  join="$("${P[@]}" exec troupe-test-head cat /tmp/troupe/session_latest/join_command)"
  check "the head's join command pins its CA (TLS)" grep -q -- '--ca-cert-hash=sha256:' <<<"$join"
  # shellcheck disable=SC2086  # the join command's words are its arguments
  "${P[@]}" run -d --name troupe-test-worker --network "$network" "$image" \
    ${join#troupe } --block --num-cpus=2 >/dev/null
  check "head and worker containers form a cluster of 2 alive nodes" \
    wait_for_nodes 2 "${P[@]}" exec troupe-test-head
  "${P[@]}" exec troupe-test-head troupe status
  "${P[@]}" stop -t 20 troupe-test-worker >/dev/null
  check "the worker stops on SIGTERM with exit code 0" test \
    "$("${P[@]}" inspect troupe-test-worker --format '{{.State.ExitCode}}')" = 0
  check "the stopped worker leaves the cluster" wait_for_nodes 1 "${P[@]}" exec troupe-test-head

  # As deploy/kubernetes/base runs them: the token given to both, the CA of the Secret troupe-ca
  # (made with the image's troupe; the key readable by the image's user only, as the Secret's
  # defaultMode 0400 + fsGroup make it; the worker gets ca.crt only), joined by name over TLS.
  chroot "$rootfs" troupe tls make-ca --out=/tmp/k8s-ca >/dev/null
  ca_dir="$work/k8s-ca"
  cp -r "$rootfs/tmp/k8s-ca" "$ca_dir"
  chown "$(chroot "$rootfs" id -u troupe):$(chroot "$rootfs" id -g troupe)" "$ca_dir/ca.key"
  chmod 0400 "$ca_dir/ca.key"
  "${P[@]}" run -d --name troupe-test-head2 --network "$network" --ip 10.213.77.20 \
    -v "$ca_dir:/etc/troupe/ca:ro" "$image" \
    start --head --block --node-ip-address=10.213.77.20 --bind=0.0.0.0 \
    --ca-cert=/etc/troupe/ca/ca.crt --ca-key=/etc/troupe/ca/ca.key --tls-san=troupe-test-head2 \
    --token="$token" --num-cpus=1 >/dev/null
  "${P[@]}" run -d --name troupe-test-worker2 --network "$network" \
    -v "$ca_dir/ca.crt:/etc/troupe/ca/ca.crt:ro" "$image" \
    start --block --address=troupe-test-head2:6380 --token="$token" --bind=0.0.0.0 \
    --ca-cert=/etc/troupe/ca/ca.crt --connect-timeout-s=60 --num-cpus=2 >/dev/null
  check "Kubernetes-style head and worker (token and CA given, joined by name) form a TLS cluster of 2" \
    wait_for_nodes 2 "${P[@]}" exec troupe-test-head2
  head_uses_given_ca() {
    "${P[@]}" exec troupe-test-head2 cat /tmp/troupe/session_latest/tls/ca.pem | cmp -s - "$ca_dir/ca.crt"
  }
  check "the Kubernetes-style head runs TLS with the given CA" head_uses_given_ca
  readiness_probe() { "${P[@]}" exec troupe-test-worker2 troupe status >/dev/null; }
  check "the worker's readiness probe (troupe status) passes" readiness_probe
  "${P[@]}" exec troupe-test-worker2 troupe stop --grace-period-s=30
  worker_ended() {
    for _ in $(seq 1 40); do
      [ "$("${P[@]}" inspect troupe-test-worker2 --format '{{.State.Running}}')" = false ] && return 0
      sleep 0.5
    done
    return 1
  }
  check "the worker's preStop (troupe stop) ends its container" worker_ended
  check "and it leaves the cluster" wait_for_nodes 1 "${P[@]}" exec troupe-test-head2
else
  echo "SKIPPED: podman run (containers cannot run here): $podman_run_error"
  echo "Running the image's root filesystem with chroot instead."
  mount -t proc proc "$rootfs/proc"
  mount --bind /dev "$rootfs/dev"
  mount -t tmpfs -o size=512m tmpfs "$rootfs/dev/shm"
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  in_image() { chroot --userspec=troupe:troupe "$rootfs" env HOME=/home/troupe "$@"; }
  in_image troupe start --head --temp-dir=/tmp/test-head --port="$port" --http-port=0 --num-cpus=1 >/dev/null
  check "head from the image's root filesystem is up" \
    wait_for_nodes 1 in_image env TROUPE_TEMP_DIR=/tmp/test-head
  in_image troupe start --address="127.0.0.1:$port" --temp-dir=/tmp/test-worker --num-cpus=2 \
    --token="$(in_image cat /tmp/test-head/session_latest/token)" >/dev/null
  check "head and worker from the image form a cluster of 2 alive nodes" \
    wait_for_nodes 2 in_image env TROUPE_TEMP_DIR=/tmp/test-head
fi
finish
