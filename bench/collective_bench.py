#!/usr/bin/env python3
"""Collective benchmark, nccl-tests style: Troupe's CPU backend (bench/collective_bench.cc) and
PyTorch's gloo backend (bench/gloo_bench.py) in the same run, same ranks, sizes and dtype (f32).
Prints, per operation, rank count and size: time and bus bandwidth of both, and the ratio
(Troupe busbw / gloo busbw; above 1 means Troupe is faster).

  bazel build -c opt //bench:collective_bench
  python3 bench/collective_bench.py            # needs Debian's python3-torch (/usr/bin/python3)
"""
import argparse
import os

from bench_common import json_lines

HERE = os.path.dirname(os.path.abspath(__file__))


def human(nbytes):
    for unit in ("B", "KB", "MB", "GB"):
        if nbytes < 1024 or unit == "GB":
            return "%g %s" % (nbytes, unit)
        nbytes /= 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--troupe", default="bazel-bin/bench/collective_bench")
    parser.add_argument("--python", default="/usr/bin/python3", help="a Python with torch")
    parser.add_argument("--ranks", type=int, nargs="*", default=[2, 4])
    parser.add_argument("--max-bytes", type=int, default=256 << 20)
    parser.add_argument("--seconds", type=float, default=0.5)
    args = parser.parse_args()

    common = ["--max-bytes=%d" % args.max_bytes, "--seconds=%g" % args.seconds]
    troupe, gloo = [], []
    for world in args.ranks:  # one rank count at a time, alternating, so both see the same machine
        troupe += json_lines([args.troupe, "--ranks=%d" % world] + common)
        gloo += json_lines([args.python, os.path.join(HERE, "gloo_bench.py"), "--ranks", str(world),
                         "--max-bytes", str(args.max_bytes), "--seconds", str(args.seconds)])
    by_key = {(r["op"], r["ranks"], r["bytes"]): r for r in gloo}
    print("%-15s %5s %9s | %12s %10s | %12s %10s | %7s" % (
        "op", "ranks", "size", "troupe us", "busbw GB/s", "gloo us", "busbw GB/s", "ratio"))
    for t in troupe:
        g = by_key.get((t["op"], t["ranks"], t["bytes"]))
        if g is None:
            continue
        ratio = t["busbw_gbps"] / g["busbw_gbps"] if g["busbw_gbps"] > 0 else float("inf")
        note = "  (gloo emulated)" if g.get("note") else ""
        print("%-15s %5d %9s | %12.1f %10.3f | %12.1f %10.3f | %6.2fx%s" % (
            t["op"], t["ranks"], human(t["bytes"]), t["time_us"], t["busbw_gbps"],
            g["time_us"], g["busbw_gbps"], ratio, note))


if __name__ == "__main__":
    main()
