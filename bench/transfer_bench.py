#!/usr/bin/env python3
"""Cross-node object transfer GB/s between two network namespaces: Troupe vs Ray vs raw TCP.

Puts two nodes in two network namespaces (scripts/netns.sh up PREFIX 2: 10.99.0.1 and 10.99.0.2
on a bridge), starts a Troupe cluster and a Ray cluster side by side on them (head on node 1,
worker on node 2, each started inside its namespace with --node-ip-address 10.99.0.I), and one
driver for each on node 1 that measures on request:
  - Troupe (bazel-bin/bench/transfer_bench): a task makes the object on node 1; a task on node 2
    times GetView of it (the transfer into node 2's store plus mapping it);
  - Ray: the same two tasks (a numpy array made on node 1; ray.get of it timed on node 2);
  - raw TCP: iperf3 from node 2 to node 1 for --iperf-seconds, --iperf-parallel streams.
The three are interleaved round by round (TCP, Troupe, Ray, TCP, ...), so a machine whose load
changes over time (a shared box) shifts all three alike; each ratio is the median of the
per-round ratios, each GB/s the median of the rounds; GB/s = bytes / seconds / 1e9. The CPU
columns are the CPU seconds (user + system) the two raylets (Troupe, Ray) or the two iperf3
processes spent per GB moved, a figure that load on the machine disturbs less than wall time.
Needs root (namespaces). Every process it starts lives in its namespaces and is killed with them
(netns.sh down) at the end.
The 1-minute load average at the start of each round is printed and kept.
Usage: python3 bench/transfer_bench.py [--sizes 1048576,104857600,1073741824] [--rounds 5]
       python3 bench/transfer_bench.py --quick   # 1 MB and 100 MB, 3 rounds, 1 s of iperf3
       (bench/transfer_bench.sh builds Troupe first and runs this)
--json FILE writes the results file of bench/bench_common.py (bench/run_all.sh collects them):
one row per size, node_to_node_transfer_<size> in GB/s (higher is better), peers ray_python and
raw_tcp (iperf3: the link's ceiling, so that ratio stays below 1); every round's figures (GB/s,
CPU seconds per GB) and load averages in "raw".
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench_common import load_average, summary_row, use_ray_token_auth, write_results
from netns_cluster import NetnsCluster

NETNS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "netns.sh")
RAY_PORT = 6390
TICKS = os.sysconf("SC_CLK_TCK")

RAY_DRIVER = r'''
import json, sys, time
import numpy as np
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init(address=sys.argv[1])
nodes = {n["NodeManagerAddress"]: n["NodeID"] for n in ray.nodes() if n["Alive"]}
producer, consumer = nodes["10.99.0.1"], nodes["10.99.0.2"]

def on(node):
    return NodeAffinitySchedulingStrategy(node_id=node, soft=False)

@ray.remote(num_cpus=1)
def make_bytes(size, seed):
    return np.full(size, seed % 256, dtype=np.uint8)

@ray.remote(num_cpus=1)
def time_get(refs, size, seed):
    start = time.perf_counter()
    value = ray.get(refs[0])
    seconds = time.perf_counter() - start
    ok = value.size == size and (size == 0 or (value[0] == seed % 256 and value[-1] == seed % 256))
    return seconds if ok else -1.0

ray.get([time_get.options(scheduling_strategy=on(consumer)).remote(
    [make_bytes.options(scheduling_strategy=on(producer)).remote(1, 1)], 1, 1)])
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    size, seed = map(int, line.split())
    obj = make_bytes.options(scheduling_strategy=on(producer)).remote(size, seed)
    ray.wait([obj])
    seconds = ray.get(time_get.options(scheduling_strategy=on(consumer)).remote([obj], size, seed))
    assert seconds >= 0, "the consumer read a wrong object"
    del obj
    print(json.dumps({"bytes": size, "seconds": seconds}), flush=True)
'''


def run(cmd, check=True, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if check and result.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s%s" % (" ".join(cmd), result.returncode,
                                                     result.stdout, result.stderr))
    return result


def on_node(prefix, i, cmd):
    return ["bash", NETNS, "exec", prefix, str(i), "--"] + cmd


def pids_in(prefix, pattern):
    """Pids of the processes in the prefix's node namespaces whose command line has `pattern`."""
    found = []
    for i in (1, 2):
        out = run(["ip", "netns", "pids", "%sn%d" % (prefix, i)], check=False).stdout
        for pid in out.split():
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    if pattern in f.read().replace(b"\0", b" ").decode(errors="replace"):
                        found.append(int(pid))
            except OSError:
                pass
    return found


def cpu_seconds(pids):
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except OSError:
            pass
    return total / TICKS


class Driver:
    """A measuring driver on node 1: one request line in, one JSON line out."""

    def __init__(self, cmd, env=None):
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=sys.stderr, text=True, env=env)
        line = self._line()
        if not line.get("ready"):
            raise RuntimeError("driver not ready: %s" % line)

    def _line(self):
        while True:
            text = self.proc.stdout.readline()
            if not text:
                raise RuntimeError("driver %s exited" % self.proc.args[-1])
            if text.startswith("{"):
                return json.loads(text)

    def measure(self, size, seed):
        self.proc.stdin.write("%d %d\n" % (size, seed))
        self.proc.stdin.flush()
        return self._line()["seconds"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def iperf(prefix, parallel, seconds):
    """(GB/s, CPU seconds of both iperf3 processes)."""
    server = subprocess.Popen(on_node(prefix, 1, ["iperf3", "-s", "-1"]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):  # the server needs a moment to listen
            result = run(on_node(prefix, 2, ["iperf3", "-c", "10.99.0.1", "-J", "-t", str(seconds),
                                             "-P", str(parallel)]), check=False)
            end = json.loads(result.stdout or "{}").get("end", {}) if result.returncode == 0 else {}
            if "sum_received" in end and "cpu_utilization_percent" in end:
                cpu = end["cpu_utilization_percent"]
                # iperf3 reports each side's CPU as a share of the wall time of the test.
                cpu_s = (cpu["host_total"] + cpu["remote_total"]) / 100.0 * seconds
                return end["sum_received"]["bits_per_second"] / 8e9, cpu_s
            time.sleep(0.1)
        raise RuntimeError("iperf3 did not connect: " + result.stdout + result.stderr)
    finally:
        try:
            server.wait(timeout=5)  # a one-off server exits after its client
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def start_troupe(cluster, bench):
    """The Troupe nodes (joined as the head's join_command says: TLS, CA pin) and the measuring
    driver on node 1."""
    cluster.start_troupe()
    status = json.loads(run(cluster.exec_args(1) + [
        cluster.troupe, "status", "--format=json", "--address=" + cluster.address(),
        "--token=" + cluster.token]).stdout)
    ids = {n["node_ip"]: n["node_id"] for n in status["nodes"] if n["state"] == "ALIVE"}
    return Driver(cluster.exec_args(1, cluster.driver_env()) + [
        bench, "--producer=" + ids["10.99.0.1"], "--consumer=" + ids["10.99.0.2"]])


def start_ray(prefix, ray, python, temp, store_bytes):
    run(on_node(prefix, 1, [ray, "start", "--head", "--port=%d" % RAY_PORT,
                            "--node-ip-address=10.99.0.1", "--num-cpus=2",
                            "--object-store-memory=%d" % store_bytes,
                            "--include-dashboard=false", "--temp-dir=" + temp]))
    run(on_node(prefix, 2, [ray, "start", "--address=10.99.0.1:%d" % RAY_PORT,
                            "--node-ip-address=10.99.0.2", "--num-cpus=2",
                            "--object-store-memory=%d" % store_bytes]))
    return Driver(on_node(prefix, 1, [python, "-c", RAY_DRIVER, "10.99.0.1:%d" % RAY_PORT]))


def label(size):
    if size >= 1 << 30:
        return "%d GB" % (size >> 30)
    if size >= 1 << 20:
        return "%d MB" % (size >> 20)
    return "%d KB" % (size >> 10)


def rows_of(sizes, rows, tls="auto"):
    """One results row per size from rows {size: {"troupe": [GB/s per round], "ray": [...],
    "tcp": [...]}} (the rounds in the same order for each side); `tls`: the Troupe head's
    --tls."""
    out = []
    for size in sizes:
        r = rows[size]
        peers = {"raw_tcp": r["tcp"]}
        if r["ray"]:
            peers["ray_python"] = r["ray"]
        out.append(summary_row("node_to_node_transfer_%s" % label(size).replace(" ", ""),
                               "GB_per_second", r["troupe"], peers,
                               note="2 network namespaces (veth, one host); Troupe --tls=%s "
                                    "(auto: on), Ray's side has no TLS; raw_tcp is iperf3, the "
                                    "link's ceiling" % tls))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prefix", default="xf", help="netns.sh prefix (namespaces made here)")
    parser.add_argument("--troupe", default="bazel-bin/src/cli/troupe")
    parser.add_argument("--bench", default="bazel-bin/bench/transfer_bench")
    venv = os.path.expanduser("~/.cache/troupe-bench-venv/bin")
    parser.add_argument("--ray", default=os.path.join(venv, "ray"))
    parser.add_argument("--python", default=os.path.join(venv, "python"))
    parser.add_argument("--sizes", default=None,
                        help="default 1048576,104857600,1073741824 (--quick: 1048576,104857600)")
    parser.add_argument("--rounds", type=int, default=None, help="default 5 (--quick: 3)")
    parser.add_argument("--iperf-seconds", type=int, default=None,
                        help="default 2 (--quick: 1)")
    parser.add_argument("--iperf-parallel", type=int, default=4)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--tls", choices=["auto", "on", "off"], default="auto",
                        help="the Troupe head's --tls (auto: on, as the head binds 10.99.0.1)")
    parser.add_argument("--quick", action="store_true",
                        help="1 MB and 100 MB, 3 rounds (the first transfer of a run can be "
                             "a cold outlier), 1 s of iperf3, unless given")
    parser.add_argument("--json", metavar="FILE", help="also write a results file (see above)")
    args = parser.parse_args()
    if args.sizes is None:
        args.sizes = "1048576,104857600" if args.quick else "1048576,104857600,1073741824"
    if args.rounds is None:
        args.rounds = 3 if args.quick else 5
    if args.iperf_seconds is None:
        args.iperf_seconds = 1 if args.quick else 2
    sizes = [int(s) for s in args.sizes.split(",")]
    use_ray_token_auth()  # see bench_common
    started, load_before = time.time(), load_average()
    loads = []
    troupe, bench = os.path.abspath(args.troupe), os.path.abspath(args.bench)

    rows = {size: {"tcp": [], "troupe": [], "ray": [], "troupe_cpu": [], "ray_cpu": [],
                   "tcp_cpu": []} for size in sizes}
    temp = tempfile.mkdtemp(prefix="xf-bench-")
    run(["bash", NETNS, "down", args.prefix], check=False)
    # Shared /dev/shm (each node still has its own store, so every byte crosses the link): a
    # private tmpfs per node would cap the store below the 1 GB object's needs.
    cluster = NetnsCluster(args.prefix, 2, troupe, private_shm=False,
                           object_store_memory=str(max(3 * max(sizes), 1 << 30)),
                           head_flags=["--tls=" + args.tls])
    drivers = []
    try:
        ours = start_troupe(cluster, bench)
        drivers.append(ours)
        troupe_raylets = pids_in(args.prefix, "troupe raylet")
        theirs = None
        if not args.no_ray:
            theirs = start_ray(args.prefix, args.ray, args.python, temp + "/ray",
                               max(3 * max(sizes), 1 << 30))
            drivers.append(theirs)
        ray_raylets = pids_in(args.prefix, "/raylet ")
        seed = 0
        for size in sizes:
            for round_index in range(args.rounds):
                seed += 1
                loads.append((label(size), round_index, load_average()))
                gbps, cpu = iperf(args.prefix, args.iperf_parallel, args.iperf_seconds)
                rows[size]["tcp"].append(gbps)
                rows[size]["tcp_cpu"].append(cpu / (gbps * args.iperf_seconds))
                for name, driver, raylets in (("troupe", ours, troupe_raylets),
                                              ("ray", theirs, ray_raylets)):
                    if driver is None:
                        continue
                    before = cpu_seconds(raylets)
                    seconds = driver.measure(size, seed)
                    cpu = cpu_seconds(raylets) - before
                    rows[size][name].append(size / seconds / 1e9)
                    rows[size][name + "_cpu"].append(cpu / (size / 1e9))
            r = rows[size]
            print("%s: tcp %s | troupe %s | ray %s" % (
                label(size), " ".join("%.2f" % x for x in r["tcp"]),
                " ".join("%.2f" % x for x in r["troupe"]), " ".join("%.2f" % x for x in r["ray"])),
                flush=True)
    finally:
        for driver in drivers:
            try:
                driver.close()
            except Exception:  # the namespaces' teardown below kills what is left
                pass
        # Stops Troupe on each node (which removes its store from /dev/shm), then the namespaces
        # with every process left in them (Ray's too).
        cluster.close()
        shutil.rmtree(temp, ignore_errors=True)

    med = statistics.median
    print()
    print("%-7s %9s %9s %9s %10s %10s | %s" % (
        "size", "TCP GB/s", "Troupe", "Ray", "Troupe/TCP", "Troupe/Ray",
        "CPU s per GB: TCP / Troupe / Ray raylets"))
    for size in sizes:
        r = rows[size]
        vs_tcp = med([t / c for t, c in zip(r["troupe"], r["tcp"])])
        vs_ray = med([t / y for t, y in zip(r["troupe"], r["ray"])]) if r["ray"] else None
        print("%-7s %9.2f %9.2f %9s %9.2fx %10s | %.2f / %.2f / %s" % (
            label(size), med(r["tcp"]), med(r["troupe"]),
            "%.2f" % med(r["ray"]) if r["ray"] else "-", vs_tcp,
            "%.1fx" % vs_ray if vs_ray else "-", med(r["tcp_cpu"]), med(r["troupe_cpu"]),
            "%.2f" % med(r["ray_cpu"]) if r["ray_cpu"] else "-"))
    print("(%d rounds; raw TCP: iperf3 -P %d for %d s per round; ratios: medians of per-round "
          "ratios)" % (args.rounds, args.iperf_parallel, args.iperf_seconds))
    print("load average (1 min) before: %.2f, at each round's start: %s" % (
        load_before, ", ".join("%s/%d %.2f" % (name, i + 1, load) for name, i, load in loads)))
    if args.json:
        write_results(args.json, "transfer_bench", rows_of(sizes, rows, args.tls), started,
                      load_before, args.rounds, quick=args.quick,
                      raw={"rounds": {str(size): rows[size] for size in sizes}, "loads": loads,
                           "iperf_seconds": args.iperf_seconds,
                           "iperf_parallel": args.iperf_parallel, "tls": args.tls})


if __name__ == "__main__":
    sys.exit(main())
