#!/usr/bin/env python3
"""Training throughput, side by side in one run (ResNet18 on FashionMNIST-shaped batches, batch
128 per worker, Adam 1e-3, one thread per worker, CPU):

  (a) 1 Troupe worker (DataParallelTrainer)   vs  a plain single-process LibTorch loop
  (b) 2 Troupe workers                        vs  PyTorch DDP, gloo, 2 processes

  bazel build -c opt --config=nocuda //bench:train_bench
  python3 bench/train_bench.py            # /usr/bin/python3 with Debian's python3-torch

Each configuration runs --repeats times, alternating (the order rotates each round), and the
median is reported with each ratio as the median of the per-round ratios [min-max].
--quick: 2 rounds of 5 timed steps (--steps and --repeats still override it).

Scaling against the hardware ceiling (--scaling): each round runs one plain LibTorch process
alone, two plain processes at the same time (no communication at all: their summed throughput
over twice one alone is the most any data-parallel scheme can reach on this machine, since the
two share memory bandwidth and caches), then 1 and 2 Troupe workers; medians of the rounds:

  python3 bench/train_bench.py --scaling     # --repeats N (default 3), --steps N (default 20)

prints the ceiling, the scaling ratio (2 workers / twice 1 worker) and the two side by side
(2 workers / 2 plain processes at once), plus per configuration images per CPU second of the
training threads (robust to a loaded machine) and the time per step spent waiting in
SynchronizeGradients.

Across hosts (--netns, needs root): two network namespaces, each with its own /dev/shm, as two
hosts (bench/netns_cluster.py); a Troupe head on node 1 and a node joined on node 2. Troupe:
the driver on node 1, DataParallelTrainer with 2 workers placed one per node (STRICT_SPREAD), so
the gradients cross the link. PyTorch: DDP gloo with rank 0 on node 1 and rank 1 on node 2
(MASTER_ADDR = node 1, GLOO_SOCKET_IFNAME=eth0). Rounds alternate; medians and their ratio:

  bazel build -c opt --config=nocuda //bench:train_bench //src/cli:troupe
  python3 bench/train_bench.py --netns

--json FILE writes the results file of bench/bench_common.py (bench/run_all.sh collects them), in
images/s (higher is better): rows train_1_worker_images_per_s (peer libtorch) and
train_2_workers_images_per_s (peer torch_ddp); with --scaling the row scaling_efficiency_2_workers
(Troupe's 2 workers / twice its 1 worker, against the same for two plain LibTorch processes at
once, the ceiling: the ratio is the share of the ceiling reached) and every figure in "raw"; with
--netns the row train_2_workers_images_per_s_across_hosts (peer torch_ddp). Each round's figures
and the load averages are in "raw".
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from bench_common import alternate, json_lines, summary_row, write_results
from bench_common import load_average as load_1min
from netns_cluster import NetnsCluster

HERE = os.path.dirname(os.path.abspath(__file__))


def rate(command):
    return json_lines(command)[-1]["images_per_s"]


def concurrent(command, n):
    """Runs n copies of `command` at once; returns their JSON records."""
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(n)]
    records = []
    for p in procs:
        out, err = p.communicate(timeout=1800)
        if p.returncode != 0:
            sys.stderr.write(err[-3000:])
            raise SystemExit("%s failed with %d" % (" ".join(command), p.returncode))
        records.append([json.loads(line) for line in out.splitlines() if line.startswith("{")][-1])
    return records


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def rotated_rounds(configs, repeats):
    """Runs each (name, run) of `configs` once per round for `repeats` rounds, rotating the order
    each round so no configuration always follows the same one. Returns ({name: [result per
    round]}, [(round, name, 1-minute load average at its start)])."""
    samples = {name: [] for name, _ in configs}
    loads = []
    for round_index in range(repeats):
        shift = round_index % len(configs)
        for name, run in configs[shift:] + configs[:shift]:
            loads.append((round_index, name, load_1min()))
            samples[name].append(run())
    return samples, loads


def throughput_rows(samples):
    """The default mode's rows from {configuration: [images/s per round]}."""
    note = "ResNet18, batch 128 per worker, CPU, one thread per worker"
    return [summary_row("train_1_worker_images_per_s", "images_per_second",
                        samples["troupe, 1 worker"],
                        {"libtorch": samples["libtorch plain, 1 process"]}, note=note),
            summary_row("train_2_workers_images_per_s", "images_per_second",
                        samples["troupe, 2 workers"],
                        {"torch_ddp": samples["torch DDP gloo, 2 processes"]}, note=note)]


def scaling_row(samples):
    """--scaling's row from {configuration: [record per round]}: per round, Troupe's 2 workers
    over twice its 1 worker, against 2 plain processes at once over twice 1 alone (the ceiling)."""
    def per_round(pair, single):
        return [p["images_per_s"] / (2 * s["images_per_s"]) if s["images_per_s"] else None
                for p, s in zip(samples[pair], samples[single])]
    return summary_row("scaling_efficiency_2_workers", "ratio",
                       per_round("troupe, 2 workers", "troupe, 1 worker"),
                       {"libtorch": per_round("plain, 2 processes at once", "plain, 1 process")},
                       note="2 workers / twice 1 worker; peer: 2 plain LibTorch processes at once "
                            "/ twice 1 alone (no communication: the machine's ceiling)")


def scaling_main(args):
    common = ["--steps=%d" % args.steps]
    plain = [args.troupe, "--mode=plain"] + common

    def plain_pair():
        records = concurrent(plain, 2)
        return {"images_per_s": sum(r["images_per_s"] for r in records),
                "images_per_cpu_s": sum(r["images_per_cpu_s"] for r in records),
                "sync_ms": 0.0}

    configs = [
        ("plain, 1 process", lambda: json_lines(plain)[-1]),
        ("plain, 2 processes at once", plain_pair),
        ("troupe, 1 worker",
         lambda: json_lines([args.troupe, "--mode=troupe", "--workers=1"] + common)[-1]),
        ("troupe, 2 workers",
         lambda: json_lines([args.troupe, "--mode=troupe", "--workers=2"] + common)[-1]),
    ]
    started, load_before = time.time(), load_1min()
    samples = {name: [] for name, _ in configs}
    loads, round_loads = [load_average()], []
    for round_index in range(args.repeats):
        # Rotate the order each round, so no configuration always follows the same one.
        shift = round_index % len(configs)
        for name, run in configs[shift:] + configs[:shift]:
            round_loads.append((round_index, name, load_1min()))
            samples[name].append(run())
        loads.append(load_average())

    def median(name, key):
        return statistics.median(r[key] for r in samples[name])

    print("ResNet18, batch 128 per process/worker, %d timed steps, median of %d rounds "
          "(load average before and after each round: %s)" % (args.steps, args.repeats,
                                                              "; ".join(loads)))
    # on-CPU: the training threads' CPU time over wall time (1.0: never waiting nor preempted).
    print("%-28s %9s %10s %7s %8s  %s" % ("", "img/s", "img/CPU-s", "on-CPU", "sync ms",
                                          "runs (img/s)"))
    for name, _ in configs:
        print("%-28s %9.1f %10.1f %7.2f %8.1f  %s" % (
            name, median(name, "images_per_s"), median(name, "images_per_cpu_s"),
            statistics.median(r["images_per_s"] / r["images_per_cpu_s"] for r in samples[name]),
            median(name, "sync_ms"), ", ".join("%.1f" % r["images_per_s"] for r in samples[name])))
    one, pair = median("plain, 1 process", "images_per_s"), median("plain, 2 processes at once",
                                                                    "images_per_s")
    t1, t2 = median("troupe, 1 worker", "images_per_s"), median("troupe, 2 workers",
                                                                "images_per_s")
    print("ceiling (2 plain at once / 2 x plain alone):      %.3f" % (pair / (2 * one)))
    print("scaling (troupe 2 workers / 2 x troupe 1 worker): %.3f" % (t2 / (2 * t1)))
    print("troupe 2 workers / 2 plain at once:               %.3f" % (t2 / pair))
    print("troupe 1 worker / plain alone:                    %.3f" % (t1 / one))
    if args.json:
        write_results(args.json, "train_bench_scaling", [scaling_row(samples)], started,
                      load_before, args.repeats, quick=args.quick,
                      raw={"rounds": samples, "loads": round_loads, "steps": args.steps})


def netns_troupe(cluster, args):
    command = cluster.exec_args(1, cluster.driver_env()) + [
        os.path.abspath(args.troupe), "--mode=troupe", "--workers=2", "--spread",
        "--steps=%d" % args.steps]
    return json_lines(command)[-1]["images_per_s"]


def netns_ddp(cluster, args):
    env = {"GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1"}
    procs = []
    for rank in range(2):
        command = cluster.exec_args(rank + 1, env) + [
            args.python, os.path.join(HERE, "ddp_bench.py"), "--rank", str(rank), "--workers", "2",
            "--master-addr", cluster.ip(1), "--steps", str(args.steps)]
        procs.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    outs = [p.communicate(timeout=900) for p in procs]
    for p, (_, err) in zip(procs, outs):
        if p.returncode != 0:
            sys.stderr.write(err[-3000:])
            raise SystemExit("a DDP rank exited with %d" % p.returncode)
    return [json.loads(line) for line in outs[0][0].splitlines()
            if line.startswith("{")][-1]["images_per_s"]


def netns_main(args):
    started, load_before = time.time(), load_1min()
    with NetnsCluster(args.netns_prefix, 2, args.troupe_cli,
                      private_shm=not args.shared_shm) as cluster:
        cluster.start_troupe()
        # alternating, so both see the same machine
        samples, loads = alternate([("troupe", lambda: netns_troupe(cluster, args)),
                                    ("ddp", lambda: netns_ddp(cluster, args))], args.repeats)
    median = {name: statistics.median(values) for name, values in samples.items()}
    print("ResNet18, 2 workers on 2 network namespaces (one per namespace, TCP over veth), "
          "%d steps of batch 128 per worker, median of %d rounds" % (args.steps, args.repeats))
    for name, label in (("troupe", "troupe DataParallelTrainer"), ("ddp", "torch DDP gloo")):
        print("%-30s %8.1f img/s  (runs: %s)" % (label, median[name],
                                                 ", ".join("%.1f" % v for v in samples[name])))
    row = summary_row("train_2_workers_images_per_s_across_hosts", "images_per_second",
                      samples["troupe"], {"torch_ddp": samples["ddp"]},
                      note="ResNet18, batch 128 per worker, one worker per network namespace, " +
                      ("shared /dev/shm" if args.shared_shm else "TCP over veth"))
    ratio = row["ratios"]["torch_ddp"]
    print("troupe / torch DDP gloo: %.3fx [%.3f-%.3f] (median of the per-round ratios)" % tuple(
        ratio[:3]))
    if args.json:
        write_results(args.json, "train_bench_netns", [row], started, load_before, args.repeats,
                      quick=args.quick, raw={"rounds": samples, "loads": loads,
                                             "steps": args.steps})


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--troupe", default="bazel-bin/bench/train_bench")
    parser.add_argument("--python", default="/usr/bin/python3")
    parser.add_argument("--steps", type=int, default=None, help="default 20 (--quick: 5)")
    parser.add_argument("--repeats", type=int, default=None, help="default 3 (--quick: 2)")
    parser.add_argument("--quick", action="store_true",
                        help="2 rounds of 5 timed steps unless --repeats / --steps say")
    parser.add_argument("--json", metavar="FILE", help="also write a results file (see above)")
    parser.add_argument("--scaling", action="store_true",
                        help="scaling against the hardware ceiling (see above)")
    parser.add_argument("--netns", action="store_true",
                        help="2 workers across 2 network namespaces (see above; needs root)")
    parser.add_argument("--netns-prefix", default="trainb", help="scripts/netns.sh PREFIX")
    parser.add_argument("--shared-shm", action="store_true",
                        help="--netns: the nodes share /dev/shm (Troupe's all-reduce then uses "
                             "shared memory between them; DDP still uses TCP)")
    parser.add_argument("--troupe-cli", default="bazel-bin/src/cli/troupe")
    args = parser.parse_args()
    if args.steps is None:
        args.steps = 5 if args.quick else 20
    if args.repeats is None:
        args.repeats = 2 if args.quick else 3
    if args.netns:
        return netns_main(args)
    if args.scaling:
        return scaling_main(args)
    common = ["--steps=%d" % args.steps]
    configs = {
        "libtorch plain, 1 process": [args.troupe, "--mode=plain"] + common,
        "troupe, 1 worker": [args.troupe, "--mode=troupe", "--workers=1"] + common,
        "torch DDP gloo, 2 processes": [args.python, os.path.join(HERE, "ddp_bench.py"),
                                        "--workers", "2", "--steps", str(args.steps)],
        "troupe, 2 workers": [args.troupe, "--mode=troupe", "--workers=2"] + common,
    }
    started, load_before = time.time(), load_1min()
    samples, loads = rotated_rounds([(name, lambda command=command: rate(command))
                                     for name, command in configs.items()], args.repeats)
    median = {name: statistics.median(values) for name, values in samples.items()}
    for name, values in samples.items():
        print("%-30s %8.1f img/s  (runs: %s)" % (name, median[name],
                                                 ", ".join("%.1f" % v for v in values)))
    rows = throughput_rows(samples)
    for label, row, peer in (("(a) troupe 1 worker / plain libtorch", rows[0], "libtorch"),
                             ("(b) troupe 2 workers / torch DDP gloo", rows[1], "torch_ddp")):
        ratio = row["ratios"][peer]
        print("%s: %.3fx [%.3f-%.3f]" % (label, ratio[0], ratio[1], ratio[2]))
    print("ratios: median of the per-round ratios [min-max]; load average (1 min) before: %.2f, "
          "at each configuration's start: %s" % (load_before, ", ".join(
              "%s %d %.2f" % (name, i + 1, load) for i, name, load in loads)))
    if args.json:
        write_results(args.json, "train_bench", rows, started, load_before, args.repeats,
                      quick=args.quick, raw={"rounds": samples, "loads": loads,
                                             "steps": args.steps})


if __name__ == "__main__":
    main()
