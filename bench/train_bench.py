#!/usr/bin/env python3
"""Training throughput, side by side in one run (ResNet18 on FashionMNIST-shaped batches, batch
128 per worker, Adam 1e-3, one thread per worker, CPU):

  (a) 1 Troupe worker (DataParallelTrainer)   vs  a plain single-process LibTorch loop
  (b) 2 Troupe workers                        vs  PyTorch DDP, gloo, 2 processes

  bazel build -c opt --config=nocuda //bench:train_bench
  python3 bench/train_bench.py            # /usr/bin/python3 with Debian's python3-torch

Each configuration runs --repeats times, alternating, and the median is reported.

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
    samples = {name: [] for name, _ in configs}
    loads = [load_average()]
    for round_index in range(args.repeats):
        # Rotate the order each round, so no configuration always follows the same one.
        shift = round_index % len(configs)
        for name, run in configs[shift:] + configs[:shift]:
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
    samples = {"troupe": [], "ddp": []}
    with NetnsCluster(args.netns_prefix, 2, args.troupe_cli,
                      private_shm=not args.shared_shm) as cluster:
        cluster.start_troupe()
        for _ in range(args.repeats):  # alternating, so both see the same machine
            samples["troupe"].append(netns_troupe(cluster, args))
            samples["ddp"].append(netns_ddp(cluster, args))
    median = {name: statistics.median(values) for name, values in samples.items()}
    print("ResNet18, 2 workers on 2 network namespaces (one per namespace, TCP over veth), "
          "%d steps of batch 128 per worker, median of %d rounds" % (args.steps, args.repeats))
    for name, label in (("troupe", "troupe DataParallelTrainer"), ("ddp", "torch DDP gloo")):
        print("%-30s %8.1f img/s  (runs: %s)" % (label, median[name],
                                                 ", ".join("%.1f" % v for v in samples[name])))
    print("troupe / torch DDP gloo: %.3fx" % (median["troupe"] / median["ddp"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--troupe", default="bazel-bin/bench/train_bench")
    parser.add_argument("--python", default="/usr/bin/python3")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
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
    samples = {name: [] for name in configs}
    order = list(configs)
    for round_index in range(args.repeats):
        # Rotate the order each round, so no configuration always follows the same one.
        shift = round_index % len(order)
        for name in order[shift:] + order[:shift]:
            samples[name].append(rate(configs[name]))
    median = {name: statistics.median(values) for name, values in samples.items()}
    for name, values in samples.items():
        print("%-30s %8.1f img/s  (runs: %s)" % (name, median[name],
                                                 ", ".join("%.1f" % v for v in values)))
    print("(a) troupe 1 worker / plain libtorch: %.3fx" % (
        median["troupe, 1 worker"] / median["libtorch plain, 1 process"]))
    print("(b) troupe 2 workers / torch DDP gloo: %.3fx" % (
        median["troupe, 2 workers"] / median["torch DDP gloo, 2 processes"]))


if __name__ == "__main__":
    main()
