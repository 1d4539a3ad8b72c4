#!/usr/bin/env python3
"""Task and object microbenchmarks: Troupe (bench/task_bench.cc) beside Ray's own benchmark
program (ray/_private/ray_perf.py, what `ray microbenchmark` runs; bench/ray_perf_run.py runs it
unchanged, with Ray's defaults) in one run, with the Troupe/Ray ratio per metric.

  bazel build -c opt //bench:task_bench
  bash bench/setup_peers.sh            # a virtualenv with Ray (PyPI)
  python3 bench/microbenchmark.py --python ~/.cache/troupe-bench-venv/bin/python

The Ray column comes from Ray's own program for every metric it has ("ray_perf" in the source
column); bench/ray_microbench.py (a replica of its workloads) gives only the metrics it lacks
("replica"). task_bench.cc runs the same workloads as ray_perf.py. The sides alternate, Troupe
then Ray, for --rounds rounds (at least 3 for a figure to quote); each row gives the median of
each side, the median Troupe/Ray ratio over the rounds with its min-max, and the 1-minute load
average at the start of each side is printed. If the machine was already loaded before the
first side started (load average above --loaded-threshold), every figure is marked as such.

Small puts: Troupe keeps a put of up to max_inline_bytes (100 KiB) in the putting process's
memory; Ray's ray.put always writes its shared-memory store (Plasma). So single_client_put_calls
and single_client_get_calls run Troupe with --max_inline_bytes=0 (its puts go to the
shared-memory store as Ray's do), and Troupe's default path shows as *_inline with no Ray figure.

Put bandwidth: Ray's program puts np.zeros (800 MiB never written: every read hits the kernel's
one zero page). single_client_put_gigabytes puts the same kind of memory on both sides;
single_client_put_gigabytes_touched puts 800 MiB of written, non-zero data on both; the
one-thread memcpy floors (warm destination; fresh destination; zero-page source) are printed
beside them. Ray's "gigabytes" count 0.8 per 800 MiB: they are converted to GB (1e9 bytes).

Troupe's side also measures the physical floor of pipelined task pushes (grpc_unary_async_calls:
bare gRPC unary calls to a worker process with 8 in flight) and prints single_client_tasks_async's
ratio to it; Ray's column is n/a for such floors.

--ray-cpp: Ray's C++ API (bench/ray_cpp_bench.sh, against a `ray start` head of its own) runs as
a third side of every round (Troupe, Ray Python, Ray C++), and a second table shows the Ray C++
column beside Ray Python's.

--json FILE writes the results file bench/run_all.sh collects (format: bench/bench_common.py):
one row per metric with each side's median and the per-round ratios, and every round's figures.

--tls=on|off: Troupe's side runs against a head started through the CLI (2 CPUs, on loopback)
with that --tls, instead of an embedded cluster, so the Ray ratios can be read with TLS on.
"""
import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from bench_common import (alternate, busy_before, is_loaded, json_lines, load_average, median_of,
                          ratio_range, summary_row, write_results)
from ray_cpp_bench import print_beside, ray_cpp_metrics

HERE = os.path.dirname(os.path.abspath(__file__))
# Troupe-side measurements of the physical floor (bare gRPC calls, memcpy): Ray's column is n/a.
PHYSICAL_FLOORS = {"grpc_unary_round_trip_us", "grpc_unary_async_calls",
                   "grpc_unary_async_calls_window_4", "single_client_tasks_async_over_grpc_floor",
                   "memcpy_warm_gigabytes", "memcpy_fresh_gigabytes",
                   "memcpy_zero_source_gigabytes"}
# Ray's "gigabytes": 0.8 per put of 100 * 1024 * 1024 int64 (838,860,800 bytes); to GB (1e9).
RAY_GIGABYTES_TO_GB = 100 * 1024 * 1024 * 8 / 1e9 / 0.8
# Ray's own program's metric names (ray_perf.py) -> (ours, factor to our unit). Ray's async
# actors have no Troupe counterpart (Troupe has none); they show with no Troupe figure.
RAY_PERF = {
    "single client get calls (Plasma Store)": ("single_client_get_calls", 1),
    "single client put calls (Plasma Store)": ("single_client_put_calls", 1),
    "multi client put calls (Plasma Store)": ("multi_client_put_calls", 1),
    "single client put gigabytes": ("single_client_put_gigabytes", RAY_GIGABYTES_TO_GB),
    "single client tasks and get batch": ("single_client_tasks_and_get_batch", 1),
    "multi client put gigabytes": ("multi_client_put_gigabytes", RAY_GIGABYTES_TO_GB),
    "single client get object containing 10k refs":
        ("single_client_get_object_containing_10k_refs", 1),
    "single client wait 1k refs": ("single_client_wait_1k_refs", 1),
    "single client tasks sync": ("single_client_tasks_sync", 1),
    "single client tasks async": ("single_client_tasks_async", 1),
    "multi client tasks async": ("multi_client_tasks_async", 1),
    "1:1 actor calls sync": ("1_1_actor_calls_sync", 1),
    "1:1 actor calls async": ("1_1_actor_calls_async", 1),
    "1:1 actor calls concurrent": ("1_1_actor_calls_concurrent", 1),
    "1:n actor calls async": ("1_n_actor_calls_async", 1),
    "n:n actor calls async": ("n_n_actor_calls_async", 1),
    "n:n actor calls with arg async": ("n_n_actor_calls_with_arg_async", 1),
    "1:1 async-actor calls sync": ("1_1_async_actor_calls_sync", 1),
    "1:1 async-actor calls async": ("1_1_async_actor_calls_async", 1),
    "1:1 async-actor calls with args async": ("1_1_async_actor_calls_with_args_async", 1),
    "1:n async-actor calls async": ("1_n_async_actor_calls_async", 1),
    "n:n async-actor calls async": ("n_n_async_actor_calls_async", 1),
    "placement group create/removal": ("placement_group_create_removal_per_second", 1),
}
# Ray's metrics that Troupe has no figure for: its async actors (Troupe has none yet) and
# multi-client puts into the shared-memory store (a Troupe worker's small puts stay in its own
# memory: only the *_inline figure exists). --compared-only leaves them out.
NO_TROUPE_FIGURE = {"multi_client_put_calls", "1_1_async_actor_calls_sync",
                    "1_1_async_actor_calls_async", "1_1_async_actor_calls_with_args_async",
                    "1_n_async_actor_calls_async", "n_n_async_actor_calls_async"}
# Derived from a figure of Ray's own program: the sync actor call latency.
RAY_PERF_DERIVED = {"1_1_actor_call_sync_latency_us": ("1_1_actor_calls_sync", 1e6)}
# Metrics Ray's program lacks: Ray's figure comes from the replica (bench/ray_microbench.py).
REPLICA_ONLY = ["single_client_put_gigabytes_touched", "actor_creation_per_second"]
# Troupe's default small-object path (kept in the putting process's memory): Ray's ray.put has
# none, so no Ray figure (n/a).
INLINE = {"single_client_get_calls_inline", "single_client_put_calls_inline",
          "multi_client_put_calls_inline"}
# Run with --max_inline_bytes=0 (the driver's puts go to the shared-memory store, as Ray's do).
STORE_RUN = ["single_client_get_calls", "single_client_put_calls"]
UNITS = {"single_client_put_gigabytes": "GB_per_second",
         "multi_client_put_gigabytes": "GB_per_second",
         "single_client_tasks_and_get_batch": "batches_per_second",
         "1_1_actor_call_sync_latency_us": "microseconds"}


def run(command, env=None):
    return {r["metric"]: (r["value"], r["unit"]) for r in json_lines(command, env=env)}


@contextlib.contextmanager
def cli_cluster(troupe_cli, tls):
    """A one-node cluster through the CLI with --tls=tls; yields the environment for a driver."""
    temp = tempfile.mkdtemp(prefix="troupe-microbench-")
    try:
        with socket.socket() as probe:  # a free port for the GCS
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        subprocess.run([troupe_cli, "start", "--head", "--num-cpus=2", "--port=%d" % port,
                        "--http-port=0", "--temp-dir=" + temp, "--tls=" + tls,
                        # ray_perf.py's placement groups use {"custom": 0.001} bundles
                        '--resources={"custom": 100}'], check=True, capture_output=True, text=True)
        session = os.path.join(temp, "session_latest")
        with open(os.path.join(session, "address")) as f:
            address = f.read().strip()
        with open(os.path.join(session, "token")) as f:
            token = f.read().strip()
        env = dict(os.environ, TROUPE_ADDRESS=address, TROUPE_TOKEN=token)
        if tls == "on":
            env["TROUPE_TLS_DIR"] = os.path.join(session, "tls")
        yield env
    finally:
        subprocess.run([troupe_cli, "stop", "--force", "--temp-dir=" + temp], capture_output=True)
        shutil.rmtree(temp, ignore_errors=True)


def troupe_side(args, only, env):
    """One run of Troupe's side: {metric: value} and {metric: unit}."""
    def task_bench(extra, wanted):
        """task_bench with `extra` flags, limited to `wanted` (None: every metric)."""
        flags = [args.troupe, "--seconds=%g" % args.seconds] + extra
        if wanted is not None:
            if not wanted:
                return {}
            flags.append("--only=" + ",".join(sorted(wanted)))
        return run(flags, env=env)

    store_wanted = [m for m in STORE_RUN if only is None or m in only]
    default_wanted = None
    if only is not None:
        # The store run gives the plain put/get calls; *_inline are the default run's.
        default_wanted = {m[:-len("_inline")] if m.endswith("_inline") else m
                          for m in only if m not in STORE_RUN}
        if "single_client_tasks_and_get_batch" in default_wanted:
            default_wanted.add("single_client_tasks_async")
    values, units = {}, {}
    for metric, (value, unit) in task_bench([], default_wanted).items():
        if metric in STORE_RUN or metric == "multi_client_put_calls":
            metric += "_inline"
        values[metric], units[metric] = value, unit
    for metric, (value, unit) in task_bench(["--max_inline_bytes=0"], store_wanted).items():
        values[metric], units[metric] = value, unit
    if "single_client_tasks_async" in values:  # ray_perf.py's batch: the same 1,000 tasks
        values["single_client_tasks_and_get_batch"] = values["single_client_tasks_async"] / 1000
        units["single_client_tasks_and_get_batch"] = "batches_per_second"
    return values, units


def ray_side(args, only):
    """One run of Ray's side: {metric: value}, {metric: unit}, {metric: source}."""
    values, units, sources = {}, {}, {}
    wanted = None
    if only is not None:
        wanted = set(only) | {RAY_PERF_DERIVED[m][0] for m in only if m in RAY_PERF_DERIVED}
    ray_names = [n for n, (ours, _) in RAY_PERF.items() if (wanted is None or ours in wanted)
                 and not (args.compared_only and ours in NO_TROUPE_FIGURE)]
    if ray_names:
        command = [args.python, os.path.join(HERE, "ray_perf_run.py")]
        if only is not None or args.compared_only:
            command.append("--only=" + ";".join(ray_names))
        if args.ray_sleep is not None:
            command.append("--sleep=%g" % args.ray_sleep)
        for record in json_lines(command):
            ours, factor = RAY_PERF[record["metric"]]
            values[ours] = record["value"] * factor
            units[ours] = UNITS.get(ours, "per_second")
            sources[ours] = "ray_perf" if args.ray_sleep is None else \
                "ray_perf (sleep %gs)" % args.ray_sleep
    for metric, (base, numerator) in RAY_PERF_DERIVED.items():
        if base in values and (only is None or metric in only):
            values[metric] = numerator / values[base]
            units[metric] = UNITS[metric]
            sources[metric] = sources[base] + ", derived"
    if only is not None:  # run only to derive another: not a row of its own
        values = {m: v for m, v in values.items() if m in only}
    replica = [m for m in REPLICA_ONLY if only is None or m in only]
    if replica:
        command = [args.python, os.path.join(HERE, "ray_microbench.py"), str(args.seconds),
                   "--only=" + ",".join(replica)]
        for metric, (value, unit) in run(command).items():
            values[metric], units[metric], sources[metric] = value, unit, "replica"
    return values, units, sources


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--troupe", default="bazel-bin/bench/task_bench")
    parser.add_argument("--python", default=os.path.expanduser("~/.cache/troupe-bench-venv/bin/python"))
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="Troupe's and the replica's time per metric (Ray's program: its own)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of Troupe then Ray (at least 3 for a figure to quote)")
    parser.add_argument("--only", default="",
                        help="comma-separated metrics (ours) to run on both sides; default all")
    parser.add_argument("--ray-sleep", type=float, default=None,
                        help="replace the 10 s sleep of Ray's timeit before each metric (quick "
                             "checks only; the source column says so)")
    parser.add_argument("--loaded-threshold", type=float, default=0.5 * (os.cpu_count() or 1),
                        help="1-minute load average before the first side above which every "
                             "figure is marked as from a loaded machine (default: half the cores)")
    parser.add_argument("--json", help="also write every round's raw figures to this file")
    parser.add_argument("--tls", choices=["on", "off"],
                        help="run Troupe's side against a CLI-started head with this --tls")
    parser.add_argument("--troupe-cli", default="bazel-bin/src/cli/troupe")
    parser.add_argument("--ray-cpp", action="store_true",
                        help="add Ray's C++ API (bench/ray_cpp_bench.sh) as a third side")
    parser.add_argument("--quick", action="store_true",
                        help="mark the results file as a quick run (not for quoting)")
    parser.add_argument("--compared-only", action="store_true",
                        help="leave out Ray's metrics that have no Troupe figure to compare "
                             "(%s): bench/run_all.sh's full run does, for time" %
                             ", ".join(sorted(NO_TROUPE_FIGURE)))
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    only = {m for m in args.only.split(",") if m} or None

    units, sources = {}, {}

    def troupe_run(env):
        values, u = troupe_side(args, only, env)
        units.update(u)
        return values

    def ray_run():
        values, u, s = ray_side(args, only)
        for metric, unit in u.items():
            units.setdefault(metric, unit)
        sources.update(s)
        return values

    cpp_units, cpp_unsupported = {}, {}

    def ray_cpp_run():
        venv = os.path.dirname(os.path.dirname(os.path.abspath(args.python)))
        measured, unsupported = ray_cpp_metrics(args.seconds,
                                                only=sorted(only) if only else None, venv=venv)
        cpp_unsupported.update(unsupported)
        cpp_units.update({m: unit for m, (_, unit) in measured.items()})
        return {m: value for m, (value, _) in measured.items()}

    started = time.time()
    load_before = load_average()
    sides = [("troupe", lambda: troupe_run(env)), ("ray", ray_run)]
    if args.ray_cpp:  # Ray's C++ API is a third side of every round
        sides.append(("ray_cpp", ray_cpp_run))
    with (cli_cluster(args.troupe_cli, args.tls) if args.tls else contextlib.nullcontext(None)) \
            as env:
        results, loads = alternate(sides, args.rounds)
    troupe, ray = results["troupe"], results["ray"]
    ray_cpp = results.get("ray_cpp", [])
    loaded = is_loaded(load_before, args.loaded_threshold)
    mark = "*" if loaded else ""

    metrics = []
    for rounds in (troupe, ray):
        for r in rounds:
            metrics += [m for m in r if m not in metrics]
    print("%-46s %14s %14s %22s  %-22s %s" %
          ("metric", "troupe", "ray", "troupe/ray [min-max]", "ray source", "unit"))
    for metric in metrics:
        t, r = median_of(troupe, metric), median_of(ray, metric)
        unit = units.get(metric, "")
        t_text = "%14.2f" % t if t is not None else "%14s" % "-"
        if metric in PHYSICAL_FLOORS or metric in INLINE:
            r_text, ratio_text, source = "%14s" % "n/a", "-", ""
        else:
            r_text = "%14.2f" % r if r is not None else "%14s" % "-"
            source = sources.get(metric, "")
            ratio = ratio_range(troupe, ray, metric, invert=(unit == "microseconds"))
            ratio_text = ("%.2fx [%.2f-%.2f]" % ratio[:3]) + mark if ratio else "-"
        print("%-46s %s %s %22s  %-22s %s" % (metric + mark, t_text, r_text, ratio_text, source,
                                              unit))
    print("rounds: %d (Troupe then Ray each round); ratios: median [min-max] over the rounds; "
          "microseconds: Ray/Troupe" % args.rounds)
    print("load average (1 min) before the first side: %.2f; at each side's start: %s" %
          (load_before, ", ".join("%s%d %.2f" % (name, i + 1, load) for i, name, load in loads)))
    if loaded:
        print("* LOADED MACHINE: the machine was busy before the run (busy CPUs %s, load "
              "average %.2f; threshold %.2f); do not quote these figures" %
              (busy_before(), load_before, args.loaded_threshold))
    print("*_inline: Troupe's default small-object path (in the putting process's memory); "
          "Ray's ray.put always writes its shared-memory store, so there is no Ray figure")
    if "single_client_tasks_async_over_grpc_floor" in metrics:
        print("single_client_tasks_async / grpc_unary_async_calls (the floor): %.2f" %
              median_of(troupe, "single_client_tasks_async_over_grpc_floor"))
    for put in ("single_client_put_gigabytes", "single_client_put_gigabytes_touched"):
        for floor in ("memcpy_warm_gigabytes", "memcpy_zero_source_gigabytes"):
            p, f = median_of(troupe, put), median_of(troupe, floor)
            q = median_of(ray, put)
            if p and f:
                print("%s / %s (one thread): troupe %.2f, ray %s" %
                      (put, floor, p / f, "%.2f" % (q / f) if q else "-"))
    if args.json:
        write_results(args.json, "microbenchmark",
                      summary_rows(metrics, units, sources, troupe, ray, ray_cpp,
                                   cpp_unsupported),
                      started, load_before, args.rounds, quick=args.quick, loaded=loaded,
                      raw={"rounds": {"troupe": troupe, "ray": ray, "ray_cpp": ray_cpp},
                           "units": units, "ray_sources": sources, "loads": loads,
                           "ray_sleep": args.ray_sleep, "seconds": args.seconds,
                           "ray_cpp_unsupported": cpp_unsupported})
    if args.ray_cpp:
        # Ray's C++ API beside the medians of the rounds above.
        cpp_metrics = [m for r in ray_cpp for m in r]
        medians = [{m: (median_of(rounds, m), units.get(m) or cpp_units.get(m, ""))
                    for m in dict.fromkeys(metrics + cpp_metrics)
                    if median_of(rounds, m) is not None} for rounds in (troupe, ray, ray_cpp)]
        print_beside(medians[0], medians[1], medians[2], cpp_unsupported)
        print("Ray's C++ API ran as a third side of every round (%d rounds); its figures are "
              "medians" % args.rounds)


def summary_rows(metrics, units, sources, troupe, ray, ray_cpp, cpp_unsupported):
    """The results-file rows (bench_common.summary_row): every metric with Troupe's median and,
    where a peer has the metric, Ray Python's (its source in the note) and Ray C++'s, each with
    its per-round ratio. Physical floors and *_inline rows carry no peer."""
    rows = []
    for metric in metrics:
        unit = units.get(metric, "")
        per_round = lambda rounds: [r.get(metric) for r in rounds]
        peers = {}
        notes = []
        if metric not in PHYSICAL_FLOORS and metric not in INLINE:
            if any(v is not None for v in per_round(ray)):
                peers["ray_python"] = per_round(ray)
                notes.append("Ray Python: " + sources.get(metric, ""))
            if any(v is not None for v in per_round(ray_cpp)):
                peers["ray_cpp"] = per_round(ray_cpp)
            elif metric in cpp_unsupported:
                notes.append("not in Ray's C++ API: " + cpp_unsupported[metric][0])
        if metric in PHYSICAL_FLOORS:
            notes.append("a physical floor measured on Troupe's side")
        if metric in INLINE:
            notes.append("Troupe's default in-process small-object path; Ray has none")
        rows.append(summary_row(metric, unit, per_round(troupe), peers,
                                higher_is_better=(unit != "microseconds"),
                                note="; ".join(n for n in notes if n)))
    return rows

if __name__ == "__main__":
    main()
