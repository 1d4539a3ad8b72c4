#!/usr/bin/env python3
"""Ray's side of bench/task_bench.cc, written as a replica of Ray's own benchmark program
(ray/_private/ray_perf.py, what `ray microbenchmark` runs, Ray 2.60.0): the same workloads, with
our metric names, plus the few that program lacks. Ray runs with its defaults (ray.init() as
ray_perf.py calls it; the {"custom": 100} of its placement-group run is added from the start).
Prints one JSON object per line.

bench/microbenchmark.py takes Ray's figures from Ray's own program (bench/ray_perf_run.py) and
runs this replica only for the metrics that program lacks (--only=...):
  single_client_put_gigabytes_touched  ray.put of 800 MiB of written, non-zero data
  actor_creation_per_second            create 8 actors, call each once, kill them

  python ray_microbench.py SECONDS [--only=metric,metric]
"""
import json
import multiprocessing
import sys
import time

import numpy as np
import ray
from ray.util.placement_group import placement_group, remove_placement_group


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


# ray_perf.py's n_cpu.
N_CPU = max(1, multiprocessing.cpu_count() // 2)


@ray.remote
def small_value():
    return b"ok"


@ray.remote
def do_put_small():
    for _ in range(100):
        ray.put(0)


@ray.remote
def do_put():
    for _ in range(10):
        ray.put(np.zeros(10 * 1024 * 1024, dtype=np.int64))


@ray.remote
def create_object_containing_ref():
    return [ray.put(1) for _ in range(10000)]


@ray.remote(num_cpus=0)
class Actor:
    def small_value(self):
        return b"ok"

    def small_value_arg(self, x):
        return b"ok"

    def small_value_batch(self, n):
        ray.get([small_value.remote() for _ in range(n)])


@ray.remote(num_cpus=0)
class Client:
    def __init__(self, servers):
        self.servers = servers if isinstance(servers, list) else [servers]

    def small_value_batch(self, n):
        results = []
        for s in self.servers:
            results.extend([s.small_value.remote() for _ in range(n)])
        ray.get(results)

    def small_value_batch_arg(self, n):
        x = ray.put(0)
        results = []
        for s in self.servers:
            results.extend([s.small_value_arg.remote(x) for _ in range(n)])
        ray.get(results)


@ray.remote
def work(actors, n):
    ray.get([actors[i % len(actors)].small_value.remote() for i in range(n)])


def object_metrics(seconds, wanted):
    if wanted("single_client_get_calls"):
        value = ray.put(0)

        def get_calls():
            for _ in range(1000):
                ray.get(value)
        report("single_client_get_calls", rate(1000, seconds, get_calls), "per_second")

    # ray.put always writes Ray's shared-memory store (Plasma), whatever the size.
    if wanted("single_client_put_calls"):
        def put_calls():
            for _ in range(1000):
                ray.put(0)
        report("single_client_put_calls", rate(1000, seconds, put_calls), "per_second")

    if wanted("multi_client_put_calls"):
        report("multi_client_put_calls",
               rate(1000, seconds, lambda: ray.get([do_put_small.remote() for _ in range(10)])),
               "per_second")

    # 800 MiB as ray_perf.py: np.zeros (pages never written: reads hit the kernel's zero page),
    # and the same size of written, non-zero data (what an application's array is like).
    if wanted("single_client_put_gigabytes"):
        zeros = np.zeros(100 * 1024 * 1024, dtype=np.int64)
        report("single_client_put_gigabytes",
               rate(1, seconds, lambda: ray.put(zeros)) * zeros.nbytes / 1e9, "GB_per_second")
        del zeros
    if wanted("single_client_put_gigabytes_touched"):
        data = np.arange(1, 100 * 1024 * 1024 + 1, dtype=np.int64)
        report("single_client_put_gigabytes_touched",
               rate(1, seconds, lambda: ray.put(data)) * data.nbytes / 1e9, "GB_per_second")
        del data
    if wanted("multi_client_put_gigabytes"):
        report("multi_client_put_gigabytes",
               rate(1, seconds, lambda: ray.get([do_put.remote() for _ in range(10)]))
               * 10 * 10 * 10 * 1024 * 1024 * 8 / 1e9, "GB_per_second")


def task_metrics(seconds, wanted):
    if wanted("single_client_tasks_sync"):
        def tasks_sync():
            for _ in range(100):
                ray.get(small_value.remote())
        report("single_client_tasks_sync", rate(100, seconds, tasks_sync), "per_second")

    if wanted("single_client_tasks_async"):
        report("single_client_tasks_async",
               rate(1000, seconds, lambda: ray.get([small_value.remote() for _ in range(1000)])),
               "per_second")

    if wanted("multi_client_tasks_async"):
        clients = [Actor.remote() for _ in range(4)]
        report("multi_client_tasks_async",
               rate(40000, seconds,
                    lambda: ray.get([c.small_value_batch.remote(10000) for c in clients])),
               "per_second")
        for c in clients:
            ray.kill(c)

    if wanted("single_client_wait_1k_refs"):
        def wait_1k():
            not_ready = [small_value.remote() for _ in range(1000)]
            # As ray_perf.py: fetch_local only on the first wait (the raylet keeps the fetch
            # requests after ray.wait returns; ray-project/ray#30375).
            fetch_local = True
            for _ in range(1000):
                _, not_ready = ray.wait(not_ready, fetch_local=fetch_local)
                fetch_local = False
        report("single_client_wait_1k_refs", rate(1, seconds, wait_1k), "per_second")

    if wanted("single_client_get_object_containing_10k_refs"):
        outer = create_object_containing_ref.remote()
        report("single_client_get_object_containing_10k_refs",
               rate(1, seconds, lambda: ray.get(outer)), "per_second")


def actor_metrics(seconds, wanted):
    if wanted("1_1_actor_calls_sync") or wanted("1_1_actor_call_sync_latency_us"):
        actor = Actor.remote()
        ray.get(actor.small_value.remote())

        def sync_calls():
            for _ in range(100):
                ray.get(actor.small_value.remote())
        sync = rate(100, seconds, sync_calls)
        if wanted("1_1_actor_calls_sync"):
            report("1_1_actor_calls_sync", sync, "per_second")
        if wanted("1_1_actor_call_sync_latency_us"):
            report("1_1_actor_call_sync_latency_us", 1e6 / sync, "microseconds")
        ray.kill(actor)

    if wanted("1_1_actor_calls_async"):
        actor = Actor.remote()
        report("1_1_actor_calls_async",
               rate(1000, seconds,
                    lambda: ray.get([actor.small_value.remote() for _ in range(1000)])),
               "per_second")
        ray.kill(actor)

    if wanted("1_1_actor_calls_concurrent"):
        actor = Actor.options(max_concurrency=16).remote()
        report("1_1_actor_calls_concurrent",
               rate(1000, seconds,
                    lambda: ray.get([actor.small_value.remote() for _ in range(1000)])),
               "per_second")
        ray.kill(actor)

    if wanted("1_n_actor_calls_async"):
        servers = [Actor.remote() for _ in range(N_CPU)]
        client = Client.remote(servers)
        report("1_n_actor_calls_async",
               rate(5000 * N_CPU, seconds, lambda: ray.get(client.small_value_batch.remote(5000))),
               "per_second")

    if wanted("n_n_actor_calls_async"):
        actors = [Actor.remote() for _ in range(N_CPU)]
        report("n_n_actor_calls_async",
               rate(4 * 5000, seconds, lambda: ray.get([work.remote(actors, 5000) for _ in range(4)])),
               "per_second")

    if wanted("n_n_actor_calls_with_arg_async"):
        clients = [Client.remote(Actor.remote()) for _ in range(N_CPU)]
        report("n_n_actor_calls_with_arg_async",
               rate(1000 * N_CPU, seconds,
                    lambda: ray.get([c.small_value_batch_arg.remote(1000) for c in clients])),
               "per_second")

    if wanted("actor_creation_per_second"):
        def create():
            batch = [Actor.remote() for _ in range(8)]
            ray.get([a.small_value.remote() for a in batch])
            for a in batch:
                ray.kill(a)
        report("actor_creation_per_second", rate(8, seconds, create), "per_second")

    if wanted("placement_group_create_removal_per_second"):
        # As ray_perf.py: 100 groups of one {"custom": 0.001} bundle, pg.wait (a GCS call, no
        # task), then all removed.
        def pg_batch():
            pgs = [placement_group([{"custom": 0.001}]) for _ in range(100)]
            for pg in pgs:
                pg.wait(timeout_seconds=30)
            for pg in pgs:
                remove_placement_group(pg)
        report("placement_group_create_removal_per_second", rate(100, seconds, pg_batch),
               "per_second")


def main():
    seconds = 2.0
    only = set()
    for arg in sys.argv[1:]:
        if arg.startswith("--only="):
            only = {m for m in arg[len("--only="):].split(",") if m}
        else:
            seconds = float(arg)

    def wanted(metric):
        return not only or metric in only

    # Ray's defaults, as ray_perf.py's ray.init(); the custom resource of its second init.
    ray.init(resources={"custom": 100}, logging_level="ERROR")
    object_metrics(seconds, wanted)
    task_metrics(seconds, wanted)
    actor_metrics(seconds, wanted)
    ray.shutdown()


if __name__ == "__main__":
    main()
