#!/usr/bin/env python3
"""Ray's side of bench/task_bench.cc: the same workloads, with Ray's metric names, on
ray.init(num_cpus=2). Prints one JSON object per line. Run by bench/microbenchmark.py."""
import json
import sys
import time

import numpy as np
import ray


def report(metric, value, unit):
    print(json.dumps({"metric": metric, "value": value, "unit": unit}), flush=True)


def rate(ops_per_batch, seconds, batch):
    batch()  # warm up
    ops = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        batch()
        ops += ops_per_batch
    return ops / (time.perf_counter() - start)


@ray.remote
def small_value():
    return 0


@ray.remote
def submit_many(n):
    ray.get([small_value.remote() for _ in range(n)])
    return n


@ray.remote
class Echo:
    def small(self):
        return 0

    def small_with_arg(self, x):
        return x


@ray.remote
def call_actor(actor, n, with_arg):
    arg = ray.put(1)
    if with_arg:
        ray.get([actor.small_with_arg.remote(arg) for _ in range(n)])
    else:
        ray.get([actor.small.remote() for _ in range(n)])
    return n


def actor_metrics(seconds):
    actor = Echo.remote()
    ray.get(actor.small.remote())

    def sync_calls():
        for _ in range(100):
            ray.get(actor.small.remote())
    report("1_1_actor_calls_sync", rate(100, seconds, sync_calls), "per_second")
    report("1_1_actor_calls_async",
           rate(1000, seconds, lambda: ray.get([actor.small.remote() for _ in range(1000)])),
           "per_second")
    report("1_1_actor_call_sync_latency_us", 1e6 / rate(100, seconds, sync_calls), "microseconds")
    ray.kill(actor)

    actor = Echo.options(max_concurrency=16).remote()
    ray.get(actor.small.remote())
    report("1_1_actor_calls_concurrent",
           rate(1000, seconds, lambda: ray.get([actor.small.remote() for _ in range(1000)])),
           "per_second")
    ray.kill(actor)

    actors = [Echo.remote() for _ in range(4)]
    ray.get([a.small.remote() for a in actors])
    report("1_n_actor_calls_async",
           rate(1000, seconds,
                lambda: ray.get([actors[i % 4].small.remote() for i in range(1000)])),
           "per_second")
    for with_arg in (False, True):
        report("n_n_actor_calls_with_arg_async" if with_arg else "n_n_actor_calls_async",
               rate(4000, seconds,
                    lambda: ray.get([call_actor.remote(a, 1000, with_arg) for a in actors])),
               "per_second")
    for a in actors:
        ray.kill(a)

    def create():
        batch = [Echo.remote() for _ in range(8)]
        ray.get([a.small.remote() for a in batch])
        for a in batch:
            ray.kill(a)
    report("actor_creation_per_second", rate(8, seconds, create), "per_second")

    from ray.util.placement_group import placement_group, remove_placement_group

    def pg_cycle():
        pg = placement_group([{"CPU": 1}])
        ray.get(pg.ready())
        remove_placement_group(pg)
    report("placement_group_create_removal_per_second", rate(1, seconds, pg_cycle), "per_second")


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")

    value = ray.put(0)

    def get_calls():
        for _ in range(1000):
            ray.get(value)
    report("single_client_get_calls", rate(1000, seconds, get_calls), "per_second")

    def put_calls():
        for _ in range(1000):
            ray.put(0)
    report("single_client_put_calls", rate(1000, seconds, put_calls), "per_second")

    arr = np.zeros(10 * 1024 * 1024, dtype=np.int64)
    puts = rate(1, seconds, lambda: ray.put(arr))
    report("single_client_put_gigabytes", puts * arr.nbytes / 1e9, "GB_per_second")

    def tasks_sync():
        for _ in range(100):
            ray.get(small_value.remote())
    report("single_client_tasks_sync", rate(100, seconds, tasks_sync), "per_second")

    def tasks_async():
        ray.get([small_value.remote() for _ in range(1000)])
    report("single_client_tasks_async", rate(1000, seconds, tasks_async), "per_second")

    def multi_client():
        ray.get([submit_many.remote(1000) for _ in range(4)])
    report("multi_client_tasks_async", rate(4000, seconds, multi_client), "per_second")

    def wait_1k():
        not_ready = [small_value.remote() for _ in range(1000)]
        while not_ready:
            _, not_ready = ray.wait(not_ready)
    report("single_client_wait_1k_refs", rate(1, seconds, wait_1k), "per_second")

    outer = ray.put([ray.put(i) for i in range(10000)])
    report("single_client_get_object_containing_10k_refs",
           rate(1, seconds, lambda: ray.get(outer)), "per_second")
    actor_metrics(seconds)
    ray.shutdown()


if __name__ == "__main__":
    main()
