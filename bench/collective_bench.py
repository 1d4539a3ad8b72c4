#!/usr/bin/env python3
"""Collective benchmark, nccl-tests style: Troupe's CPU backend (bench/collective_bench.cc) and
PyTorch's gloo backend (bench/gloo_bench.py) in the same run, same ranks, sizes and dtype (f32).
Prints, per operation, rank count and size: time and bus bandwidth of both, and the ratio
(Troupe busbw / gloo busbw; above 1 means Troupe is faster). Per round (--repeat, default 1) and
rank count, Troupe's sweep then gloo's; with several rounds the table prints medians and the
median of the per-round ratios.

  bazel build -c opt //bench:collective_bench
  python3 bench/collective_bench.py            # needs Debian's python3-torch (/usr/bin/python3)
  python3 bench/collective_bench.py --quick    # 4 KB, 1 MB and 64 MB only, 0.2 s per size

Across hosts (--netns, needs root): one network namespace per node, each with its own /dev/shm
(scripts/netns.sh up --private-shm, as on separate hosts), a Troupe cluster with the head in node
1 and a worker in each other node (bench/netns_cluster.py), the Troupe members placed one per
node (collective_bench --spread, so they talk over TCP), gloo's ranks started one per node with
MASTER_ADDR = node 1. All-reduce at 4 KB and 45 MB, --repeat rounds alternating Troupe and
gloo; the table shows the median of each and the ratio:

  bazel build -c opt //src/cli:troupe //bench:collective_bench
  python3 bench/collective_bench.py --netns            # --quick: 2 rounds, 0.2 s per size

--json FILE writes the results file of bench/bench_common.py (bench/run_all.sh collects them):
rows <op>_busbw_<N>ranks_<size> in GB/s (higher is better), peer gloo, for the sizes 4 KB, 1 MB
and 64 MB (--netns: allreduce_busbw_<N>ranks_<size>_across_hosts at 4 KB and 45 MB); every
record of every round (all sizes, time and CPU per operation) and the load averages in "raw".
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from bench_common import json_lines, load_average, summary_row, write_results
from netns_cluster import NetnsCluster

HERE = os.path.dirname(os.path.abspath(__file__))
# The sizes that get a summary row (single host); every other size is in the results' "raw".
SUMMARY_BYTES = (4096, 1 << 20, 64 << 20)
NETNS_BYTES = (4096, 45 << 20)


def human(nbytes):
    for unit in ("B", "KB", "MB", "GB"):
        if nbytes < 1024 or unit == "GB":
            return "%g %s" % (nbytes, unit)
        nbytes /= 1024


def compact(nbytes):
    """4096 -> "4KB": the size as it appears in a metric name."""
    return human(nbytes).replace(" ", "")


def sweep_args(args):
    return ["--min-bytes=%d" % NETNS_BYTES[0], "--max-bytes=%d" % NETNS_BYTES[0],
            "--extra-bytes=%d" % NETNS_BYTES[1], "--seconds=%g" % args.seconds]


def local_sweep(args):
    """The single-host sizes as (flag, value) pairs, for collective_bench and gloo_bench alike:
    --quick measures just the summary sizes; the default sweeps 1 KB to --max-bytes by 4, and
    45 MB."""
    if args.quick:
        return [("--min-bytes", 4096), ("--max-bytes", 1 << 20), ("--factor", 256),
                ("--extra-bytes", 64 << 20), ("--seconds", args.seconds)]
    return [("--max-bytes", args.max_bytes), ("--seconds", args.seconds)]


def busbw_row(samples, rounds, op, ranks, nbytes, suffix="", note=""):
    """One summary row from samples {(impl, op, ranks, bytes): {round: record}}: Troupe's busbw
    per round against gloo's in the same round (no peer when gloo has no figure)."""
    def per_round(impl):
        by_round = samples.get((impl, op, ranks, nbytes), {})
        return [by_round[i]["busbw_gbps"] if i in by_round else None for i in range(rounds)]
    gloo = per_round("gloo")
    if any(r.get("note") for r in samples.get(("gloo", op, ranks, nbytes), {}).values()):
        note = "; ".join(n for n in (note, "gloo emulated (all_reduce + slice)") if n)
    return summary_row("%s_busbw_%dranks_%s%s" % (op, ranks, compact(nbytes), suffix),
                       "GB_per_second", per_round("troupe"),
                       {"gloo": gloo} if any(g is not None for g in gloo) else None, note=note)


def busbw_rows(samples, rounds, sizes, suffix="", note=""):
    """The summary rows: one per op, rank count and size in `sizes` that Troupe measured, in the
    order all-reduce, all-gather, reduce-scatter, then by rank count and size."""
    ops = ["allreduce", "allgather", "reduce_scatter"]
    keys = sorted({(op, ranks, nbytes) for impl, op, ranks, nbytes in samples
                   if impl == "troupe" and nbytes in sizes},
                  key=lambda k: (ops.index(k[0]) if k[0] in ops else len(ops), k))
    return [busbw_row(samples, rounds, op, ranks, nbytes, suffix, note)
            for op, ranks, nbytes in keys]


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
    samples, loads = {}, []  # (impl, op, ranks, bytes) -> {round: record}
    started, load_before = time.time(), load_average()
    try:
        cluster.start_troupe()
        for round_index in range(args.repeat):
            for world in args.ranks:  # alternating, so both see the same machine
                sides = [("troupe", netns_troupe)] + ([] if args.no_gloo else [("gloo", netns_gloo)])
                for impl, fn in sides:
                    loads.append((round_index, "%s %d ranks" % (impl, world), load_average()))
                    for r in fn(cluster, args, world):
                        rows.setdefault((impl, world, r["bytes"]), []).append(r["busbw_gbps"])
                        rows.setdefault((impl + " cpu", world, r["bytes"]), []).append(
                            r.get("cpu_us_per_member", 0))
                        samples.setdefault((impl, r["op"], world, r["bytes"]), {})[
                            round_index] = r
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
            ratio = busbw_row(samples, args.repeat, "allreduce", world, nbytes)["ratios"].get(
                "gloo", [float("inf")])[0]
            print("%5d %9s | %10.3f %10.3f %6.2fx | %10.0f %10.0f %6.2fx" % (
                world, human(nbytes), t, g, ratio, tc, gc,
                gc / tc if tc > 0 else float("inf")))
    print("ratio: Troupe busbw / gloo busbw (median of the per-round ratios); cpu ratio: gloo "
          "CPU / Troupe CPU (above 1: Troupe uses less)")
    print_loads(load_before, loads)
    if args.json:
        write_results(args.json, "collective_bench_netns",
                      busbw_rows(samples, args.repeat, NETNS_BYTES, suffix="_across_hosts",
                                 note="one rank per network namespace, " +
                                 ("shared /dev/shm" if args.shared_shm else "TCP over veth")),
                      started, load_before, args.repeat, quick=args.quick,
                      raw={"records": records_of(samples), "loads": loads})


def records_of(samples):
    """Every record of every round as a flat list, each with its round (0-based) added."""
    return [dict(record, round=i) for key in sorted(samples)
            for i, record in sorted(samples[key].items())]


def print_loads(load_before, loads):
    print("load average (1 min) before: %.2f, at each side's start: %s" % (
        load_before, ", ".join("%s round %d %.2f" % (name, i + 1, load)
                               for i, name, load in loads)))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--troupe", default="bazel-bin/bench/collective_bench")
    parser.add_argument("--python", default="/usr/bin/python3", help="a Python with torch")
    parser.add_argument("--ranks", type=int, nargs="*", default=[2, 4])
    parser.add_argument("--max-bytes", type=int, default=256 << 20)
    parser.add_argument("--seconds", type=float, default=None,
                        help="time per size (default 0.5; --quick: 0.2)")
    parser.add_argument("--quick", action="store_true",
                        help="a cheap run: the summary sizes only (single host), 2 rounds "
                             "(--netns), 0.2 s per size")
    parser.add_argument("--json", metavar="FILE", help="also write a results file (see above)")
    parser.add_argument("--netns", action="store_true",
                        help="measure across network namespaces (see above; needs root)")
    parser.add_argument("--netns-prefix", default="collb", help="scripts/netns.sh PREFIX")
    parser.add_argument("--troupe-cli", default="bazel-bin/src/cli/troupe")
    parser.add_argument("--repeat", type=int, default=None,
                        help="rounds (default 1; --netns: 3, --netns --quick: 2)")
    parser.add_argument("--no-gloo", action="store_true", help="--netns: Troupe only")
    parser.add_argument("--shared-shm", action="store_true",
                        help="--netns: nodes share /dev/shm (Troupe members then use shared "
                             "memory between nodes); default: each node has its own")
    parser.add_argument("--member-env", default="",
                        help="K=V,... set in each Troupe member's process (tuning experiments)")
    args = parser.parse_args()
    if args.seconds is None:
        args.seconds = 0.2 if args.quick else 0.5
    if args.repeat is None:
        args.repeat = (2 if args.quick else 3) if args.netns else 1
    if args.netns:
        return netns_main(args)

    sweep = local_sweep(args)
    troupe_cmd = [args.troupe] + ["%s=%s" % (flag, value) for flag, value in sweep]
    gloo_cmd = [args.python, os.path.join(HERE, "gloo_bench.py")] + [
        word for flag, value in sweep for word in (flag, str(value))]
    samples, loads = {}, []  # (impl, op, ranks, bytes) -> {round: record}
    order = []  # (op, ranks, bytes) in the order Troupe printed them
    started, load_before = time.time(), load_average()
    for round_index in range(args.repeat):
        # One rank count at a time, alternating, so both see the same machine.
        for world in args.ranks:
            for impl, command in (("troupe", troupe_cmd + ["--ranks=%d" % world]),
                                  ("gloo", gloo_cmd + ["--ranks", str(world)])):
                loads.append((round_index, "%s %d ranks" % (impl, world), load_average()))
                for r in json_lines(command):
                    key = (r["op"], r["ranks"], r["bytes"])
                    if impl == "troupe" and key not in order:
                        order.append(key)
                    samples.setdefault((impl,) + key, {})[round_index] = r
    print("%-15s %5s %9s | %12s %10s | %12s %10s | %7s" % (
        "op", "ranks", "size", "troupe us", "busbw GB/s", "gloo us", "busbw GB/s", "ratio"))
    for op, ranks, nbytes in order:
        t_rounds = samples[("troupe", op, ranks, nbytes)]
        g_rounds = samples.get(("gloo", op, ranks, nbytes))
        if not g_rounds:
            continue
        row = busbw_row(samples, args.repeat, op, ranks, nbytes)
        ratio = row["ratios"].get("gloo", [float("inf")])[0]
        med = lambda rounds, key: statistics.median(r[key] for r in rounds.values())
        note = "  (gloo emulated)" if any(g.get("note") for g in g_rounds.values()) else ""
        print("%-15s %5d %9s | %12.1f %10.3f | %12.1f %10.3f | %6.2fx%s" % (
            op, ranks, human(nbytes), med(t_rounds, "time_us"), row["troupe"],
            med(g_rounds, "time_us"), row["peers"].get("gloo", 0.0), ratio, note))
    if args.repeat > 1:
        print("medians of %d rounds; ratio: median of the per-round ratios" % args.repeat)
    print_loads(load_before, loads)
    if args.json:
        write_results(args.json, "collective_bench", busbw_rows(samples, args.repeat,
                                                                SUMMARY_BYTES),
                      started, load_before, args.repeat, quick=args.quick,
                      raw={"records": records_of(samples), "loads": loads})


if __name__ == "__main__":
    main()
