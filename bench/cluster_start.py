#!/usr/bin/env python3
"""Cluster start-up latency: Troupe vs Ray, side by side on this machine.

Measures, per iteration:
  start --head - how long the `start --head` command itself takes to return
  head ready  - from `start --head` until `status` answers with the head node listed
  worker join - from `start --address=...` until `status` lists the second node alive
and prints medians and the Ray/Troupe ratio. Ray comes from PyPI (`pip install ray`); pass
--ray PATH, or --no-ray to measure Troupe alone.

  python3 bench/cluster_start.py --troupe bazel-bin/src/cli/troupe --iterations 5
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time


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
        started = run([troupe, "start", "--head", "--port=%d" % port, "--num-cpus=2"] + common)
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
        run([ray, "stop", "--force"])


def measure(name, once, binary, iterations):
    commands, heads, joins = [], [], []
    for i in range(iterations):
        temp_root = tempfile.mkdtemp(prefix="bench_%s_" % name)
        try:
            command, head, join = once(binary, temp_root)
        finally:
            shutil.rmtree(temp_root, ignore_errors=True)
        commands.append(command)
        heads.append(head)
        joins.append(join)
        print("  %-6s iteration %d: start --head returned %.3f s, head in status %.3f s, "
              "worker join %.3f s" % (name, i + 1, command, head, join))
    return statistics.median(commands), statistics.median(heads), statistics.median(joins)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--troupe", default="bazel-bin/src/cli/troupe")
    parser.add_argument("--ray", default=shutil.which("ray") or "")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args()

    print("Cluster start-up, median of %d (2 CPUs per node, loopback)" % args.iterations)
    troupe = measure("troupe", troupe_once, os.path.abspath(args.troupe), args.iterations)
    ray = None
    if not args.no_ray:
        if not args.ray:
            print("Ray not found: pip install ray, or pass --ray PATH / --no-ray")
        else:
            ray = measure("ray", ray_once, args.ray, args.iterations)
    print()
    print("%-14s %12s %12s %14s" % ("", "troupe (s)", "ray (s)", "ray / troupe"))
    for label, index in (("start --head", 0), ("head ready", 1), ("worker join", 2)):
        if ray:
            print("%-14s %12.3f %12.3f %13.1fx" % (label, troupe[index], ray[index],
                                                   ray[index] / troupe[index]))
        else:
            print("%-14s %12.3f %12s %14s" % (label, troupe[index], "-", "-"))


if __name__ == "__main__":
    main()
