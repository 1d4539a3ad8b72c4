#!/usr/bin/env python3
"""Ray's side of bench/gcs_ft_bench.py, run with the bench virtualenv's Python against a head that
`ray start --head` started (RAY_gcs_rpc_server_reconnect_timeout_s set, so it outlives the
outage). Prints JSON lines.

  gcs_ft_ray_driver.py recovery ADDRESS GCS_PORT
    The same commands on stdin and the same JSON lines as bench/gcs_ft_bench.cc --mode=recovery
    (see there): populate ACTORS PGS PG_CPU KV / kill / exit. Actors are num_cpus=0, groups one
    {CPU: PG_CPU} bundle, KV entries internal_kv._internal_kv_put (namespace gcs_ft_bench).
    Nothing restarts Ray's GCS outside Kubernetes, so this driver is its supervisor, an ideal
    one: before the kill it reads the gcs_server's command line and environment from /proc, and
    relaunches the same command with the same environment and output files (under setsid; its
    pid is printed as new_gcs_pid) as soon as the killed process is gone.
  gcs_ft_ray_driver.py throughput ADDRESS ACTORS PGS
    ACTORS actors in batches of 8 (each created, called once, killed), then PGS placement groups
    of one {CPU: 1} bundle (each created, waited for, removed); a warm-up batch and group first.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import ray
from ray.experimental import internal_kv
from ray.util.placement_group import placement_group, remove_placement_group


@ray.remote
class Echo:
    def ping(self):
        return 1


# ------------------------------------------------------------------------------- recovery

NS = b"gcs_ft_bench"


def kv_key(i):
    return b"key-%06d" % i


def kv_value(i):
    return b"value-%d" % i + b"v" * 48


def emit(record):
    print(json.dumps(record), flush=True)


class Population:
    """What the head holds before a kill; grows with each `populate`, never shrinks."""

    def __init__(self):
        self.actors, self.groups, self.kv_entries = [], [], 0

    def populate(self, n_actors, n_pgs, pg_cpu, n_kv):
        start = time.monotonic()
        while len(self.actors) < n_actors:
            # Batches of 50: each batch created, then every actor of it called once.
            batch = [Echo.options(num_cpus=0).remote()
                     for _ in range(min(50, n_actors - len(self.actors)))]
            ray.get([a.ping.remote() for a in batch], timeout=600)
            self.actors.extend(batch)
            sys.stderr.write("  %d actors\n" % len(self.actors))
        actors_s = time.monotonic() - start
        start = time.monotonic()
        new = [placement_group([{"CPU": pg_cpu}]) for _ in range(n_pgs - len(self.groups))]
        for pg in new:
            if not pg.wait(timeout_seconds=120):
                raise SystemExit("placement group not ready in 120 s")
        self.groups.extend(new)
        pgs_s = time.monotonic() - start
        start = time.monotonic()
        while self.kv_entries < n_kv:
            internal_kv._internal_kv_put(kv_key(self.kv_entries), kv_value(self.kv_entries),
                                         overwrite=True, namespace=NS)
            self.kv_entries += 1
        emit({"event": "populated", "actors": len(self.actors), "pgs": len(self.groups),
              "kv": self.kv_entries, "actors_s": actors_s, "pgs_s": pgs_s,
              "kv_s": time.monotonic() - start})


def find_gcs(gcs_port):
    marker = "--gcs_server_port=%d" % gcs_port
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    argv = f.read().decode().split("\0")[:-1]
            except OSError:
                continue
            if argv and argv[0].endswith("/gcs_server") and marker in argv:
                return int(entry), argv
    raise SystemExit("gcs_server not found")


def time_until(start, failures, attempt):
    """Seconds from `start` until attempt() returns true (retried every 10 ms while it raises,
    as calls do during the outage), or -1 after 300 s."""
    while time.monotonic() - start < 300:
        try:
            if attempt():
                return time.monotonic() - start
        except Exception as error:  # Ray raises several kinds during the outage
            failures.append(repr(error))
            if len(failures) == 1:
                sys.stderr.write("attempt failed: %r\n" % error)
        time.sleep(0.01)
    return -1


def trial(population, index, gcs_port):
    """One SIGKILL of the GCS, relaunched at once, and what came back (as in gcs_ft_bench.cc)."""
    pid, argv = find_gcs(gcs_port)
    with open("/proc/%d/environ" % pid, "rb") as f:
        env = dict(kv.split("=", 1) for kv in f.read().decode().split("\0") if "=" in kv)
    stdout_path = os.readlink("/proc/%d/fd/1" % pid)
    stderr_path = os.readlink("/proc/%d/fd/2" % pid)
    start = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    emit({"event": "killed", "t0": start})
    while True:  # gone (or a zombie): its port is free again
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except OSError:
            break
        time.sleep(0.001)
    with open(stdout_path, "ab") as out, open(stderr_path, "ab") as err:
        gcs = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                               start_new_session=True)
    result = {"restarted_after": time.monotonic() - start, "new_actor": -1, "old_actor": -1,
              "kv_first": -1}
    failures, fresh = [], []

    def new_actor():
        def attempt():
            fresh.append(Echo.options(num_cpus=0).remote())
            return ray.get(fresh[-1].ping.remote(), timeout=300) == 1
        result["new_actor"] = time_until(start, failures, attempt)

    old = population.actors[index % len(population.actors)]

    def old_actor():
        result["old_actor"] = time_until(
            start, failures, lambda: ray.get(old.ping.remote(), timeout=300) == 1)

    def kv_first():
        if population.kv_entries:
            i = index % population.kv_entries
            result["kv_first"] = time_until(
                start, failures,
                lambda: internal_kv._internal_kv_get(kv_key(i), namespace=NS) == kv_value(i))

    threads = [threading.Thread(target=f) for f in (new_actor, old_actor, kv_first)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # What came through the restart.
    answering = 0
    for ref in [a.ping.remote() for a in population.actors]:
        try:
            answering += ray.get(ref, timeout=120) == 1
        except Exception as error:
            sys.stderr.write("an actor made before the kill failed: %r\n" % error)
    ready = sum(bool(pg.wait(timeout_seconds=10)) for pg in population.groups)
    read_start = time.monotonic()
    keys = [kv_key(i) for i in range(population.kv_entries)]
    values = internal_kv.internal_kv_get_gcs_client().internal_kv_multi_get(keys, NS) \
        if keys else {}
    read_back = sum(values.get(key) == kv_value(i) for i, key in enumerate(keys))
    kv_read_all_s = time.monotonic() - read_start
    for actor in fresh:  # keeps the population the same from trial to trial
        ray.kill(actor)
    result.update({"event": "trial", "failed_attempts": len(failures), "old_gcs_pid": pid,
                   "new_gcs_pid": gcs.pid, "actors_answering": answering,
                   "actors": len(population.actors), "pgs_ready": ready,
                   "pgs": len(population.groups), "kv_read_back": read_back,
                   "kv": population.kv_entries, "kv_read_all_s": kv_read_all_s})
    emit(result)
    return result["new_actor"] >= 0 and result["old_actor"] >= 0


def recovery(gcs_port):
    population = Population()
    index = 0
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "populate":
            population.populate(max(1, int(words[1])), int(words[2]), float(words[3]),
                                int(words[4]))
        elif words[0] == "kill":
            if not trial(population, index, gcs_port):
                return 1
            index += 1
        elif words[0] == "exit":
            break
        else:
            sys.stderr.write("unknown command %r (populate, kill, exit)\n" % words[0])
            return 2
    return 0


# ------------------------------------------------------------------------------ throughput

def throughput(actors, pgs):
    def actor_batch(n):
        batch = [Echo.remote() for _ in range(n)]
        ray.get([a.ping.remote() for a in batch])
        for a in batch:
            ray.kill(a)

    def pg_cycle():
        pg = placement_group([{"CPU": 1}])
        # pg.wait (a GCS call), as Ray's own benchmark (ray_perf.py) and Troupe's side wait;
        # ray.get(pg.ready()) would also run a task in the group every cycle.
        if not pg.wait(timeout_seconds=60):
            raise SystemExit("placement group not created within 60 s")
        remove_placement_group(pg)

    actor_batch(8)  # warm-up
    pg_cycle()
    start = time.monotonic()
    done = 0
    while done < actors:
        n = min(8, actors - done)
        actor_batch(n)
        done += n
    emit({"metric": "actor_creations_per_second", "value": actors / (time.monotonic() - start),
          "unit": "per_second"})
    start = time.monotonic()
    for _ in range(pgs):
        pg_cycle()
    emit({"metric": "placement_group_create_removal_per_second",
          "value": pgs / (time.monotonic() - start), "unit": "per_second"})
    return 0


def main():
    mode, address = sys.argv[1], sys.argv[2]
    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    if mode == "recovery":
        return recovery(int(sys.argv[3]))
    return throughput(int(sys.argv[3]), int(sys.argv[4]))


if __name__ == "__main__":
    sys.exit(main())
