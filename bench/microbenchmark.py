#!/usr/bin/env python3
"""Task and object microbenchmarks: Troupe (bench/task_bench.cc) and Ray (bench/ray_microbench.py)
side by side in one run, with Ray's metric names and the Troupe/Ray ratio per metric.

  bazel build -c opt //bench:task_bench
  bash bench/setup_peers.sh            # a virtualenv with Ray (PyPI)
  python3 bench/microbenchmark.py --python ~/.cache/troupe-bench-venv/bin/python

Troupe's side also measures the physical floor of pipelined task pushes (grpc_unary_async_calls:
bare gRPC unary calls to a worker process with 8 in flight) and prints single_client_tasks_async's
ratio to it; Ray's column is n/a for such floors.

--ray-cpp: also runs Ray's C++ API (bench/ray_cpp_bench.sh, against a `ray start` head) and
prints a second table with a Ray C++ column beside Ray Python's.

--tls=on|off: Troupe's side runs against a head started through the CLI (2 CPUs, on loopback)
with that --tls, instead of an embedded cluster, so the Ray ratios can be read with TLS on.
"""
import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile

from bench_common import json_lines
from ray_cpp_bench import print_beside, ray_cpp_metrics

HERE = os.path.dirname(os.path.abspath(__file__))
# Troupe-side measurements of the physical floor (bare gRPC calls, memcpy): Ray's column is n/a.
PHYSICAL_FLOORS = {"grpc_unary_round_trip_us", "grpc_unary_async_calls",
                   "grpc_unary_async_calls_window_4", "single_client_tasks_async_over_grpc_floor",
                   "memcpy_warm_gigabytes", "memcpy_fresh_gigabytes"}


def run(command, env=None):
    return {r["metric"]: (r["value"], r["unit"]) for r in json_lines(command, env=env)}


@contextlib.contextmanager
def cli_cluster(troupe_cli, tls):
    """A one-node cluster through the CLI with --tls=tls; yields the environment for a driver."""
    temp = tempfile.mkdtemp(prefix="troupe-microbench-")
    try:
        with socket.socket() as probe:  # a free port for the GCS
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        subprocess.run([troupe_cli, "start", "--head", "--num-cpus=2", "--port=%d" % port,
                        "--http-port=0", "--temp-dir=" + temp, "--tls=" + tls], check=True,
                       capture_output=True, text=True)
        session = os.path.join(temp, "session_latest")
        with open(os.path.join(session, "address")) as f:
            address = f.read().strip()
        with open(os.path.join(session, "token")) as f:
            token = f.read().strip()
        env = dict(os.environ, TROUPE_ADDRESS=address, TROUPE_TOKEN=token)
        if tls == "on":
            env["TROUPE_TLS_DIR"] = os.path.join(session, "tls")
        yield env
    finally:
        subprocess.run([troupe_cli, "stop", "--force", "--temp-dir=" + temp], capture_output=True)
        shutil.rmtree(temp, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--troupe", default="bazel-bin/bench/task_bench")
    parser.add_argument("--python", default=os.path.expanduser("~/.cache/troupe-bench-venv/bin/python"))
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--tls", choices=["on", "off"],
                        help="run Troupe's side against a CLI-started head with this --tls")
    parser.add_argument("--troupe-cli", default="bazel-bin/src/cli/troupe")
    parser.add_argument("--ray-cpp", action="store_true",
                        help="add Ray's C++ API (bench/ray_cpp_bench.sh) beside Ray Python")
    args = parser.parse_args()

    if args.tls:
        with cli_cluster(args.troupe_cli, args.tls) as env:
            troupe = run([args.troupe, "--seconds=%g" % args.seconds], env=env)
    else:
        troupe = run([args.troupe, "--seconds=%g" % args.seconds])
    ray = run([args.python, os.path.join(HERE, "ray_microbench.py"), str(args.seconds)])
    print("%-46s %14s %14s %9s  %s" % ("metric", "troupe", "ray", "ratio", "unit"))
    for metric, (value, unit) in troupe.items():
        if metric in ray:
            peer = ray[metric][0]
            print("%-46s %14.2f %14.2f %8.1fx  %s" % (metric, value, peer, value / peer, unit))
        elif metric in PHYSICAL_FLOORS:
            # A property of the machine and gRPC, not of either system: no Ray figure.
            print("%-46s %14.2f %14s %9s  %s" % (metric, value, "n/a", "-", unit))
        else:
            print("%-46s %14.2f %14s %9s  %s" % (metric, value, "-", "-", unit))
    if "single_client_tasks_async_over_grpc_floor" in troupe:
        print("single_client_tasks_async / grpc_unary_async_calls (the floor): %.2f" %
              troupe["single_client_tasks_async_over_grpc_floor"][0])
    put = troupe.get("single_client_put_gigabytes", (0,))[0]
    for baseline in ("memcpy_warm_gigabytes", "memcpy_fresh_gigabytes"):
        if baseline in troupe:
            print("put bandwidth / %s: %.2f" % (baseline, put / troupe[baseline][0]))
    if args.ray_cpp:
        venv = os.path.dirname(os.path.dirname(os.path.abspath(args.python)))
        ray_cpp, unsupported = ray_cpp_metrics(args.seconds, venv=venv)
        print_beside(troupe, ray, ray_cpp, unsupported)


if __name__ == "__main__":
    main()
