#!/usr/bin/env python3
"""TLS cost: the same two-node cluster (a head and one worker node on this machine, started
through the CLI) with --tls=off and --tls=on, the same driver (bench/tls_bench.cc) against each,
and the on/off ratio per metric: small tasks, small actor calls, node-to-node object transfer.
Rounds alternate (off, on, off, on, ...); the table prints each side's median and the median of
the per-round on/off ratios with their range (below 1: what TLS costs), and the 1-minute load
average at each side's start.

  bazel build -c opt //src/cli:troupe //bench:tls_bench
  python3 bench/tls_bench.py [--seconds 3] [--transfer-mb 100] [--rounds 2]
  python3 bench/tls_bench.py --quick --json results.json   # 1 s per metric, 20 MB transfers

Both clusters bind 127.0.0.1 (TLS is forced on with --tls=on); the cost measured is TLS's own
(handshakes, encryption, framing), not the network's.

--json FILE writes the results file of bench/bench_common.py (bench/run_all.sh collects them):
one row per metric with Troupe's TLS-on figure and the peer tls_off (Troupe with TLS off), so the
ratio is on/off: below 1 is TLS's cost; each round's figures and load averages in "raw".
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

from bench_common import alternate, load_average, summary_row, write_results

NOTE = "Troupe with TLS on vs off (peer tls_off): the ratio is on/off, below 1 is TLS's cost"


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


def rows(results):
    """One row per metric the TLS-off rounds reported: TLS on against the peer tls_off."""
    on = results["on"]
    metrics = {m: r["unit"] for round_ in results["off"] for m, r in round_.items()}
    return [summary_row(metric, unit, [r[metric]["value"] if metric in r else None for r in on],
                        {"tls_off": [r[metric]["value"] if metric in r else None
                                     for r in results["off"]]},
                        higher_is_better=True, note=NOTE)
            for metric, unit in metrics.items()]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--troupe", default="bazel-bin/src/cli/troupe")
    parser.add_argument("--bench", default="bazel-bin/bench/tls_bench")
    parser.add_argument("--seconds", type=float, default=None, help="default 3 (--quick: 1)")
    parser.add_argument("--transfer-mb", type=int, default=None, help="default 100 (--quick: 20)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="alternate off/on this many times; medians and per-round ratios")
    parser.add_argument("--quick", action="store_true",
                        help="1 s per metric and 20 MB transfers unless given")
    parser.add_argument("--json", metavar="FILE", help="also write a results file (see above)")
    args = parser.parse_args()
    if args.seconds is None:
        args.seconds = 1.0 if args.quick else 3.0
    if args.transfer_mb is None:
        args.transfer_mb = 20 if args.quick else 100

    started, load_before = time.time(), load_average()
    results, loads = alternate(
        [(tls, lambda tls=tls: run_cluster(args.troupe, args.bench, tls, args.seconds,
                                           args.transfer_mb)) for tls in ("off", "on")],
        args.rounds)
    table = rows(results)
    print("%-24s %14s %14s %8s  %s" % ("metric", "TLS off", "TLS on", "on/off", "unit"))
    for row in table:
        ratio = row["ratios"].get("tls_off")
        if row["troupe"] is None or ratio is None:
            continue
        print("%-24s %14.2f %14.2f %7.2fx  %s  [%.2f-%.2f]" % (
            row["metric"], row["peers"]["tls_off"], row["troupe"], ratio[0], row["unit"],
            ratio[1], ratio[2]))
    print("medians of %d rounds; on/off: median of the per-round ratios [min-max]; load average "
          "(1 min) before: %.2f, at each side's start: %s" % (
              args.rounds, load_before,
              ", ".join("%s%d %.2f" % (name, i + 1, load) for i, name, load in loads)))
    if args.json:
        write_results(args.json, "tls_bench", table, started, load_before, args.rounds,
                      quick=args.quick, raw={"rounds": results, "loads": loads,
                                             "seconds": args.seconds,
                                             "transfer_mb": args.transfer_mb})


if __name__ == "__main__":
    main()
