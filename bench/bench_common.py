"""Shared by the bench/*.py runners: run one side of a benchmark and read what it printed, and run
the sides of a comparison alternately (A B A B ...) to report the median ratio with its range and
the load average the machine had meanwhile."""
import json
import os
import statistics
import subprocess
import sys
import time


def json_lines(command, env=None):
    """Runs `command` (with `env`, default: this process's environment) and returns the JSON
    objects it printed, one per line. If it fails, prints the end of its stderr and exits."""
    out = subprocess.run(command, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-3000:])
        raise SystemExit("%s failed with %d" % (" ".join(command), out.returncode))
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip().startswith("{")]


def load_average():
    """The machine's 1-minute load average."""
    return os.getloadavg()[0]


def busy_cpus(seconds=3.0):
    """How many CPUs' worth of work the whole machine did over the next `seconds` (non-idle time
    in /proc/stat). Unlike the 1-minute load average, which still reads 4-6 a minute after a
    benchmark's processes have all exited, it says whether something is running now."""
    def sample():
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:9]]  # user .. steal
        return sum(ticks) - ticks[3] - ticks[4], sum(ticks)  # busy (all but idle, iowait), all
    busy0, all0 = sample()
    time.sleep(seconds)
    busy1, all1 = sample()
    return (busy1 - busy0) / max(1, all1 - all0) * (os.cpu_count() or 1)


# bench/run_all.sh waits before each benchmark until the machine is idle and passes what it
# measured last (busy_cpus over 5 s) in this variable; a program run by hand has none.
BUSY_BEFORE_ENV = "TROUPE_BENCH_BUSY_BEFORE"


def busy_before():
    """The machine's busy CPUs just before this program started (bench/run_all.sh measures it),
    or None when not measured."""
    value = os.environ.get(BUSY_BEFORE_ENV)
    try:
        return float(value) if value else None
    except ValueError:
        return None


def is_loaded(load_before, threshold=None):
    """Whether this program's figures come from a loaded machine: something else kept more than
    `threshold` CPUs (default half the cores) busy just before it started (bench/run_all.sh's
    measurement), or, run by hand, the 1-minute load average was above it."""
    threshold = threshold if threshold is not None else 0.5 * (os.cpu_count() or 1)
    busy = busy_before()
    return (busy if busy is not None else load_before) > threshold


def use_ray_token_auth(environ=os.environ):
    """Turns Ray's token authentication on, with a token made for this run, for every Ray
    cluster, CLI call and driver this process starts (RAY_AUTH_MODE=token, RAY_AUTH_TOKEN; a
    token already set is kept). ray.init() turns it on for a new local cluster anyway, but
    `ray start` turns it on only when ~/.ray/auth_token exists, and then `ray status` and the
    drivers fail with "Unauthenticated: InvalidAuthToken" unless the mode is set: one mode for
    every Ray process, whatever files the machine has."""
    import secrets
    environ["RAY_AUTH_MODE"] = "token"
    environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))


def stop_processes(patterns, proc="/proc"):
    """SIGKILLs every process whose command line (its arguments joined by spaces) matches one of
    the regular expressions `patterns`, and all their descendants; returns the pids signalled.
    For stopping one Ray cluster by what its processes name (its --temp-dir, its GCS port):
    `ray stop --force` kills every Ray process on the machine, other users' clusters too."""
    import re
    import signal
    regexes = [re.compile(p) for p in patterns]
    parent, matched = {}, set()
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(os.path.join(proc, entry, "cmdline"), "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(os.path.join(proc, entry, "stat")) as f:
                parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        if any(r.search(cmdline) for r in regexes):
            matched.add(int(entry))
    doomed, grew = set(matched), True
    while grew:  # add the descendants
        more = {pid for pid, ppid in parent.items() if ppid in doomed} - doomed
        doomed |= more
        grew = bool(more)
    for pid in sorted(doomed):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return sorted(doomed)


def alternate(sides, rounds, log=sys.stderr):
    """Runs each side once per round, in order, for `rounds` rounds (A B A B ...). `sides` is a
    list of (name, run) where run() returns {metric: value}. Returns ({name: [one dict per
    round]}, [(round, name, 1-minute load average when that side started)])."""
    if rounds < 1:
        raise ValueError("rounds must be at least 1, got %d" % rounds)
    results = {name: [] for name, _ in sides}
    loads = []
    for round_index in range(rounds):
        for name, run in sides:
            load = load_average()
            loads.append((round_index, name, load))
            if log:
                log.write("round %d/%d: %s (load average %.2f)\n" %
                          (round_index + 1, rounds, name, load))
                log.flush()
            started = time.time()
            results[name].append(run())
            if log:
                log.write("round %d/%d: %s took %.0f s\n" %
                          (round_index + 1, rounds, name, time.time() - started))
                log.flush()
    return results, loads


def median_of(rounds, metric):
    """The median of `metric` over the rounds that have it, or None."""
    values = [r[metric] for r in rounds if metric in r]
    return statistics.median(values) if values else None


def ratio_range(a_rounds, b_rounds, metric, b_metric=None, invert=False):
    """Per round, a's `metric` over b's `b_metric` (default the same name), or b over a when
    `invert` (for a time, where lower is better). Returns (median, min, max, rounds) over the
    rounds where both sides have a non-zero figure, or None if there is none."""
    b_metric = b_metric or metric
    ratios = []
    for a, b in zip(a_rounds, b_rounds):
        x, y = a.get(metric), b.get(b_metric)
        if not x or not y:
            continue
        ratios.append(y / x if invert else x / y)
    if not ratios:
        return None
    return statistics.median(ratios), min(ratios), max(ratios), len(ratios)


# --- Results files (bench/run_all.sh collects them; bench/summarize.py turns them into tables) ---
#
# Every bench program's --json FILE writes one object:
#   {"bench": "microbenchmark", "started": ISO-8601 UTC, "finished": ..., "command": argv,
#    "load_before": 1-minute load average, "busy_before": CPUs busy just before it started
#    (bench/run_all.sh's measurement, or null), "loaded": bool, "quick": bool, "rounds": N,
#    "rows": [row, ...], "raw": anything the program wants to keep}
# and each row, made by summary_row():
#   {"metric": name, "unit": unit, "higher_is_better": bool, "troupe": median or None,
#    "peers": {peer: median}, "ratios": {peer: [median, min, max, rounds]}, "note": text}
# Peers are named: "ray_python" (Ray's Python API), "ray_cpp" (Ray's C++ API), "gloo" (PyTorch's
# gloo), "torch_ddp", "libtorch" (a plain LibTorch loop), "raw_tcp" (iperf3), "tls_off",
# "torchrun" (torch.distributed.run's agent restarting its workers), "ray_train" ...
# A ratio is always Troupe's advantage: above 1 means Troupe is better (faster, more per second),
# whatever the unit; it is the median of the per-round ratios with their min and max.
PEER_NAMES = {"ray_python": "Ray (Python API)", "ray_cpp": "Ray (C++ API)",
              "gloo": "PyTorch gloo", "torch_ddp": "PyTorch DDP (gloo)",
              "libtorch": "plain LibTorch", "raw_tcp": "raw TCP (iperf3)",
              "tls_off": "Troupe, TLS off", "memcpy": "memcpy (one thread)",
              "torchrun": "torchrun (elastic agent, gloo)",
              "ray_train": "Ray Train (TorchTrainer)"}


def per_round_ratios(troupe_values, peer_values, higher_is_better=True):
    """Troupe's advantage per round (pairs of figures from the same round): a/b when higher is
    better, b/a otherwise. Returns [median, min, max, rounds], or None without a usable pair."""
    ratios = []
    for t, p in zip(troupe_values, peer_values):
        if not t or not p:
            continue
        ratios.append(t / p if higher_is_better else p / t)
    if not ratios:
        return None
    return [statistics.median(ratios), min(ratios), max(ratios), len(ratios)]


def summary_row(metric, unit, troupe_values, peer_values=None, higher_is_better=True, note=""):
    """One row of a results file. troupe_values: Troupe's figure per round (a list; a single
    figure is a list of one); peer_values: {peer: [figure per round, in the same rounds]}. The row
    carries each side's median and, per peer, the median per-round ratio with its range."""
    peer_values = peer_values or {}
    clean = lambda values: [v for v in values if v is not None]
    row = {"metric": metric, "unit": unit, "higher_is_better": bool(higher_is_better),
           "troupe": statistics.median(clean(troupe_values)) if clean(troupe_values) else None,
           "peers": {}, "ratios": {}, "note": note}
    for peer, values in peer_values.items():
        if clean(values):
            row["peers"][peer] = statistics.median(clean(values))
        ratio = per_round_ratios(troupe_values, values, higher_is_better)
        if ratio:
            row["ratios"][peer] = ratio
    return row


def write_results(path, bench, rows, started, load_before, rounds, quick=False, loaded=None,
                  raw=None, loaded_threshold=None):
    """Writes a results file (the format above). `started`: time.time() at the start. A run is
    marked loaded as is_loaded() says (with loaded_threshold), unless `loaded` is given."""
    import datetime
    iso = lambda t: datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    doc = {"bench": bench, "started": iso(started), "finished": iso(time.time()),
           "command": sys.argv, "load_before": load_before, "busy_before": busy_before(),
           "loaded": bool(loaded if loaded is not None else is_loaded(load_before,
                                                                      loaded_threshold)),
           "quick": bool(quick), "rounds": rounds, "rows": rows, "raw": raw}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
