#!/usr/bin/env python3
"""Cluster start-up latency: Troupe vs Ray, side by side on this machine.

Measures, per iteration:
  start --head - how long the `start --head` command itself takes to return
  head ready  - from `start --head` until `status` answers with the head node listed
  worker join - from `start --address=...` until `status` lists the second node alive
The iterations alternate (Troupe, Ray, Troupe, Ray, ...), so load that changes over time
shifts both alike; the table prints each side's median and the median of the per-iteration
Ray/Troupe ratios with their range, and the 1-minute load average at each side's start. Ray
comes from PyPI (bash bench/setup_peers.sh installs it in ~/.cache/troupe-bench-venv, the default
when `ray` is not on PATH); pass --ray PATH, or --no-ray to measure Troupe alone.

  python3 bench/cluster_start.py --troupe bazel-bin/src/cli/troupe --iterations 5
  python3 bench/cluster_start.py --quick --json results.json   # 2 iterations; a results file

--json FILE writes the results file of bench/bench_common.py (bench/run_all.sh collects them):
rows start_head, head_ready, worker_join in seconds (lower is better), peer ray_python; each
iteration's figures and load averages in "raw".
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

from bench_common import (alternate, load_average, stop_processes, summary_row,
                          use_ray_token_auth, write_results)

METRICS = ("start_head", "head_ready", "worker_join")
LABELS = {"start_head": "start --head", "head_ready": "head ready", "worker_join": "worker join"}


def run(cmd, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


def wait_until(predicate, timeout=60.0, interval=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    raise TimeoutError("condition not met within %.0f s" % timeout)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def troupe_once(troupe, temp_root):
    port = free_port()
    common = ["--temp-dir=" + temp_root]

    def alive_nodes():
        result = run([troupe, "status", "--format=json"] + common)
        if result.returncode != 0:
            return -1
        return sum(n["state"] == "ALIVE" for n in json.loads(result.stdout)["nodes"])

    try:
        t0 = time.monotonic()
        started = run([troupe, "start", "--head", "--port=%d" % port, "--http-port=0",
                       "--num-cpus=2"] + common)
        if started.returncode != 0:
            raise RuntimeError(started.stderr)
        command = time.monotonic() - t0
        wait_until(lambda: alive_nodes() >= 1)
        head = time.monotonic() - t0
        t1 = time.monotonic()
        joined = run([troupe, "start", "--address=127.0.0.1:%d" % port, "--num-cpus=2"] + common)
        if joined.returncode != 0:
            raise RuntimeError(joined.stderr)
        wait_until(lambda: alive_nodes() >= 2)
        join = time.monotonic() - t1
        return command, head, join
    finally:
        run([troupe, "stop", "--force"] + common)


def ray_once(ray, temp_root):
    port = free_port()
    address = "127.0.0.1:%d" % port

    def alive_nodes():
        result = run([ray, "status", "--address=" + address])
        if result.returncode != 0 or "Active:" not in result.stdout:
            return -1
        active = result.stdout.split("Active:")[1].split("Pending:")[0]
        return active.count("node_")

    try:
        t0 = time.monotonic()
        started = run([ray, "start", "--head", "--port=%d" % port, "--num-cpus=2",
                       "--include-dashboard=false", "--disable-usage-stats",
                       "--temp-dir=" + temp_root])
        if started.returncode != 0:
            raise RuntimeError(started.stderr)
        command = time.monotonic() - t0
        wait_until(lambda: alive_nodes() >= 1)
        head = time.monotonic() - t0
        t1 = time.monotonic()
        joined = run([ray, "start", "--address=" + address, "--num-cpus=2",
                      "--disable-usage-stats"])
        if joined.returncode != 0:
            raise RuntimeError(joined.stderr)
        wait_until(lambda: alive_nodes() >= 2)
        join = time.monotonic() - t1
        return command, head, join
    finally:
        # This cluster's processes only (not `ray stop --force`: other clusters on the machine).
        stop_processes([re.escape(temp_root), r":%d\b" % port])


def iteration(name, once, binary, counter):
    """One fresh cluster of `name`: {metric: seconds}. Prints the figures as it goes."""
    temp_root = tempfile.mkdtemp(prefix="bench_%s_" % name)
    try:
        command, head, join = once(binary, temp_root)
    finally:
        shutil.rmtree(temp_root, ignore_errors=True)
    counter[name] = counter.get(name, 0) + 1
    print("  %-6s iteration %d: start --head returned %.3f s, head in status %.3f s, "
          "worker join %.3f s" % (name, counter[name], command, head, join), flush=True)
    return dict(zip(METRICS, (command, head, join)))


def measure(args):
    """Runs the iterations, alternating Troupe and Ray (when there is a Ray). Returns
    ({side: [{metric: seconds} per iteration]}, [(iteration, side, load average)])."""
    counter = {}
    troupe = os.path.abspath(args.troupe)
    sides = [("troupe", lambda: iteration("troupe", troupe_once, troupe, counter))]
    if args.ray:
        sides.append(("ray", lambda: iteration("ray", ray_once, args.ray, counter)))
    return alternate(sides, args.iterations, log=None)


def rows(results):
    """The results file's rows: per metric Troupe's seconds and Ray's (lower is better)."""
    ray = results.get("ray")
    return [summary_row(metric, "s", [r[metric] for r in results["troupe"]],
                        {"ray_python": [r[metric] for r in ray]} if ray else None,
                        higher_is_better=False)
            for metric in METRICS]


def default_ray():
    venv = os.path.expanduser("~/.cache/troupe-bench-venv/bin/ray")
    return shutil.which("ray") or (venv if os.path.exists(venv) else "")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--troupe", default="bazel-bin/src/cli/troupe")
    parser.add_argument("--ray", default=default_ray())
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--iterations", type=int, default=None, help="default 5 (--quick: 2)")
    parser.add_argument("--quick", action="store_true", help="2 iterations unless --iterations")
    parser.add_argument("--json", metavar="FILE", help="also write a results file (see above)")
    args = parser.parse_args()
    if args.iterations is None:
        args.iterations = 2 if args.quick else 5
    if args.no_ray:
        args.ray = ""
    elif not args.ray:
        print("Ray not found: pip install ray (bash bench/setup_peers.sh), or pass --ray PATH / "
              "--no-ray")

    use_ray_token_auth()  # see bench_common
    started, load_before = time.time(), load_average()
    print("Cluster start-up, median of %d (2 CPUs per node, loopback)" % args.iterations)
    results, loads = measure(args)
    table = rows(results)
    print()
    print("%-14s %12s %12s %14s" % ("", "troupe (s)", "ray (s)", "ray / troupe"))
    for row in table:
        ratio = row["ratios"].get("ray_python")
        if ratio:
            print("%-14s %12.3f %12.3f %13.1fx  [%.1f-%.1f]" % (
                LABELS[row["metric"]], row["troupe"], row["peers"]["ray_python"], ratio[0],
                ratio[1], ratio[2]))
        else:
            print("%-14s %12.3f %12s %14s" % (LABELS[row["metric"]], row["troupe"], "-", "-"))
    print("ray / troupe: median of the per-iteration ratios [min-max]; load average (1 min) "
          "before: %.2f, at each side's start: %s" % (
              load_before, ", ".join("%s%d %.2f" % (name, i + 1, load)
                                     for i, name, load in loads)))
    if args.json:
        write_results(args.json, "cluster_start", table, started, load_before, args.iterations,
                      quick=args.quick, raw={"iterations": results, "loads": loads})


if __name__ == "__main__":
    main()
