#!/usr/bin/env python3
"""Cross-node object transfer GB/s between two network namespaces: Troupe vs Ray vs raw TCP.

Puts two nodes in two network namespaces (scripts/netns.sh up PREFIX 2: 10.99.0.1 and 10.99.0.2
on a bridge), then, in turn:
  - raw TCP: iperf3 server on node 1, client on node 2 (1 stream and --parallel streams);
  - Troupe: head on node 1, worker on node 2 (--node-ip-address 10.99.0.I), driver
    bazel-bin/bench/transfer_bench on node 1: a task makes the object on node 1, a task on node 2
    times GetView of it (the transfer into node 2's store plus mapping it);
  - Ray: head and worker started the same way in the same namespaces; the same two tasks (numpy
    array made on node 1, ray.get of it timed in a task on node 2).
Every figure is the median of --iterations; GB/s = bytes / seconds / 1e9. Prints a table with
the ratios. Needs root (namespaces). Every process it starts lives in its namespaces and is
killed with them (netns.sh down) at the end.
Usage: python3 bench/transfer_bench.py [--sizes 1048576,104857600,1073741824] [--iterations 5]
       (bench/transfer_bench.sh builds Troupe first and runs this)
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

NETNS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "netns.sh")
PORT = 6380

RAY_DRIVER = r'''
import json, sys, time
import numpy as np
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init(address=sys.argv[1])
sizes = [int(s) for s in sys.argv[2].split(",")]
iterations = int(sys.argv[3])
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
    ok = value.size == size and (size == 0 or (value[0] == seed and value[-1] == seed))
    return seconds if ok else -1.0

for size in sizes:
    times = []
    for i in range(iterations):
        obj = make_bytes.options(scheduling_strategy=on(producer)).remote(size, i + 1)
        ray.wait([obj])
        seconds = ray.get(time_get.options(scheduling_strategy=on(consumer)).remote([obj], size, i + 1))
        assert seconds >= 0, "the consumer read a wrong object"
        times.append(seconds)
        del obj
    median = sorted(times)[len(times) // 2]
    print(json.dumps({"bytes": size, "seconds": median, "gbps": size / median / 1e9}), flush=True)
'''


def run(cmd, check=True, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if check and result.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s%s" % (" ".join(cmd), result.returncode,
                                                     result.stdout, result.stderr))
    return result


def on_node(prefix, i, cmd):
    return ["bash", NETNS, "exec", prefix, str(i), "--"] + cmd


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def iperf(prefix, parallel, seconds):
    server = subprocess.Popen(on_node(prefix, 1, ["iperf3", "-s", "-1"]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):  # the server needs a moment to listen
            result = run(on_node(prefix, 2, ["iperf3", "-c", "10.99.0.1", "-J", "-t", str(seconds),
                                             "-P", str(parallel)]), check=False)
            if result.returncode == 0:
                return json.loads(result.stdout)["end"]["sum_received"]["bits_per_second"] / 8e9
            time.sleep(0.1)
        raise RuntimeError("iperf3 did not connect: " + result.stdout + result.stderr)
    finally:
        server.wait(timeout=seconds + 10)


def troupe_side(prefix, troupe, bench, sizes, iterations):
    temp = tempfile.mkdtemp(prefix="xf-troupe-")
    try:
        run(on_node(prefix, 1, [troupe, "start", "--head", "--port=%d" % PORT,
                                "--node-ip-address=10.99.0.1", "--num-cpus=2", "--http-port=0",
                                "--temp-dir=" + temp + "/n1"]))
        run(on_node(prefix, 2, [troupe, "start", "--address=10.99.0.1:%d" % PORT,
                                "--node-ip-address=10.99.0.2", "--num-cpus=2",
                                "--temp-dir=" + temp + "/n2"]))
        with open(os.path.join(temp, "n1", "session_latest", "token")) as f:
            token = f.read().strip()
        status = json.loads(run(on_node(prefix, 1, [troupe, "status", "--format=json",
                                                    "--temp-dir=" + temp + "/n1"])).stdout)
        deadline = time.time() + 30
        while len([n for n in status["nodes"] if n["state"] == "ALIVE"]) < 2:
            if time.time() > deadline:
                raise RuntimeError("the worker node did not join: %s" % status)
            time.sleep(0.2)
            status = json.loads(run(on_node(prefix, 1, [troupe, "status", "--format=json",
                                                        "--temp-dir=" + temp + "/n1"])).stdout)
        ids = {n["node_ip"]: n["node_id"] for n in status["nodes"] if n["state"] == "ALIVE"}
        env = dict(os.environ, TROUPE_ADDRESS="10.99.0.1:%d" % PORT, TROUPE_TOKEN=token)
        out = run(on_node(prefix, 1, [bench, "--producer=" + ids["10.99.0.1"],
                                      "--consumer=" + ids["10.99.0.2"],
                                      "--sizes=" + ",".join(map(str, sizes)),
                                      "--iterations=%d" % iterations]), env=env).stdout
        return {line["bytes"]: line["gbps"] for line in json_lines(out)}
    finally:
        for i in (1, 2):
            run(on_node(prefix, i, [troupe, "stop", "--force", "--temp-dir=%s/n%d" % (temp, i)]),
                check=False)
        shutil.rmtree(temp, ignore_errors=True)


def ray_side(prefix, ray, python, sizes, iterations):
    temp = tempfile.mkdtemp(prefix="xf-ray-")
    store = str(max(sizes) * 3)
    try:
        run(on_node(prefix, 1, [ray, "start", "--head", "--port=%d" % PORT,
                                "--node-ip-address=10.99.0.1", "--num-cpus=2",
                                "--object-store-memory=" + store, "--include-dashboard=false",
                                "--temp-dir=" + temp]))
        run(on_node(prefix, 2, [ray, "start", "--address=10.99.0.1:%d" % PORT,
                                "--node-ip-address=10.99.0.2", "--num-cpus=2",
                                "--object-store-memory=" + store]))
        out = run(on_node(prefix, 1, [python, "-c", RAY_DRIVER, "10.99.0.1:%d" % PORT,
                                      ",".join(map(str, sizes)), str(iterations)])).stdout
        return {line["bytes"]: line["gbps"] for line in json_lines(out)}
    finally:
        shutil.rmtree(temp, ignore_errors=True)  # the processes go with the namespaces


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prefix", default="xf", help="netns.sh prefix (namespaces made here)")
    parser.add_argument("--troupe", default="bazel-bin/src/cli/troupe")
    parser.add_argument("--bench", default="bazel-bin/bench/transfer_bench")
    venv = os.path.expanduser("~/.cache/troupe-bench-venv/bin")
    parser.add_argument("--ray", default=os.path.join(venv, "ray"))
    parser.add_argument("--python", default=os.path.join(venv, "python"))
    parser.add_argument("--sizes", default="1048576,104857600,1073741824")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--iperf-seconds", type=int, default=5)
    parser.add_argument("--iperf-parallel", type=int, default=4)
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    troupe, bench = os.path.abspath(args.troupe), os.path.abspath(args.bench)

    run(["bash", NETNS, "down", args.prefix], check=False)
    run(["bash", NETNS, "up", args.prefix, "2"])
    try:
        tcp1 = iperf(args.prefix, 1, args.iperf_seconds)
        tcpn = iperf(args.prefix, args.iperf_parallel, args.iperf_seconds)
        print("raw TCP (iperf3): %.2f GB/s with 1 stream, %.2f GB/s with %d" %
              (tcp1, tcpn, args.iperf_parallel), flush=True)
        ours = troupe_side(args.prefix, troupe, bench, sizes, args.iterations)
        print("troupe:", ours, flush=True)
        run(["bash", NETNS, "down", args.prefix], check=False)  # nothing of Troupe's survives
        run(["bash", NETNS, "up", args.prefix, "2"])
        theirs = {} if args.no_ray else ray_side(args.prefix, args.ray, args.python, sizes,
                                                 args.iterations)
        print("ray:", theirs, flush=True)
    finally:
        run(["bash", NETNS, "down", args.prefix], check=False)

    tcp = max(tcp1, tcpn)
    print()
    print("%-10s %12s %10s %14s %12s %10s" % ("size", "troupe GB/s", "ray GB/s", "raw TCP GB/s",
                                              "troupe/TCP", "troupe/ray"))
    for size in sizes:
        t, r = ours.get(size), theirs.get(size)
        label = "%d MB" % (size >> 20) if size < (1 << 30) else "%d GB" % (size >> 30)
        print("%-10s %12.2f %10s %14.2f %11.2fx %10s" % (
            label, t, "%.2f" % r if r else "-", tcp, t / tcp, "%.1fx" % (t / r) if r else "-"))
    print("(raw TCP: the better of iperf3 with 1 and %d streams: %.2f / %.2f GB/s)" %
          (args.iperf_parallel, tcp1, tcpn))


if __name__ == "__main__":
    sys.exit(main())
