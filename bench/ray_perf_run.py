#!/usr/bin/env python3
"""Runs Ray's own benchmark program, ray._private.ray_perf.main (what `ray microbenchmark` runs),
unchanged: Ray's ray.init() defaults, Ray's workloads, Ray's timeit (a sleep, 1 s of warm-up,
then 4 runs of 2 s; mean and standard deviation). Prints one JSON object per line:
{"metric": <Ray's name>, "value": <mean>, "sd": <sd>, "unit": "per_second"} (Ray's units: its
"gigabytes" metrics count 0.8 "GB" per 800 MiB put). Run with the Ray virtualenv's python by
bench/microbenchmark.py.

Two departures, both outside Ray's measurements:
  - the Ray Client benchmarks that `ray microbenchmark` runs at the end
    (ray_client_microbenchmark.main) are left out: no Troupe figure is compared with them;
  - --only=NAME;NAME (Ray's names) runs only those, as Ray's own TESTS_TO_RUN filter does for one
    pattern; --sleep=S replaces timeit's 10 s sleep before each metric (quick checks only: the
    output then says so).
"""
import json
import sys

import ray._private.ray_perf as ray_perf


def main():
    only = set()
    sleep = None
    for arg in sys.argv[1:]:
        if arg.startswith("--only="):
            only = {name for name in arg[len("--only="):].split(";") if name}
        elif arg.startswith("--sleep="):
            sleep = float(arg[len("--sleep="):])
        else:
            raise SystemExit("usage: ray_perf_run.py [--only=NAME;NAME] [--sleep=S]")

    ray_timeit = ray_perf.timeit

    def timeit(name, fn, multiplier=1, **kwargs):
        if only and name not in only:
            return [None]
        if sleep is not None:
            kwargs["warmup_time_sec"] = sleep
        return ray_timeit(name, fn, multiplier, **kwargs)

    ray_perf.timeit = timeit
    ray_perf.client_microbenchmark_main = lambda results: None
    for result in ray_perf.main():
        if result is None:
            continue
        name, mean, sd = result
        print(json.dumps({"metric": name, "value": float(mean), "sd": float(sd),
                          "unit": "per_second", "sleep": sleep}), flush=True)


if __name__ == "__main__":
    main()
