#!/usr/bin/env python3
"""Collective benchmark, nccl-tests style: Troupe's CPU backend (bench/collective_bench.cc) and
PyTorch's gloo backend (bench/gloo_bench.py) in the same run, same ranks, sizes and dtype (f32).
Prints, per operation, rank count and size: time and bus bandwidth of both, and the ratio
(Troupe busbw / gloo busbw; above 1 means Troupe is faster).

  bazel build -c opt //bench:collective_bench
  python3 bench/collective_bench.py            # needs Debian's python3-torch (/usr/bin/python3)

Across hosts (--netns, needs root): one network namespace per node, each with its own /dev/shm
(scripts/netns.sh up --private-shm, as on separate hosts), a Troupe cluster with the head in node
1 and a worker in each other node (bench/netns_cluster.py), the Troupe members placed one per
node (collective_bench --spread, so they talk over TCP), gloo's ranks started one per node with
MASTER_ADDR = node 1. All-reduce at 4 KB and 45 MB, --repeat rounds alternating Troupe and
gloo; the table shows the median of each and the ratio:

  bazel build -c opt //src/cli:troupe //bench:collective_bench
  python3 bench/collective_bench.py --netns
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from bench_common import json_lines
from netns_cluster import NetnsCluster

HERE = os.path.dirname(os.path.abspath(__file__))


def human(nbytes):
    for unit in ("B", "KB", "MB", "GB"):
        if nbytes < 1024 or unit == "GB":
            return "%g %s" % (nbytes, unit)
        nbytes /= 1024


def sweep_args(args):
    return ["--min-bytes=4096", "--max-bytes=4096", "--extra-bytes=%d" % (45 << 20),
            "--seconds=%g" % args.seconds]


def netns_troupe(cluster, args, world):
    return json_lines(cluster.exec_args(1, cluster.driver_env()) + [
        os.path.abspath(args.troupe), "--ranks=%d" % world, "--spread", "--ops=allreduce",
        "--member-env=" + args.member_env] + sweep_args(args))


def netns_gloo(cluster, args, world):
    env = {"GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1"}
    sizes = [a.replace("=", " ").split() for a in sweep_args(args)]
    procs = []
    for rank in range(world):
        cmd = cluster.exec_args(rank + 1, env) + [
            args.python, os.path.join(HERE, "gloo_bench.py"), "--rank", str(rank), "--ranks",
            str(world), "--master-addr", cluster.ip(1), "--port", "29500", "--ops", "allreduce"]
        cmd += [word for pair in sizes for word in pair]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs):
        if p.returncode != 0:
            sys.stderr.write(err[-3000:])
            raise SystemExit("a gloo rank exited with %d" % p.returncode)
    return [json.loads(line) for line in outs[0][0].splitlines() if line.startswith("{")]


def netns_main(args):
    cluster = NetnsCluster(args.netns_prefix, max(args.ranks), args.troupe_cli,
                           private_shm=not args.shared_shm)
    rows = {}  # (impl, ranks, bytes) -> [busbw, ...]
    try:
        cluster.start_troupe()
        for _ in range(args.repeat):
            for world in args.ranks:  # alternating, so both see the same machine
                sides = [("troupe", netns_troupe)] + ([] if args.no_gloo else [("gloo", netns_gloo)])
                for impl, fn in sides:
                    for r in fn(cluster, args, world):
                        rows.setdefault((impl, world, r["bytes"]), []).append(r["busbw_gbps"])
                        rows.setdefault((impl + " cpu", world, r["bytes"]), []).append(
                            r.get("cpu_us_per_member", 0))
    finally:
        cluster.close()
    print("all-reduce across network namespaces (one rank per namespace%s), median of %d rounds"
          % (", shared /dev/shm" if args.shared_shm else ", TCP over veth", args.repeat))
    print("busbw in GB/s; cpu = CPU time per operation per member (all its threads), in us")
    print("%5s %9s | %10s %10s %7s | %10s %10s %7s" % (
        "ranks", "size", "troupe", "gloo", "ratio", "troupe cpu", "gloo cpu", "ratio"))
    for world in args.ranks:
        for nbytes in (4096, 45 << 20):
            def med(key):
                return statistics.median(rows.get((key, world, nbytes), [0]))
            t, g, tc, gc = med("troupe"), med("gloo"), med("troupe cpu"), med("gloo cpu")
            print("%5d %9s | %10.3f %10.3f %6.2fx | %10.0f %10.0f %6.2fx" % (
                world, human(nbytes), t, g, t / g if g > 0 else float("inf"), tc, gc,
                gc / tc if tc > 0 else float("inf")))
    print("ratio: Troupe busbw / gloo busbw; cpu ratio: gloo CPU / Troupe CPU (above 1: Troupe "
          "uses less)")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--troupe", default="bazel-bin/bench/collective_bench")
    parser.add_argument("--python", default="/usr/bin/python3", help="a Python with torch")
    parser.add_argument("--ranks", type=int, nargs="*", default=[2, 4])
    parser.add_argument("--max-bytes", type=int, default=256 << 20)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--netns", action="store_true",
                        help="measure across network namespaces (see above; needs root)")
    parser.add_argument("--netns-prefix", default="collb", help="scripts/netns.sh PREFIX")
    parser.add_argument("--troupe-cli", default="bazel-bin/src/cli/troupe")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-gloo", action="store_true", help="--netns: Troupe only")
    parser.add_argument("--shared-shm", action="store_true",
                        help="--netns: nodes share /dev/shm (Troupe members then use shared "
                             "memory between nodes); default: each node has its own")
    parser.add_argument("--member-env", default="",
                        help="K=V,... set in each Troupe member's process (tuning experiments)")
    args = parser.parse_args()
    if args.netns:
        return netns_main(args)

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
