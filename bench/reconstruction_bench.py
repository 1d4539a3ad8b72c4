#!/usr/bin/env python3
"""Node death to a reconstructed object in `get`: Troupe vs Ray, side by side on this machine.

Each iteration starts a fresh two-node cluster (head with 1 CPU + one worker node with 2) with the
real CLI, runs a task pinned softly to the worker node that returns a 10 MB object, waits until
the object exists, SIGKILLs the worker node's raylet and times `get` of the object: death
detection, the owner finding every copy gone, the task re-run on the head node, the read. Both
systems run with their default health-check settings. The iterations alternate (Troupe, Ray,
Troupe, Ray, ...); prints each side's figures, the medians and the median of the per-iteration
Ray/Troupe ratios with their range, and the 1-minute load average at each side's start.

  bazel build -c opt //src/cli:troupe //bench:reconstruction_bench
  bash bench/setup_peers.sh
  python3 bench/reconstruction_bench.py --iterations 3
  python3 bench/reconstruction_bench.py --quick --json results.json   # 1 iteration

--json FILE writes the results file of bench/bench_common.py (bench/run_all.sh collects them):
the row node_death_to_reconstructed_get in seconds (lower is better), peer ray_python; each
iteration's figures and load averages in "raw".
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from bench_common import (alternate, json_lines, load_average, stop_processes, summary_row,
                          use_ray_token_auth, write_results)

HERE = os.path.dirname(os.path.abspath(__file__))

RAY_DRIVER = r'''
import os, sys, time, signal
import numpy as np
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init(address=sys.argv[1])
node = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("doomed")][0]

@ray.remote
def make_bytes(size):
    return np.full(size, 7, dtype=np.uint8)

ref = make_bytes.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
    node["NodeID"], soft=True)).remote(int(sys.argv[2]))
ray.wait([ref], fetch_local=False)
marker = "--node_id=%s" % node["NodeID"]
pid = None
for entry in os.listdir("/proc"):
    if entry.isdigit():
        try:
            cmdline = open("/proc/%s/cmdline" % entry, "rb").read().decode(errors="replace")
        except OSError:
            continue
        if cmdline.split("\0")[0].endswith("/raylet") and marker in cmdline:
            pid = int(entry)
assert pid, "raylet of the worker node not found"
start = time.monotonic()
os.kill(pid, signal.SIGKILL)
value = ray.get(ref, timeout=300)
seconds = time.monotonic() - start
assert value.size == int(sys.argv[2])
print('{"metric": "node_death_to_reconstructed_get", "value": %.3f, "unit": "s"}' % seconds)
'''


def run(cmd, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def troupe_once(troupe, bench, size):
    temp_root = tempfile.mkdtemp(prefix="troupe-reconstruction-")
    common = ["--temp-dir=" + temp_root]
    port = free_port()
    try:
        for cmd in ([troupe, "start", "--head", "--port=%d" % port, "--num-cpus=1",
                     "--http-port=0"] + common,
                    [troupe, "start", "--address=127.0.0.1:%d" % port, "--num-cpus=2"] + common):
            result = run(cmd)
            if result.returncode != 0:
                raise RuntimeError(result.stdout + result.stderr)
        status = json.loads(run([troupe, "status", "--format=json"] + common).stdout)
        worker = [n for n in status["nodes"] if not n["is_head"] and n["state"] == "ALIVE"][0]
        with open(os.path.join(temp_root, "session_latest", "token")) as f:
            token = f.read().strip()
        env = dict(os.environ, TROUPE_ADDRESS="127.0.0.1:%d" % port, TROUPE_TOKEN=token)
        lines = json_lines([bench, "--node=" + worker["node_id"],
                            "--raylet-pid=%d" % worker["raylet_pid"], "--bytes=%d" % size], env=env)
        return lines[0]["value"]
    finally:
        run([troupe, "stop", "--force"] + common)
        shutil.rmtree(temp_root, ignore_errors=True)


def ray_once(ray, python, size):
    port = free_port()
    temp_root = tempfile.mkdtemp(prefix="ray-reconstruction-")
    try:
        result = run([ray, "start", "--head", "--port=%d" % port, "--num-cpus=1",
                      "--node-ip-address=127.0.0.1", "--include-dashboard=false",
                      "--temp-dir=" + temp_root])
        if result.returncode != 0:
            raise RuntimeError(result.stdout + result.stderr)
        result = run([ray, "start", "--address=127.0.0.1:%d" % port, "--num-cpus=2",
                      "--node-ip-address=127.0.0.1", '--resources={"doomed": 1}'])
        if result.returncode != 0:
            raise RuntimeError(result.stdout + result.stderr)
        lines = json_lines([python, "-c", RAY_DRIVER, "127.0.0.1:%d" % port, str(size)])
        return lines[0]["value"]
    finally:
        # This cluster's processes only (not `ray stop --force`: other clusters on the machine).
        stop_processes([re.escape(temp_root), r":%d\b" % port])
        shutil.rmtree(temp_root, ignore_errors=True)


def measure(args):
    """Alternates Troupe and Ray (unless --no-ray) for --iterations rounds. Returns
    ({"troupe": [seconds], "ray": [seconds]}, [(round, side, load average)])."""
    sides = [("troupe", lambda: troupe_once(args.troupe, args.bench, args.bytes))]
    if not args.no_ray:
        sides.append(("ray", lambda: ray_once(args.ray, args.python, args.bytes)))
    return alternate(sides, args.iterations)


def rows(results):
    """The results file's row: seconds from the kill to the value, lower is better."""
    ray = results.get("ray")
    return [summary_row("node_death_to_reconstructed_get", "s", results["troupe"],
                        {"ray_python": ray} if ray else None, higher_is_better=False,
                        note="10 MB object, default health checks, fresh 2-node cluster each")]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--troupe", default="bazel-bin/src/cli/troupe")
    parser.add_argument("--bench", default="bazel-bin/bench/reconstruction_bench")
    venv = os.path.expanduser("~/.cache/troupe-bench-venv/bin")
    parser.add_argument("--ray", default=os.path.join(venv, "ray"))
    parser.add_argument("--python", default=os.path.join(venv, "python"))
    parser.add_argument("--bytes", type=int, default=10 << 20)
    parser.add_argument("--iterations", type=int, default=None, help="default 3 (--quick: 1)")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--quick", action="store_true", help="1 iteration unless --iterations")
    parser.add_argument("--json", metavar="FILE", help="also write a results file (see above)")
    args = parser.parse_args()
    if args.iterations is None:
        args.iterations = 1 if args.quick else 3

    use_ray_token_auth()  # see bench_common
    started, load_before = time.time(), load_average()
    results, loads = measure(args)
    troupe = results["troupe"]
    print("troupe node_death_to_reconstructed_get: %s s" % ", ".join("%.2f" % t for t in troupe))
    row = rows(results)[0]
    if args.no_ray:
        print("median troupe %.2f s" % row["troupe"])
    else:
        print("ray    node_death_to_reconstructed_get: %s s" % ", ".join(
            "%.2f" % t for t in results["ray"]))
        ratio = row["ratios"].get("ray_python")
        print("%-36s %10s %10s %8s" % ("metric (median, lower is better)", "troupe", "ray",
                                       "ray/troupe"))
        print("%-36s %9.2fs %9.2fs %7.1fx  [%.1f-%.1f]" % (
            "node_death_to_reconstructed_get", row["troupe"], row["peers"]["ray_python"],
            ratio[0], ratio[1], ratio[2]))
        print("ray/troupe: median of the per-iteration ratios [min-max]")
    print("load average (1 min) before: %.2f, at each side's start: %s" % (
        load_before, ", ".join("%s%d %.2f" % (name, i + 1, load) for i, name, load in loads)))
    if args.json:
        write_results(args.json, "reconstruction_bench", rows(results), started, load_before,
                      args.iterations, quick=args.quick, raw={"iterations": results,
                                                              "loads": loads})


if __name__ == "__main__":
    sys.exit(main())
