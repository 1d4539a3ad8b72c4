#!/usr/bin/env python3
"""TLS cost: the same two-node cluster (a head and one worker node on this machine, started
through the CLI) with --tls=off and --tls=on, the same driver (bench/tls_bench.cc) against each,
and the on/off ratio per metric: small tasks, small actor calls, node-to-node object transfer.

  bazel build -c opt //src/cli:troupe //bench:tls_bench
  python3 bench/tls_bench.py [--seconds 3] [--transfer-mb 100] [--rounds 2]

Both clusters bind 127.0.0.1 (TLS is forced on with --tls=on); the cost measured is TLS's own
(handshakes, encryption, framing), not the network's.
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import tempfile


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cluster(troupe, bench, tls, seconds, transfer_mb):
    root = tempfile.mkdtemp(prefix="troupe_tls_bench_")
    env = dict(os.environ, TROUPE_TEMP_DIR=root)
    for name in ("TROUPE_ADDRESS", "TROUPE_TOKEN", "TROUPE_TLS_DIR"):
        env.pop(name, None)
    port = free_port()
    try:
        subprocess.run([troupe, "start", "--head", "--port=%d" % port, "--http-port=0",
                        "--num-cpus=2", "--tls=" + tls], env=env, check=True,
                       capture_output=True, text=True)
        # The worker node joins from the same machine: it trusts the head through the local
        # session (with TLS on, as a remote node would through --ca-cert-hash).
        subprocess.run([troupe, "start", "--address=127.0.0.1:%d" % port, "--num-cpus=2",
                        '--resources={"remote": 2}'], env=env, check=True,
                       capture_output=True, text=True)
        out = subprocess.run([bench, "--seconds=%g" % seconds, "--transfer-mb=%d" % transfer_mb],
                             env=dict(env, TROUPE_ADDRESS="127.0.0.1:%d" % port), check=True,
                             capture_output=True, text=True, timeout=600).stdout
        return {m["metric"]: m for m in map(json.loads, out.strip().splitlines())}
    finally:
        subprocess.run([troupe, "stop", "--force"], env=env, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--troupe", default="bazel-bin/src/cli/troupe")
    parser.add_argument("--bench", default="bazel-bin/bench/tls_bench")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--transfer-mb", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2,
                        help="alternate off/on this many times; the best of each is kept")
    args = parser.parse_args()
    best = {"off": {}, "on": {}}
    for _ in range(args.rounds):
        for tls in ("off", "on"):
            for metric, m in run_cluster(args.troupe, args.bench, tls, args.seconds,
                                         args.transfer_mb).items():
                if metric not in best[tls] or m["value"] > best[tls][metric]["value"]:
                    best[tls][metric] = m
    print("%-24s %14s %14s %8s  %s" % ("metric", "TLS off", "TLS on", "on/off", "unit"))
    for metric, off in best["off"].items():
        on = best["on"].get(metric)
        if on is None:
            continue
        print("%-24s %14.2f %14.2f %7.2fx  %s" % (metric, off["value"], on["value"],
                                                   on["value"] / off["value"], off["unit"]))


if __name__ == "__main__":
    main()
