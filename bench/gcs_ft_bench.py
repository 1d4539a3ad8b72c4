#!/usr/bin/env python3
"""GCS fault tolerance on Redis: Troupe vs Ray, side by side on this machine (issues 13, 32).

Both systems run one head with their real CLI and their defaults (the HTTP jobs API /
dashboard on, CPUs detected): `troupe start --head --redis-address=...` and `ray start --head`
(with RAY_REDIS_ADDRESS), on 127.0.0.1, each on its own private redis-server (a free port, a temp
dir, AOF on, SIGKILLed and removed when the head stops); the in-memory throughput runs start no
Redis at all. Only the fixed default ports are replaced by free ones, so that no other cluster on
the machine collides with them. One head at a time.

1. Recovery (lower is better). `--rounds` rounds, Troupe then Ray (A B A B ...), each a fresh
   head per side on its own Redis (one head at a time: an idle populated Ray head keeps about
   half a core busy per 50 actors), its driver holding one actor:
   a) near-empty: `--trials` SIGKILLs of the GCS;
   b) populated (the default; --no-populated skips it): then the head gets `--jobs` jobs
      (`echo done`) submitted through its HTTP jobs API (POST /api/jobs/, what `ray job submit`
      and JobSubmissionClient send) and run to SUCCEEDED, `--job-batch` at a time, and its driver
      creates `--live-actors` actors (no resources: num_cpus=0 on Ray; each called once),
      `--placement-groups` ready groups of one {CPU: --pg-cpu} bundle and `--kv-entries` entries
      in the GCS KV (Troupe: Runtime::KvPut; Ray: internal_kv._internal_kv_put); then `--trials`
      more kills. Kills are paced to at most 8 a minute per head (Troupe's head supervisor gives
      up on a GCS that dies more than 10 times a minute).
   From each kill, in parallel, as a real head's clients would all be waiting: a new GCS
   listening on the port (this program reads the kernel's socket table every 5 ms); a new actor
   created and answering; an actor made before the kill answering; the jobs list (GET
   /api/jobs/, polled every 10 ms by this program) showing every job SUCCEEDED; a KV entry
   written before the kill read back. After each kill the driver counts what came through:
   actors answering, groups ready, jobs listed, KV entries read back intact.
   - Troupe: the head's supervisor restarts the GCS by itself; the driver only kills the pid in
     <session>/pids/gcs.pid.
   - Ray (bench/gcs_ft_ray_driver.py): nothing restarts the GCS outside Kubernetes. As Ray's docs
     describe, the driver reads the gcs_server's command line and environment from /proc/<pid>
     before the kill, waits for the process to be gone, and relaunches the same command with the
     same environment (and the same stdout/stderr files) at once: an ideal supervisor, counted
     in Ray's time.
   Both drivers tolerate a 300 s outage: Troupe's sets a 300 s reconnect timeout, Ray's (and
   Ray's cluster) RAY_gcs_rpc_server_reconnect_timeout_s=300. A head that has not recovered by
   then (its driver gives up or dies) is counted as a failed kill, and its round goes on to the
   other side.
2. Cost of persistence (higher is better): on a fresh head with Redis and one without, `--actors`
   actors created in batches of 8, each called once and killed (actors/s), then `--pgs` placement
   groups of one {CPU: 1} bundle, each created, waited for and removed (PGs/s).

Prints each side's median over every trial and its min-max, Ray/Troupe per round (the round
medians' ratio; median [min-max] over the rounds), what came through, how long each population
took, what each head took in memory (PSS), and the load average at each head's start; --json
FILE writes one JSON object per metric line. --quick: fewer actors, jobs, trials and rounds (the
counts are printed first).

  bash bench/gcs_ft_bench.sh                 # builds, installs Ray if needed, runs this
  python3 bench/gcs_ft_bench.py [--quick] [--no-empty] [--no-populated] [--no-throughput]
      [--live-actors N] [--placement-groups N] [--jobs N] [--kv-entries N] [--trials N]
      [--rounds N] [--no-troupe] [--no-ray] [--keep-temp] [--json FILE]
"""
import argparse
import http.client
import os
import statistics
import sys
import threading
import time

from bench_common import alternate, load_average, per_round_ratios, ratio_range, write_results
from gcs_ft_heads import RayHead, Redis, TroupeHead, jobs_succeeded, pss_gib, submit_jobs

# ------------------------------------------------------------------------------- recovery

def poll_jobs(head, ids, t0, out, timeout=300):
    """From the kill (t0, CLOCK_MONOTONIC) on: GET /api/jobs/ until it lists every job of `ids`
    SUCCEEDED. Sets out["jobs_list"] (seconds from t0, -1 if never) and out["jobs_listed"] (the
    count the last answer had)."""
    out["jobs_list"], out["jobs_listed"] = -1, 0
    while time.monotonic() - t0 < timeout:
        try:
            out["jobs_listed"] = jobs_succeeded(head, ids)
            if out["jobs_listed"] == len(ids):
                out["jobs_list"] = time.monotonic() - t0
                return
        except (OSError, ValueError, RuntimeError, http.client.HTTPException):
            pass
        time.sleep(0.01)


# Troupe's head supervisor gives up on a GCS that died more than 10 times within a minute (a
# crash loop); kills are paced, on both sides alike, to at most this many a minute.
KILLS_PER_MINUTE = 8
# Seconds after a kill within which the driver must report its trial, or the kill counts as not
# recovered: the drivers themselves wait for the GCS up to 300 s (Troupe's default, and Ray's
# processes are given as long: RAY_ENV), which made one slow recovery cost five minutes.
KILL_BOUND_S = 120


def listening_sockets(port):
    """The inodes of the TCP sockets listening on `port` (any address, IPv4 or IPv6)."""
    inodes = set()
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(path) as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    return inodes


def watch_port(port, before, t0, out, timeout=300):
    """From the kill (t0) on, every 5 ms: sets out["listening_after"] (seconds from t0) once a
    socket listens on `port` that is not one of `before` (the killed GCS's): the new GCS
    listening, read from the kernel's socket table rather than by connecting (a probe from an
    ephemeral port to a port in the ephemeral range can connect to itself)."""
    out["listening_after"] = -1
    while time.monotonic() - t0 < timeout:
        if listening_sockets(port) - before:
            out["listening_after"] = time.monotonic() - t0
            return
        time.sleep(0.005)


def trial(head, driver, job_ids):
    """One SIGKILL of the GCS and what the driver, the jobs list and the GCS port saw."""
    recent = [t for t in head.kills if time.monotonic() - t < 60]
    if len(recent) >= KILLS_PER_MINUTE:
        time.sleep(max(0.0, recent[0] + 60.5 - time.monotonic()))
    head.kills.append(time.monotonic())
    before = listening_sockets(head.gcs_port)
    driver.send("kill")
    t0 = driver.read_event("killed")["t0"]
    seen = {}
    watchers = [threading.Thread(target=poll_jobs, args=(head, job_ids, t0, seen, KILL_BOUND_S)),
                threading.Thread(target=watch_port,
                                 args=(head.gcs_port, before, t0, seen, KILL_BOUND_S))]
    for watcher in watchers:
        watcher.start()
    try:
        line = driver.read_event("trial", KILL_BOUND_S - (time.monotonic() - t0))
    finally:
        for watcher in watchers:
            watcher.join()
    head.note_gcs(line["new_gcs_pid"])
    line.update(seen, jobs=len(job_ids))
    return line


def populate(args, head, driver):
    """Jobs through the head's HTTP API, then actors, placement groups and KV entries through
    the driver; returns the population's counts, times and memory."""
    ids = ["gcsft-%03d" % i for i in range(args.jobs)]
    start = time.monotonic()
    submit_jobs(head, ids, args.job_batch)
    jobs_s = time.monotonic() - start
    driver.send("populate %d %d %g %d" % (args.live_actors, args.placement_groups, args.pg_cpu,
                                          args.kv_entries))
    population = driver.read_event("populated")
    population.update(job_ids=ids, jobs=len(ids), jobs_s=jobs_s,
                      memory_gib=pss_gib(head.processes() - {driver.proc.pid}))
    print("  %s population: %d actors in %.1f s, %d placement groups in %.1f s, %d KV entries in "
          "%.1f s, %d jobs in %.1f s; the head's processes take %.2f GiB"
          % (head.name, population["actors"], population["actors_s"], population["pgs"],
             population["pgs_s"], population["kv"], population["kv_s"], len(ids), jobs_s,
             population["memory_gib"]), flush=True)
    return population


def recovery_round(args, head_class):
    """One head of `head_class` on its own Redis, its driver holding one actor: `--trials` GCS
    kills near empty, then the population (populate) and `--trials` kills with it. One head at
    a time: an idle populated Ray head keeps about half a core busy per 50 actors, which would
    be taken from the other side. Returns {"empty": [trial, ...], "populated": [...],
    "population": {...}, "empty_gib": PSS near empty}."""
    redis = Redis()
    head = driver = None
    out = {"empty": [], "populated": [], "population": None, "failed": []}
    try:
        head = head_class(args, redis)
        driver = head.recovery_driver()
        driver.send("populate 1 0 0 0")
        driver.read_event("populated")
        out["empty_gib"] = pss_gib(head.processes() - {driver.proc.pid})
        for case in (["empty"] if args.empty else []) + (["populated"] if args.populated else []):
            job_ids = []
            if case == "populated":
                out["population"] = populate(args, head, driver)
                job_ids = out["population"]["job_ids"]
            for _ in range(args.trials):
                try:
                    t = trial(head, driver, job_ids)
                except RuntimeError as error:  # the driver died with its head's outage
                    t = None
                    message = str(error)
                if t is None or t["new_actor"] < 0 or t["old_actor"] < 0:
                    out["failed"].append(
                        (case, message if t is None else
                         "no recovery within %d s" % KILL_BOUND_S))
                    print("  %s %s: FAILED, %s" % (head.name, case, out["failed"][-1][1]),
                          flush=True)
                    return out
                out[case].append(t)
                log_trial(head.name, case, t)
    finally:
        if driver:
            driver.close()
        if head:
            head.stop()
        redis.stop()
    return out


def log_trial(name, case, t):
    print("  %s %s: port %.3f s, new actor %.3f s, old actor %.3f s, jobs list %.3f s, KV %.3f s"
          " (GCS back %.3f s; came through: %d/%d actors, %d/%d groups, %d/%d jobs, %d/%d KV)"
          % (name, case, t["listening_after"], t["new_actor"], t["old_actor"], t["jobs_list"],
             t["kv_first"], t["restarted_after"], t["actors_answering"], t["actors"],
             t["pgs_ready"], t["pgs"], t["jobs_listed"], t["jobs"], t["kv_read_back"], t["kv"]),
          flush=True)


# The recovery metrics (lower is better), in seconds from the SIGKILL of the GCS.
RECOVERY_METRICS = [
    ("listening_after", "gcs_kill_to_gcs_listening", "a new GCS listening on its port"),
    ("new_actor", "gcs_kill_to_new_actor_answers", "a new actor created and answering"),
    ("old_actor", "gcs_kill_to_old_actor_answers", "an actor made before the kill answering"),
    ("jobs_list", "gcs_kill_to_jobs_listed", "the jobs list served with every job"),
    ("kv_first", "gcs_kill_to_kv_read", "a KV entry written before the kill read back"),
    ("restarted_after", "gcs_kill_to_gcs_process", "the GCS process running again"),
]


def case_trials(results, side, case):
    """[[trial, ...] per round] of `side` in `case`."""
    return [r[case] for r in results.get(side, [])]


def recovery_rows(results, case):
    """One row per recovery metric of `case`: each side's median over every trial of every
    round and its min-max, and the median over the rounds of Ray's round median / Troupe's."""
    rows = []
    for key, name, text in RECOVERY_METRICS:
        values, per_round = {}, {}
        for side in ("troupe", "ray"):
            rounds = [[t[key] for t in trials if t[key] >= 0]
                      for trials in case_trials(results, side, case)]
            per_round[side] = [{key: statistics.median(v)} if v else {} for v in rounds]
            values[side] = [v for round_values in rounds for v in round_values]
        if not values["troupe"] and not values["ray"]:
            continue
        # Ray's GCS process is relaunched by this program's driver (an ideal supervisor): that
        # breakdown is shown beside Troupe's, not compared.
        ratio = None if key == "restarted_after" else ratio_range(
            per_round["troupe"], per_round["ray"], key, invert=True)
        rows.append({
            "name": "%s.%s" % (case, name), "metric": "%s.%s" % (case, name), "text": text,
            "unit": "s", "higher_is_better": False,
            "troupe": statistics.median(values["troupe"]) if values["troupe"] else None,
            "ray": statistics.median(values["ray"]) if values["ray"] else None,
            "trials": {side: len(values[side]) for side in values},
            "failed_kills": {side: sum(1 for r in results.get(side, []) for c, _ in r["failed"]
                                       if c == case) for side in values},
            "spread": {side: [min(values[side]), max(values[side])] if values[side] else None
                       for side in values},
            "ratio_ray_over_troupe": list(ratio) if ratio else None,
            "peers": {"ray_python": statistics.median(values["ray"])} if values["ray"] else {},
            "ratios": {"ray_python": list(ratio)} if ratio else {},
        })
    return rows


AFTER_RESTART = [("actors_answering", "actors", "actors answering"),
                 ("pgs_ready", "pgs", "placement groups ready"),
                 ("jobs_listed", "jobs", "jobs listed"),
                 ("kv_read_back", "kv", "KV entries read back")]


def after_restart_rows(results, case):
    """One row per count taken after each restart (actors answering, groups ready, jobs listed,
    KV entries read back): each side's worst trial and how many there were. What a restart
    lost, if anything."""
    rows = []
    for got, total, text in AFTER_RESTART:
        row = {"name": "%s.after_restart.%s" % (case, got), "text": text, "unit": "count",
               "higher_is_better": True, "trials": {}, "spread": {}, "of": {}}
        for side in ("troupe", "ray"):
            trials = [t for ts in case_trials(results, side, case) for t in ts]
            row[side] = min(t[got] for t in trials) if trials else None
            row["of"][side] = trials[0][total] if trials else None
            row["trials"][side] = len(trials)
            row["spread"][side] = [min(t[got] for t in trials),
                                   max(t[got] for t in trials)] if trials else None
        row["metric"] = row["name"]
        if row["of"]["troupe"] or row["of"]["ray"]:
            rows.append(row)
    return rows


def population_rows(results):
    """Per side, medians over the rounds: how long building the population took (s) and what the
    head's processes took in memory (PSS, GiB) with it and near empty."""
    rows = []
    for key, name, unit, text in (
            ("seconds", "populated.population_seconds", "s",
             "building the population: jobs, actors, placement groups, KV entries"),
            ("memory_gib", "populated.head_memory", "GiB", "the populated head's processes (PSS)"),
            ("empty_gib", "empty.head_memory", "GiB", "the near-empty head's processes (PSS)")):
        row = {"name": name, "metric": name, "unit": unit, "higher_is_better": False,
               "text": text, "trials": {}, "spread": {}}
        for side in ("troupe", "ray"):
            values = []
            for r in results.get(side, []):
                p = r["population"]
                if key == "empty_gib":
                    values.append(r["empty_gib"])
                elif p:
                    values.append(p["actors_s"] + p["pgs_s"] + p["kv_s"] + p["jobs_s"]
                                  if key == "seconds" else p[key])
            row[side] = statistics.median(values) if values else None
            row["trials"][side] = len(values)
            row["spread"][side] = [min(values), max(values)] if values else None
        if row["troupe"] is not None or row["ray"] is not None:
            rows.append(row)
    return rows


# ------------------------------------------------------------------------------ throughput

def throughput_run(args, head_class, with_redis):
    redis = Redis() if with_redis else None
    head = None
    try:
        head = head_class(args, redis)
        result = {l["metric"]: l["value"] for l in head.throughput(args.actors, args.pgs)}
        print("  %s-%s: %s" % (head.name, "redis" if with_redis else "mem", result), flush=True)
        return result
    finally:
        if head:
            head.stop()
        if redis:
            redis.stop()


def throughput(args, head_class):
    """Alternating rounds (mem, redis, mem, redis, ...), each metric's median over the rounds: a
    2-core machine's run-to-run noise (about 15%) is as large as the effect measured."""
    print("%s: throughput, %d actors and %d placement groups per run, %d rounds"
          % (head_class.name, args.actors, args.pgs, args.rounds_throughput), flush=True)
    rounds = {"mem": [], "redis": []}
    for _ in range(args.rounds_throughput):
        rounds["mem"].append(throughput_run(args, head_class, False))
        rounds["redis"].append(throughput_run(args, head_class, True))
    out = {}
    for mode, runs in rounds.items():
        out[mode] = {metric: statistics.median(run[metric] for run in runs) for metric in runs[0]}
        out[mode + "_rounds"] = runs
    return out


# ------------------------------------------------------------------------------------ main

# 1,000 live actors do not fit: a Ray actor is a Python process of about 45 MiB (PSS), 1,000 of
# them ~45 GiB on this 24 GiB machine (Troupe's 1,000 take ~2 GiB together), and 2 cores do not
# carry them: each idle Ray actor keeps about 1% of a core busy, so at 150 Ray's idle head
# saturates the machine and its restarted GCS took 30-55 s to listen (once over 120 s). 100, the
# same on both sides, is the largest count Ray's head recovers from in seconds here; --live-actors
# changes it.
FULL = {"live_actors": 100, "placement_groups": 200, "jobs": 100, "kv_entries": 10000,
        "trials": 3, "rounds": 3, "actors": 40, "pgs": 100, "rounds_throughput": 3}
QUICK = {"live_actors": 50, "placement_groups": 200, "jobs": 20, "kv_entries": 10000,
         "trials": 2, "rounds": 1, "actors": 16, "pgs": 20, "rounds_throughput": 1}


def results_row(row):
    """A row in the results-file format (bench_common.py): Ray as the "ray_python" peer, a note
    saying what the figure is; the row's own fields (trials, spread, failed kills) kept."""
    out = dict(row)
    out.setdefault("peers", {"ray_python": row["ray"]} if row.get("ray") is not None else {})
    out.setdefault("ratios", {})
    note = row.get("text", "")
    if row["unit"] == "count":
        note = "after each restart, the worst trial: %s (of troupe %s, ray %s)" % (
            note, row["of"]["troupe"], row["of"]["ray"])
    elif row["metric"].startswith(("populated.gcs_kill", "empty.gcs_kill")):
        note = "seconds from the GCS SIGKILL to " + note
    out["note"] = note
    return out


def fmt(value, spec):
    return "-" if value is None else spec % value


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--troupe", default="bazel-bin/src/cli/troupe")
    parser.add_argument("--bench", default="bazel-bin/bench/gcs_ft_bench")
    venv = os.path.expanduser("~/.cache/troupe-bench-venv/bin")
    parser.add_argument("--ray", default=os.path.join(venv, "ray"))
    parser.add_argument("--python", default=os.path.join(venv, "python"))
    parser.add_argument("--quick", action="store_true",
                        help="fewer actors, jobs, trials and rounds (counts: %s)" % QUICK)
    parser.add_argument("--populated", action=argparse.BooleanOptionalAction, default=True,
                        help="recovery with a populated head (default: on)")
    parser.add_argument("--empty", action=argparse.BooleanOptionalAction, default=True,
                        help="recovery with a near-empty head, one actor (default: on)")
    parser.add_argument("--live-actors", type=int, help="populated: live actors (%d)"
                        % FULL["live_actors"])
    parser.add_argument("--placement-groups", type=int, help="populated: ready placement groups "
                        "of one {CPU: --pg-cpu} bundle (%d)" % FULL["placement_groups"])
    parser.add_argument("--pg-cpu", type=float, default=0.005)
    parser.add_argument("--jobs", type=int, help="populated: finished jobs submitted through "
                        "the HTTP jobs API (%d)" % FULL["jobs"])
    parser.add_argument("--job-batch", type=int, default=25,
                        help="populated: jobs submitted at once, each batch run to the end")
    parser.add_argument("--kv-entries", type=int, help="populated: KV entries (%d)"
                        % FULL["kv_entries"])
    parser.add_argument("--trials", type=int, help="GCS kills per head and case (%d)"
                        % FULL["trials"])
    parser.add_argument("--rounds", type=int, help="recovery rounds: a fresh head per side each, "
                        "Troupe then Ray (%d)" % FULL["rounds"])
    parser.add_argument("--actors", type=int, help="throughput: actors per run (%d)"
                        % FULL["actors"])
    parser.add_argument("--pgs", type=int, help="throughput: placement groups per run (%d)"
                        % FULL["pgs"])
    parser.add_argument("--rounds-throughput", type=int, help="throughput rounds per mode (%d)"
                        % FULL["rounds_throughput"])
    parser.add_argument("--no-troupe", action="store_true")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--no-recovery", action="store_true", help="throughput only")
    parser.add_argument("--no-throughput", action="store_true", help="recovery only")
    parser.add_argument("--keep-temp", action="store_true",
                        help="keep each head's temp dir (logs, the drivers' stderr)")
    parser.add_argument("--json", help="also write one JSON object per metric line to this file")
    args = parser.parse_args()
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if min(args.trials, args.rounds, args.rounds_throughput) < 1:
        parser.error("--trials, --rounds and --rounds-throughput must be at least 1")

    sides = [(name, cls) for name, cls, off in (("troupe", TroupeHead, args.no_troupe),
                                                ("ray", RayHead, args.no_ray)) if not off]
    started, started_wall = time.monotonic(), time.time()
    load_before = load_average()
    print("%s mode: populated head = %d live actors, %d placement groups of one {CPU: %g} "
          "bundle, %d finished jobs, %d KV entries (the same on both sides); %d GCS kills per "
          "head and case, %d round(s) of a fresh head per side (%s)" % (
              "quick" if args.quick else "full", args.live_actors, args.placement_groups,
              args.pg_cpu, args.jobs, args.kv_entries, args.trials, args.rounds,
              " then ".join(name for name, _ in sides)), flush=True)
    results, loads, phases = {}, [], {}
    if not args.no_recovery and (args.populated or args.empty):
        results, loads = alternate(
            [(name, lambda cls=cls: recovery_round(args, cls)) for name, cls in sides],
            args.rounds, log=sys.stdout)
        phases["recovery_s"] = time.monotonic() - started
    throughputs = {}
    if not args.no_throughput:
        start = time.monotonic()
        for name, cls in sides:
            throughputs[name] = throughput(args, cls)
        phases["throughput_s"] = time.monotonic() - start

    rows = []
    print()
    for case in ("populated", "empty"):
        case_rows = recovery_rows(results, case)
        if not case_rows:
            continue
        if case == "populated":
            title = ("GCS SIGKILL -> ..., populated head: %d actors, %d placement groups, %d jobs,"
                     " %d KV entries" % (args.live_actors, args.placement_groups, args.jobs,
                                         args.kv_entries))
        else:
            title = "GCS SIGKILL -> ..., near-empty head: 1 actor"
        print("%-62s %9s %9s %22s" % (title, "troupe", "ray", "ray/troupe [min-max]"))
        for row in case_rows:
            ratio = row["ratio_ray_over_troupe"]
            print("  %-60s %9s %9s %22s" % (
                row["text"] + " (s)", fmt(row["troupe"], "%.3f"), fmt(row["ray"], "%.3f"),
                "-" if not ratio else "%.1fx [%.1f-%.1f]" % tuple(ratio[:3])))
        after = after_restart_rows(results, case)
        for row in after:
            print("  %-60s %9s %9s" % (
                "after each restart, worst trial: %s" % row["text"],
                *("-" if row[side] is None else "%d/%d" % (row[side], row["of"][side])
                  for side in ("troupe", "ray"))))
        case_rows += after
        for side, _ in sides:
            failed = [message for r in results.get(side, []) for c, message in r["failed"]
                      if c == case]
            if failed:
                print("  %s: %d kill(s) FAILED to recover: %s" % (side, len(failed),
                                                                   "; ".join(failed)))
            per_trial = [t for ts in case_trials(results, side, case) for t in ts]
            if per_trial:
                print("  %s trials, new actor: %s" % (side, ", ".join(
                    "%.3f" % t["new_actor"] for t in per_trial)))
        rows += case_rows
        print()
    rows += population_rows(results)
    for side, _ in sides:
        for r in results.get(side, []):
            p = r["population"]
            if p:
                print("population, %s: %d actors %.1f s, %d groups %.1f s, %d KV entries %.1f s, "
                      "%d jobs %.1f s; the head's processes (PSS) %.2f GiB, %.2f near empty"
                      % (side, p["actors"], p["actors_s"], p["pgs"], p["pgs_s"], p["kv"],
                         p["kv_s"], p["jobs"], p["jobs_s"], p["memory_gib"], r["empty_gib"]))
    if throughputs:
        print()
        print("%-52s %12s %12s %10s" % ("throughput (/s, higher is better)", "troupe", "ray",
                                        "troupe/ray"))
        for metric in ("actor_creations_per_second", "placement_group_create_removal_per_second"):
            for mode in ("mem", "redis"):
                tv = throughputs.get("troupe", {}).get(mode, {}).get(metric)
                rv = throughputs.get("ray", {}).get(mode, {}).get(metric)
                print("%-52s %12s %12s %10s" % (
                    "%s (%s)" % (metric, mode), fmt(tv, "%.1f"), fmt(rv, "%.2f"),
                    fmt(tv / rv if tv and rv else None, "%.1fx")))
                per_round = {side: [r[metric] for r in t[mode + "_rounds"]]
                              for side, t in throughputs.items()}
                ratio = per_round_ratios(per_round.get("troupe", []), per_round.get("ray", []))
                rows.append({"name": "%s.%s" % (metric, mode), "metric": "%s.%s" % (metric, mode),
                             "unit": "per_second", "higher_is_better": True, "troupe": tv,
                             "ray": rv, "text": "%s, %s head" % (metric, mode),
                             "ratios": {"ray_python": ratio} if ratio else {},
                             "trials": {"troupe": args.rounds_throughput,
                                        "ray": args.rounds_throughput},
                             "spread": {side: [min(r[metric] for r in t[mode + "_rounds"]),
                                               max(r[metric] for r in t[mode + "_rounds"])]
                                        for side, t in throughputs.items()}})
        for system, t in throughputs.items():
            for metric in t["mem"]:
                q = t["redis"][metric] / t["mem"][metric]
                print("  %s %s redis/mem: %.2f (Redis costs %.0f%%)" % (system, metric, q,
                                                                         (1 - q) * 100))
    print()
    print("load average (1 min) before: %.2f; at each head's start: %s" % (
        load_before, ", ".join("%s%d %.2f" % (name, i + 1, load) for i, name, load in loads)))
    print("took: %s" % ", ".join("%s %.0f s" % (k, v) for k, v in phases.items()))
    if args.json:
        setup = {"live_actors": args.live_actors, "placement_groups": args.placement_groups,
                 "pg_cpu": args.pg_cpu, "jobs": args.jobs, "kv_entries": args.kv_entries,
                 "rounds": args.rounds, "trials": args.trials, "actors": args.actors,
                 "pgs": args.pgs, "rounds_throughput": args.rounds_throughput}
        write_results(args.json, "gcs_ft_bench", [results_row(row) for row in rows],
                      started_wall, load_before, args.rounds, quick=args.quick,
                      raw={"setup": setup, "loads": loads, "phases": phases,
                           "recovery": results, "throughput": throughputs})

if __name__ == "__main__":
    sys.exit(main())
