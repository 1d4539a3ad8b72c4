#!/usr/bin/env python3
"""Task and object microbenchmarks: Troupe (bench/task_bench.cc) and Ray (bench/ray_microbench.py)
side by side in one run, with Ray's metric names and the Troupe/Ray ratio per metric.

  bazel build -c opt //bench:task_bench
  bash bench/setup_peers.sh            # a virtualenv with Ray (PyPI)
  python3 bench/microbenchmark.py --python ~/.cache/troupe-bench-venv/bin/python
"""
import argparse
import os

from bench_common import json_lines

HERE = os.path.dirname(os.path.abspath(__file__))


def run(command):
    return {r["metric"]: (r["value"], r["unit"]) for r in json_lines(command)}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--troupe", default="bazel-bin/bench/task_bench")
    parser.add_argument("--python", default=os.path.expanduser("~/.cache/troupe-bench-venv/bin/python"))
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()

    troupe = run([args.troupe, "--seconds=%g" % args.seconds])
    ray = run([args.python, os.path.join(HERE, "ray_microbench.py"), str(args.seconds)])
    print("%-46s %14s %14s %9s  %s" % ("metric", "troupe", "ray", "ratio", "unit"))
    for metric, (value, unit) in troupe.items():
        if metric in ray:
            peer = ray[metric][0]
            print("%-46s %14.2f %14.2f %8.1fx  %s" % (metric, value, peer, value / peer, unit))
        else:
            print("%-46s %14.2f %14s %9s  %s" % (metric, value, "-", "-", unit))
    put = troupe.get("single_client_put_gigabytes", (0,))[0]
    for baseline in ("memcpy_warm_gigabytes", "memcpy_fresh_gigabytes"):
        if baseline in troupe:
            print("put bandwidth / %s: %.2f" % (baseline, put / troupe[baseline][0]))


if __name__ == "__main__":
    main()
