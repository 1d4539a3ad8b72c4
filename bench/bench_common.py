"""Shared by the bench/*.py runners: run one side of a benchmark and read what it printed, and run
the sides of a comparison alternately (A B A B ...) to report the median ratio with its range and
the load average the machine had meanwhile."""
import json
import os
import statistics
import subprocess
import sys


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
            results[name].append(run())
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
