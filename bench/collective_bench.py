#!/usr/bin/env python3
"""Collective benchmark, nccl-tests style: Troupe's CPU backend (bench/collective_bench.cc) and
PyTorch's gloo backend (bench/gloo_bench.py) in the same run, same ranks, sizes and dtype (f32).
Prints, per operation, rank count and size: time and bus bandwidth of both, and the ratio
(Troupe busbw / gloo busbw; above 1 means Troupe is faster).

  bazel build -c opt //bench:collective_bench
  python3 bench/collective_bench.py            # needs Debian's python3-torch (/usr/bin/python3)

Across hosts (--netns, needs root): one network namespace per node, each with its own /dev/shm
(scripts/netns.sh up --private-shm, as on separate hosts), a Troupe cluster with the head in node 1 and a worker in each other node, the Troupe members placed one
per node (collective_bench --spread, so they talk over TCP), gloo's ranks started one per node
with MASTER_ADDR = node 1. All-reduce at 4 KB and 45 MB, --repeat rounds alternating Troupe and
gloo; the table shows the median of each and the ratio:

  bazel build -c opt //src/cli:troupe //bench:collective_bench
  python3 bench/collective_bench.py --netns
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

from bench_common import json_lines

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NETNS = os.path.join(ROOT, "scripts", "netns.sh")


def human(nbytes):
    for unit in ("B", "KB", "MB", "GB"):
        if nbytes < 1024 or unit == "GB":
            return "%g %s" % (nbytes, unit)
        nbytes /= 1024


def run(cmd, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


class NetnsCluster:
    """Nodes 1..n in network namespaces PREFIXn1..n (10.99.0.I); a Troupe head in node 1 and a
    worker node in each other one, each with its own temp dir. Torn down on exit."""

    def __init__(self, args, n):
        self.args, self.n, self.prefix = args, n, args.netns_prefix
        self.temps = []
        check = run([NETNS, "check"])
        if check.returncode != 0:
            raise SystemExit("--netns: " + check.stdout.strip())
        # Each node gets its own /dev/shm, as separate hosts (or containers) have: otherwise
        # members on different nodes would rightly talk through shared memory, not TCP.
        up = run([NETNS, "up", self.prefix, str(n)] + ([] if args.shared_shm else ["--private-shm"]))
        if up.returncode != 0:
            raise SystemExit("--netns: " + up.stderr.strip())

    def ip(self, node):
        return "10.99.0.%d" % node

    def exec_args(self, node, env=None):
        env_args = ["env"] + ["%s=%s" % kv for kv in (env or {}).items()]
        return [NETNS, "exec", self.prefix, str(node), "--"] + env_args

    def start_troupe(self):
        troupe = os.path.abspath(self.args.troupe_cli)
        common = ["--num-cpus=2", "--object-store-memory=256MiB"]
        for node in range(1, self.n + 1):
            temp = tempfile.mkdtemp(prefix="troupe-coll-n%d-" % node)
            self.temps.append(temp)
            if node == 1:
                cmd = [troupe, "start", "--head", "--port=6380", "--http-port=0"]
            else:
                cmd = [troupe, "start", "--address=%s:6380" % self.ip(1), "--token=" + self.token]
            cmd += ["--node-ip-address=" + self.ip(node), "--temp-dir=" + temp] + common
            started = run(self.exec_args(node) + cmd)
            if started.returncode != 0:
                raise SystemExit(" ".join(cmd) + "\n" + started.stdout + started.stderr)
            if node == 1:
                with open(os.path.join(temp, "session_latest", "token")) as f:
                    self.token = f.read().strip()
        status = [troupe, "status", "--format=json", "--address=%s:6380" % self.ip(1),
                  "--token=" + self.token]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            out = run(self.exec_args(1) + status)
            if out.returncode == 0 and sum(
                    node["state"] == "ALIVE" for node in json.loads(out.stdout)["nodes"]) == self.n:
                return
            time.sleep(0.2)
        raise SystemExit("the %d Troupe nodes did not all join within 60 s" % self.n)

    def close(self):
        troupe = os.path.abspath(self.args.troupe_cli)
        for temp in self.temps:
            run([troupe, "stop", "--force", "--temp-dir=" + temp])
            shutil.rmtree(temp, ignore_errors=True)
        run([NETNS, "down", self.prefix])


def sweep_args(args):
    return ["--min-bytes=4096", "--max-bytes=4096", "--extra-bytes=%d" % (45 << 20),
            "--seconds=%g" % args.seconds]


def netns_troupe(cluster, args, world):
    env = {"TROUPE_ADDRESS": "%s:6380" % cluster.ip(1), "TROUPE_TOKEN": cluster.token}
    return json_lines(cluster.exec_args(1, env) + [
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
    cluster = NetnsCluster(args, max(args.ranks))
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
