#!/usr/bin/env python3
"""Ray's C++ API as a peer of the task/object microbenchmarks: runs bench/ray_cpp_bench.sh (which
builds bench/ray_cpp_bench.cc with g++ against the `ray-cpp` wheel and runs it against a
`ray start --head --num-cpus=2` cluster of its own) and reads what it printed.

bench/microbenchmark.py --ray-cpp adds its column; alone it prints the figures:

  bash bench/setup_peers.sh                      # Ray and ray-cpp in ~/.cache/troupe-bench-venv
  python3 bench/ray_cpp_bench.py --seconds 2 [--only single_client_tasks_async,...]
"""
import argparse
import os

from bench_common import json_lines

HERE = os.path.dirname(os.path.abspath(__file__))


def ray_cpp_metrics(seconds, only=None, venv=None):
    """Runs the Ray C++ program for `seconds` per metric (`only`: a list of metric names).
    Returns ({metric: (value, unit)}, {metric: (why Ray's C++ API cannot run it, unit)})."""
    command = ["bash", os.path.join(HERE, "ray_cpp_bench.sh"), "run", "--seconds=%g" % seconds]
    if only:
        command.append("--only=" + ",".join(only))
    env = dict(os.environ)
    if venv:
        env["TROUPE_BENCH_VENV"] = venv
    measured, unsupported = {}, {}
    for line in json_lines(command, env=env):
        if line.get("unsupported"):
            unsupported[line["metric"]] = (line["unsupported"], line["unit"])
        else:
            measured[line["metric"]] = (line["value"], line["unit"])
    return measured, unsupported


def print_beside(troupe, ray_python, ray_cpp, unsupported):
    """The Ray C++ column beside Troupe's and Ray Python's ({metric: (value, unit)} each), with
    how many times better Troupe is than each (value ratio; for a latency, the inverse); a metric
    Ray's C++ API lacks says so."""
    print("\nRay's C++ API (bench/ray_cpp_bench.sh: a `ray start --head --num-cpus=2` cluster)")
    print("%-46s %14s %14s %14s %9s %9s  %s" % ("metric", "troupe", "ray_python", "ray_cpp",
                                                 "x_python", "x_cpp", "unit"))
    for metric in list(troupe) + [m for m in list(ray_cpp) + list(unsupported) if m not in troupe]:
        unit = (troupe.get(metric) or ray_cpp.get(metric) or unsupported[metric])[1]
        cells = []
        for side in (troupe, ray_python, ray_cpp):
            cells.append("%14.2f" % side[metric][0] if metric in side else "%14s" % "-")
        ratios = []
        for peer in (ray_python, ray_cpp):
            if metric in troupe and metric in peer and peer[metric][0]:
                ratio = troupe[metric][0] / peer[metric][0]
                if unit == "microseconds":  # lower is better: show how many times lower
                    ratio = 1 / ratio
                ratios.append("%8.1fx" % ratio)
            else:
                ratios.append("%9s" % "-")
        print("%-46s %s %s %s  %s" % (metric, " ".join(cells), ratios[0], ratios[1], unit))
    for metric, (why, _) in unsupported.items():
        print("  %s: not in Ray's C++ API: %s" % (metric, why))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--only", default="", help="comma-separated metric names")
    parser.add_argument("--venv", default=None, help="default: ~/.cache/troupe-bench-venv")
    args = parser.parse_args()
    measured, unsupported = ray_cpp_metrics(args.seconds, [m for m in args.only.split(",") if m],
                                            args.venv)
    for metric, (value, unit) in measured.items():
        print("%-46s %14.2f  %s" % (metric, value, unit))
    for metric, (why, unit) in unsupported.items():
        print("%-46s %14s  %s; not in Ray's C++ API: %s" % (metric, "-", unit, why))


if __name__ == "__main__":
    main()
