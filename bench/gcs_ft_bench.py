#!/usr/bin/env python3
"""GCS fault tolerance on Redis: Troupe vs Ray, side by side on this machine (issue 13).

Every cluster here gets its own private redis-server (a free port, a temp dir, AOF on, SIGKILLed
and removed when the cluster stops); the in-memory runs start no Redis at all. Both systems are
started with their real CLIs on one node with 2 CPUs.

1. Recovery (lower is better): a fresh Redis-backed cluster per trial. The driver creates an
   actor and calls it (warm-up), then SIGKILLs the GCS process and times until the first actor
   created afterwards has answered a method call.
   - Troupe: the head's supervisor restarts the GCS by itself (`troupe start --head
     --redis-address=...`); the driver only kills the pid in <session>/pids/gcs.pid.
   - Ray: nothing restarts the GCS outside Kubernetes. As Ray's docs describe, the driver reads the
     gcs_server's command line and environment from /proc/<pid> before the kill, waits for the
     process to be gone, and relaunches the same command with the same environment (and the same
     stdout/stderr files) at once: an ideal supervisor, counted in Ray's time.
   Both drivers tolerate the outage: Troupe's default reconnect timeout is 60 s, Ray's is set with
   RAY_gcs_rpc_server_reconnect_timeout_s=120 (drivers and the cluster).
2. Cost of persistence (higher is better): on a fresh cluster with Redis and one without,
   `--actors` actors created in batches of 8, each called once and killed (actors/s), then
   `--pgs` placement groups of one {CPU: 1} bundle, each created, waited for and removed (PGs/s).

Prints a table with the medians and the ratios (Ray/Troupe recovery, redis/mem for each system).

  bash bench/gcs_ft_bench.sh                 # builds, installs Ray if needed, runs this
  python3 bench/gcs_ft_bench.py --trials 5 --actors 200 --pgs 200 [--no-troupe] [--no-ray]
      [--no-throughput] [--rounds N] [--json FILE]
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from bench_common import json_lines

REDIS_SERVER = "/usr/bin/redis-server"

RAY_RECOVERY_DRIVER = r'''
import os, signal, socket, subprocess, sys, threading, time
import ray

ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)

@ray.remote
class Echo:
    def ping(self):
        return 1

warm = Echo.remote()
assert ray.get(warm.ping.remote(), timeout=120) == 1

marker = "--gcs_server_port=%s" % sys.argv[2]
pid = None
for entry in os.listdir("/proc"):
    if entry.isdigit():
        try:
            argv = open("/proc/%s/cmdline" % entry, "rb").read().decode().split("\0")[:-1]
        except OSError:
            continue
        if argv and argv[0].endswith("/gcs_server") and marker in argv:
            pid = int(entry)
            break
assert pid, "gcs_server not found"
environ = open("/proc/%d/environ" % pid, "rb").read().decode()
env = dict(kv.split("=", 1) for kv in environ.split("\0") if "=" in kv)
stdout_path = os.readlink("/proc/%d/fd/1" % pid)
stderr_path = os.readlink("/proc/%d/fd/2" % pid)

start = time.monotonic()
os.kill(pid, signal.SIGKILL)
while True:  # gone (or a zombie): its port is free again
    try:
        if open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0] == "Z":
            break
    except OSError:
        break
    time.sleep(0.001)
with open(stdout_path, "ab") as out, open(stderr_path, "ab") as err:
    gcs = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                           start_new_session=True)
relaunched = time.monotonic() - start
listening = None

def watch_port():  # the same breakdown as Troupe's, from the side
    global listening
    while listening is None and time.monotonic() - start < 60:
        try:
            socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=0.1).close()
            listening = time.monotonic() - start
        except OSError:
            time.sleep(0.002)

watcher = threading.Thread(target=watch_port, daemon=True)
watcher.start()
actor = Echo.remote()
assert ray.get(actor.ping.remote(), timeout=300) == 1
seconds = time.monotonic() - start
watcher.join()
# The actor made before the kill survived the outage (the restarted GCS reloaded it from Redis).
assert ray.get(warm.ping.remote(), timeout=60) == 1
print('{"metric": "gcs_kill_to_actor_created", "value": %.3f, "unit": "s", '
      '"restarted_after": %.3f, "listening_after": %.3f, "new_gcs_pid": %d}'
      % (seconds, relaunched, listening, gcs.pid))
'''

RAY_THROUGHPUT_DRIVER = r'''
import sys, time
import ray
from ray.util.placement_group import placement_group, remove_placement_group

ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
actors, pgs = int(sys.argv[2]), int(sys.argv[3])

@ray.remote
class Echo:
    def ping(self):
        return 1

def actor_batch(n):
    batch = [Echo.remote() for _ in range(n)]
    ray.get([a.ping.remote() for a in batch])
    for a in batch:
        ray.kill(a)

def pg_cycle():
    pg = placement_group([{"CPU": 1}])
    # pg.wait (a GCS call), as Ray's own benchmark (ray_perf.py) and Troupe's side wait;
    # ray.get(pg.ready()) would also run a task in the group every cycle.
    if not pg.wait(timeout_seconds=60):
        raise SystemExit("placement group not created within 60 s")
    remove_placement_group(pg)

actor_batch(8)  # warm-up
pg_cycle()
start = time.monotonic()
done = 0
while done < actors:
    n = min(8, actors - done)
    actor_batch(n)
    done += n
print('{"metric": "actor_creations_per_second", "value": %.3f, "unit": "per_second"}'
      % (actors / (time.monotonic() - start)))
start = time.monotonic()
for _ in range(pgs):
    pg_cycle()
print('{"metric": "placement_group_create_removal_per_second", "value": %.3f, '
      '"unit": "per_second"}' % (pgs / (time.monotonic() - start)))
'''


def run(cmd, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    """A private redis-server: free port, its own dir, AOF on (appendfsync everysec, the
    default), no RDB snapshots. stop() SIGKILLs it (only this pid) and removes the dir."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="gcs-ft-redis-")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--appendonly", "yes", "--save", "", "--logfile", os.path.join(self.dir, "redis.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start (see %s)" % self.dir)
            time.sleep(0.02)

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------- Ray

RAY_ENV = {"RAY_gcs_rpc_server_reconnect_timeout_s": "120", "RAY_USAGE_STATS_ENABLED": "0"}


def ray_cluster(args, redis):
    """Starts a one-node Ray cluster (with GCS FT on `redis` if given); returns its address."""
    port = free_port()
    env = dict(os.environ, **RAY_ENV)
    if redis:
        env["RAY_REDIS_ADDRESS"] = redis.address
        env["RAY_external_storage_namespace"] = uuid.uuid4().hex
    result = run([args.ray, "start", "--head", "--port=%d" % port, "--num-cpus=2",
                  "--node-ip-address=127.0.0.1", "--include-dashboard=false",
                  "--disable-usage-stats"], env=env)
    if result.returncode != 0:
        raise RuntimeError(result.stdout + result.stderr)
    return port


def ray_stop(args):
    # Kills every Ray process of this user: nothing else runs Ray on this machine.
    run([args.ray, "stop", "--force"])


def ray_recovery_once(args):
    redis = Redis()
    try:
        port = ray_cluster(args, redis)
        env = dict(os.environ, **RAY_ENV)
        line = json_lines([args.python, "-c", RAY_RECOVERY_DRIVER, "127.0.0.1:%d" % port,
                           str(port)], env=env)[0]
        print("  ray recovery: %.3f s (gcs relaunched after %.3f s, listening after %.3f s)"
              % (line["value"], line["restarted_after"], line["listening_after"]), flush=True)
        return line
    finally:
        ray_stop(args)
        redis.stop()


def ray_throughput(args, with_redis):
    redis = Redis() if with_redis else None
    try:
        port = ray_cluster(args, redis)
        env = dict(os.environ, **RAY_ENV)
        lines = json_lines([args.python, "-c", RAY_THROUGHPUT_DRIVER, "127.0.0.1:%d" % port,
                            str(args.actors), str(args.pgs)], env=env)
        result = {l["metric"]: l["value"] for l in lines}
        print("  ray-%s: %s" % ("redis" if with_redis else "mem", result), flush=True)
        return result
    finally:
        ray_stop(args)
        if redis:
            redis.stop()


# ------------------------------------------------------------------------------------- Troupe

def troupe_cluster(args, redis):
    """Starts a one-node Troupe head (GCS on `redis` if given, restarted by the head's supervisor)
    under a fresh temp dir; returns (temp dir, env for a driver)."""
    temp_root = tempfile.mkdtemp(prefix="troupe-gcs-ft-")
    port = free_port()
    cmd = [args.troupe, "start", "--head", "--port=%d" % port, "--num-cpus=2", "--http-port=0",
           "--temp-dir=" + temp_root]
    if redis:
        cmd.append("--redis-address=" + redis.address)
    result = run(cmd)
    if result.returncode != 0:
        run([args.troupe, "stop", "--force", "--temp-dir=" + temp_root])
        shutil.rmtree(temp_root, ignore_errors=True)
        raise RuntimeError(" ".join(cmd) + "\n" + result.stdout + result.stderr)
    session = os.path.join(temp_root, "session_latest")
    with open(os.path.join(session, "token")) as f:
        token = f.read().strip()
    env = dict(os.environ, TROUPE_ADDRESS="127.0.0.1:%d" % port, TROUPE_TOKEN=token)
    return temp_root, env


def troupe_stop(args, temp_root):
    run([args.troupe, "stop", "--force", "--temp-dir=" + temp_root])
    shutil.rmtree(temp_root, ignore_errors=True)


def troupe_recovery_once(args):
    redis = Redis()
    temp_root = None
    try:
        temp_root, env = troupe_cluster(args, redis)
        pid_file = os.path.join(temp_root, "session_latest", "pids", "gcs.pid")
        line = json_lines([args.bench, "--mode=recovery", "--gcs-pid-file=" + pid_file],
                          env=env)[0]
        print("  troupe recovery: %.3f s (gcs pid %d -> %d, restarted after %.3f s, listening "
              "after %.3f s, %d failed attempts)"
              % (line["value"], line["old_gcs_pid"], line["new_gcs_pid"],
                 line["restarted_after"], line["listening_after"], line["failed_attempts"]),
              flush=True)
        return line
    finally:
        if temp_root:
            troupe_stop(args, temp_root)
        redis.stop()


def troupe_throughput(args, with_redis):
    redis = Redis() if with_redis else None
    temp_root = None
    try:
        temp_root, env = troupe_cluster(args, redis)
        lines = json_lines([args.bench, "--mode=throughput", "--actors=%d" % args.actors,
                            "--pgs=%d" % args.pgs], env=env)
        result = {l["metric"]: l["value"] for l in lines}
        print("  troupe-%s: %s" % ("redis" if with_redis else "mem", result), flush=True)
        return result
    finally:
        if temp_root:
            troupe_stop(args, temp_root)
        if redis:
            redis.stop()


# --------------------------------------------------------------------------------------- main

def measure(args, name, recovery_once, throughput):
    out = {}
    print("%s: %d recovery trials" % (name, args.trials), flush=True)
    out["recovery_details"] = [recovery_once(args) for _ in range(args.trials)]
    out["recovery"] = [line["value"] for line in out["recovery_details"]]
    if args.no_throughput:
        return out
    print("%s: throughput, %d actors and %d placement groups per run" % (name, args.actors, args.pgs),
          flush=True)
    # Alternating rounds (mem, redis, mem, redis, ...), each metric's median over the rounds: a
    # 2-core machine's run-to-run noise (about 15%) is as large as the effect measured.
    rounds = {"mem": [], "redis": []}
    for _ in range(args.rounds):
        rounds["mem"].append(throughput(args, False))
        rounds["redis"].append(throughput(args, True))
    for mode, runs in rounds.items():
        out[mode] = {metric: statistics.median(run[metric] for run in runs) for metric in runs[0]}
        out[mode + "_rounds"] = runs
    return out


def fmt(value, spec):
    return "pending" if value is None else spec % value


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--troupe", default="bazel-bin/src/cli/troupe")
    parser.add_argument("--bench", default="bazel-bin/bench/gcs_ft_bench")
    venv = os.path.expanduser("~/.cache/troupe-bench-venv/bin")
    parser.add_argument("--ray", default=os.path.join(venv, "ray"))
    parser.add_argument("--python", default=os.path.join(venv, "python"))
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--actors", type=int, default=200)
    parser.add_argument("--pgs", type=int, default=200)
    parser.add_argument("--no-troupe", action="store_true")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--no-throughput", action="store_true", help="recovery trials only")
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds per mode")
    parser.add_argument("--json", help="also write every figure to this file")
    args = parser.parse_args()

    results = {}
    if not args.no_troupe:
        results["troupe"] = measure(args, "troupe", troupe_recovery_once, troupe_throughput)
    if not args.no_ray:
        results["ray"] = measure(args, "ray", ray_recovery_once, ray_throughput)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)

    def get(system, *path):
        value = results.get(system)
        for key in path:
            if value is None:
                return None
            value = value.get(key) if isinstance(value, dict) else None
        return value

    def median_recovery(system):
        trials = get(system, "recovery")
        return statistics.median(trials) if trials else None

    def ratio(a, b):
        return None if a is None or b is None else a / b

    print()
    print("%-52s %12s %12s %10s" % ("metric", "troupe", "ray", "ray/troupe"))
    t, r = median_recovery("troupe"), median_recovery("ray")
    print("%-52s %12s %12s %10s" % ("GCS SIGKILL -> first actor answers (s, median of %d)"
                                    % args.trials, fmt(t, "%.3f"), fmt(r, "%.3f"),
                                    fmt(ratio(r, t), "%.1fx")))
    for system in ("troupe", "ray"):
        details = get(system, "recovery_details")
        if details:
            print("  %s trials: %s; medians: GCS process back after %.3f s, its port accepting "
                  "after %.3f s" % (system, ", ".join("%.3f" % d["value"] for d in details),
                                    statistics.median(d["restarted_after"] for d in details),
                                    statistics.median(d["listening_after"] for d in details)))
    print()
    print("%-52s %12s %12s %10s" % ("throughput (/s, higher is better)", "troupe", "ray",
                                    "troupe/ray"))
    for metric in ("actor_creations_per_second", "placement_group_create_removal_per_second"):
        for mode in ("mem", "redis"):
            tv, rv = get("troupe", mode, metric), get("ray", mode, metric)
            print("%-52s %12s %12s %10s" % ("%s (%s)" % (metric, mode), fmt(tv, "%.1f"),
                                            fmt(rv, "%.2f"), fmt(ratio(tv, rv), "%.1fx")))
    print()
    print("Ratios:")
    print("  recovery Ray/Troupe: %s (goal >= 5x)" % fmt(ratio(r, t), "%.1fx"))
    for system in ("troupe", "ray"):
        for metric in ("actor_creations_per_second", "placement_group_create_removal_per_second"):
            q = ratio(get(system, "redis", metric), get(system, "mem", metric))
            print("  %s %s redis/mem: %s%s" % (
                system, metric, fmt(q, "%.2f"),
                "" if q is None else " (Redis costs %.0f%%%s)" % (
                    (1 - q) * 100, "; goal <= 20%" if system == "troupe" else "")))


if __name__ == "__main__":
    sys.exit(main())
