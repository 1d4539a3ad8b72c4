"""Tests of the benchmark harness (bench_common.py, microbenchmark.py, gcs_ft_bench.py) on fake
sides: the order of the alternation, the ratio's median and range, how microbenchmark.py builds
each column (Troupe's store and inline runs, Ray's figures from Ray's own program, the replica only
for the rest), and gcs_ft_bench.py's summary rows and kill pacing. Run by bench_harness_test.sh
(bazel test //bench:bench_harness_test)."""
import argparse
import io
import os
import stat
import sys
import tempfile
import time
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402
import gcs_ft_bench  # noqa: E402
import microbenchmark  # noqa: E402


class AlternateTest(unittest.TestCase):
    def test_sides_alternate_each_round_and_loads_are_recorded(self):
        calls = []
        sides = [("a", lambda: calls.append("a") or {"m": len(calls)}),
                 ("b", lambda: calls.append("b") or {"m": len(calls)})]
        with mock.patch.object(bench_common, "load_average", side_effect=[0.1, 0.2, 0.3,
                                                                           0.4, 0.5, 0.6]):
            results, loads = bench_common.alternate(sides, 3, log=io.StringIO())
        self.assertEqual(calls, ["a", "b", "a", "b", "a", "b"])
        self.assertEqual(results, {"a": [{"m": 1}, {"m": 3}, {"m": 5}],
                                   "b": [{"m": 2}, {"m": 4}, {"m": 6}]})
        self.assertEqual(loads, [(0, "a", 0.1), (0, "b", 0.2), (1, "a", 0.3), (1, "b", 0.4),
                                 (2, "a", 0.5), (2, "b", 0.6)])

    def test_no_rounds_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "rounds must be at least 1"):
            bench_common.alternate([("a", dict)], 0)


class RatioTest(unittest.TestCase):
    def test_median_and_range_per_round(self):
        a = [{"m": 10.0}, {"m": 30.0}, {"m": 20.0}]
        b = [{"m": 5.0}, {"m": 10.0}, {"m": 2.0}]
        self.assertEqual(bench_common.ratio_range(a, b, "m"), (3.0, 2.0, 10.0, 3))

    def test_inverted_for_times_and_rounds_without_a_figure_skipped(self):
        a = [{"us": 10.0}, {}, {"us": 20.0}]
        b = [{"us": 40.0}, {"us": 1.0}, {"us": 20.0}]
        self.assertEqual(bench_common.ratio_range(a, b, "us", invert=True), (2.5, 1.0, 4.0, 2))
        self.assertIsNone(bench_common.ratio_range([{}], [{"us": 1.0}], "us"))

    def test_median_of(self):
        self.assertEqual(bench_common.median_of([{"m": 3}, {"m": 1}, {}, {"m": 2}], "m"), 2)
        self.assertIsNone(bench_common.median_of([{}], "m"))


def fake_program(directory, name, lines):
    """An executable that records its arguments and prints those of `lines` (JSON, one a line)
    whose metric is in its --only=a,b (all without one), as task_bench does."""
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write("""#!%s
import json, sys
with open(%r, "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
only = [a[len("--only="):].split(",") for a in sys.argv[1:] if a.startswith("--only=")]
for line in %r:
    if not only or json.loads(line)["metric"] in only[0]:
        print(line)
""" % (sys.executable, path + ".args", lines))
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


class ColumnsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def args(self, **kw):
        defaults = dict(troupe=None, python=None, seconds=0.1, ray_sleep=None)
        defaults.update(kw)
        return argparse.Namespace(**defaults)

    def test_troupe_put_and_get_calls_run_on_the_store_and_inline_ones_are_renamed(self):
        troupe = fake_program(self.dir, "task_bench", [
            '{"metric": "single_client_put_calls", "value": 100, "unit": "per_second"}',
            '{"metric": "multi_client_put_calls", "value": 50, "unit": "per_second"}',
            '{"metric": "single_client_tasks_async", "value": 4000, "unit": "per_second"}'])
        values, _ = microbenchmark.troupe_side(self.args(troupe=troupe), None, None)
        with open(troupe + ".args") as f:
            calls = f.read().splitlines()
        self.assertEqual(len(calls), 2)
        self.assertNotIn("--max_inline_bytes=0", calls[0])
        self.assertIn("--max_inline_bytes=0", calls[1])
        # The default run's small puts are Troupe's inline path; the store run's are not.
        self.assertEqual(values["single_client_put_calls_inline"], 100)
        self.assertEqual(values["multi_client_put_calls_inline"], 50)
        self.assertEqual(values["single_client_put_calls"], 100)
        self.assertNotIn("multi_client_put_calls", values)
        self.assertEqual(values["single_client_tasks_and_get_batch"], 4)

    def test_only_limits_troupe_runs(self):
        troupe = fake_program(self.dir, "task_bench", [])
        microbenchmark.troupe_side(self.args(troupe=troupe), {"single_client_put_calls"}, None)
        with open(troupe + ".args") as f:
            calls = f.read().splitlines()
        self.assertEqual(len(calls), 1)  # the store run only
        self.assertIn("--only=single_client_put_calls", calls[0])
        self.assertIn("--max_inline_bytes=0", calls[0])

    def test_only_inline_runs_the_default_path_under_the_plain_name(self):
        troupe = fake_program(self.dir, "task_bench", [
            '{"metric": "single_client_put_calls", "value": 9, "unit": "per_second"}'])
        values, _ = microbenchmark.troupe_side(
            self.args(troupe=troupe), {"single_client_put_calls_inline"}, None)
        with open(troupe + ".args") as f:
            calls = f.read().splitlines()
        self.assertEqual(len(calls), 1)  # the default run only
        self.assertIn("--only=single_client_put_calls", calls[0])
        self.assertNotIn("--max_inline_bytes=0", calls[0])
        self.assertEqual(values, {"single_client_put_calls_inline": 9})

    def test_a_figure_fetched_only_to_derive_another_is_not_a_row(self):
        python = fake_program(self.dir, "python", [
            '{"metric": "1:1 actor calls sync", "value": 4000.0, "sd": 0, "unit": "per_second"}'])
        values, _, sources = microbenchmark.ray_side(
            self.args(python=python), {"1_1_actor_call_sync_latency_us"})
        self.assertEqual(values, {"1_1_actor_call_sync_latency_us": 250.0})
        with open(python + ".args") as f:
            calls = f.read().splitlines()
        self.assertEqual(len(calls), 1)
        self.assertIn("--only=1:1 actor calls sync", calls[0])

    def test_ray_figures_come_from_rays_program_and_the_replica_only_for_the_rest(self):
        # The fake "python" answers both scripts: it prints Ray's program's lines when run with
        # ray_perf_run.py and the replica's otherwise.
        python = os.path.join(self.dir, "python")
        with open(python, "w") as f:
            f.write("""#!/bin/sh
echo "$@" >> %s.args
case "$1" in
  *ray_perf_run.py) cat <<'EOF'
{"metric": "single client put gigabytes", "value": 8.0, "sd": 0, "unit": "per_second"}
{"metric": "1:1 actor calls sync", "value": 2000.0, "sd": 0, "unit": "per_second"}
{"metric": "placement group create/removal", "value": 900.0, "sd": 0, "unit": "per_second"}
EOF
  ;;
  *) cat <<'EOF'
{"metric": "actor_creation_per_second", "value": 7.0, "unit": "per_second"}
{"metric": "single_client_put_gigabytes_touched", "value": 3.0, "unit": "GB_per_second"}
EOF
  ;;
esac
""" % python)
        os.chmod(python, 0o755)
        values, units, sources = microbenchmark.ray_side(self.args(python=python), None)
        # Ray's 0.8 "GB" per 800 MiB put, converted to 1e9 bytes.
        self.assertAlmostEqual(values["single_client_put_gigabytes"], 8.0 * 1.048576)
        self.assertEqual(units["single_client_put_gigabytes"], "GB_per_second")
        self.assertEqual(values["placement_group_create_removal_per_second"], 900.0)
        self.assertEqual(sources["placement_group_create_removal_per_second"], "ray_perf")
        self.assertEqual(values["1_1_actor_call_sync_latency_us"], 500.0)
        self.assertEqual(sources["1_1_actor_call_sync_latency_us"], "ray_perf, derived")
        self.assertEqual(sources["actor_creation_per_second"], "replica")
        self.assertEqual(sources["single_client_put_gigabytes_touched"], "replica")
        with open(python + ".args") as f:
            calls = f.read().splitlines()
        self.assertEqual(len(calls), 2)
        self.assertTrue(calls[0].endswith("ray_perf_run.py"))  # no filter, Ray's own sleep
        # The replica runs only what Ray's program lacks.
        self.assertIn("--only=single_client_put_gigabytes_touched,actor_creation_per_second",
                      calls[1])

    def test_every_ray_perf_metric_is_mapped(self):
        # The names Ray's program reports (ray_perf.py, 2.60.0) all have a row.
        names = ["single client get calls (Plasma Store)", "single client put calls (Plasma Store)",
                 "multi client put calls (Plasma Store)", "single client put gigabytes",
                 "single client tasks and get batch", "multi client put gigabytes",
                 "single client get object containing 10k refs", "single client wait 1k refs",
                 "single client tasks sync", "single client tasks async",
                 "multi client tasks async", "1:1 actor calls sync", "1:1 actor calls async",
                 "1:1 actor calls concurrent", "1:n actor calls async", "n:n actor calls async",
                 "n:n actor calls with arg async", "1:1 async-actor calls sync",
                 "1:1 async-actor calls async", "1:1 async-actor calls with args async",
                 "1:n async-actor calls async", "n:n async-actor calls async",
                 "placement group create/removal"]
        self.assertEqual(sorted(microbenchmark.RAY_PERF), sorted(names))


def gcs_trial(new_actor, listening=0.1, actors=3, answering=3, kv=10, kv_read_back=10):
    return {"listening_after": listening, "new_actor": new_actor, "old_actor": 0.01,
            "jobs_list": 0.2, "kv_first": 0.3 if kv else -1, "restarted_after": 0.005,
            "actors_answering": answering, "actors": actors, "pgs_ready": 2, "pgs": 2,
            "jobs_listed": 4, "jobs": 4, "kv_read_back": kv_read_back, "kv": kv}


class GcsFtTest(unittest.TestCase):
    """gcs_ft_bench.py's summary: medians over every trial, Ray/Troupe per round, what each
    restart lost."""

    def results(self):
        population = {"actors_s": 1.0, "pgs_s": 0.5, "kv_s": 2.0, "jobs_s": 3.0,
                      "memory_gib": 2.0}
        return {
            "troupe": [{"populated": [gcs_trial(1.0), gcs_trial(3.0)], "empty": [],
                        "population": population, "empty_gib": 0.1, "failed": []},
                       {"populated": [gcs_trial(2.0), gcs_trial(2.0, answering=2)], "empty": [],
                        "population": dict(population, actors_s=5.0), "empty_gib": 0.1,
                        "failed": []}],
            "ray": [{"populated": [gcs_trial(4.0), gcs_trial(4.0)], "empty": [],
                     "population": population, "empty_gib": 0.7, "failed": []},
                    {"populated": [gcs_trial(10.0), gcs_trial(-1)], "empty": [],
                     "population": population, "empty_gib": 0.7,
                     "failed": [("populated", "no recovery within 300 s")]}]}

    def test_medians_over_trials_and_ratio_per_round(self):
        rows = {r["name"]: r for r in gcs_ft_bench.recovery_rows(self.results(),
                                                                 "populated")}
        row = rows["populated.gcs_kill_to_new_actor_answers"]
        self.assertEqual(row["troupe"], 2.0)  # median of 1, 3, 2, 2
        self.assertEqual(row["ray"], 4.0)  # median of 4, 4, 10 (the trial without a figure out)
        self.assertEqual(row["trials"], {"troupe": 4, "ray": 3})
        self.assertEqual(row["spread"], {"troupe": [1.0, 3.0], "ray": [4.0, 10.0]})
        # Per round, the round medians: 4/2 and 10/2.
        self.assertEqual(row["ratio_ray_over_troupe"], [3.5, 2.0, 5.0, 2])
        self.assertEqual(row["ratios"], {"ray_python": [3.5, 2.0, 5.0, 2]})
        self.assertEqual(row["failed_kills"], {"troupe": 0, "ray": 1})
        self.assertFalse(row["higher_is_better"])
        self.assertNotIn("empty.gcs_kill_to_new_actor_answers",
                         {r["name"] for r in gcs_ft_bench.recovery_rows(self.results(),
                                                                        "empty")})

    def test_after_restart_rows_report_the_worst_trial(self):
        rows = {r["name"]: r for r in gcs_ft_bench.after_restart_rows(self.results(),
                                                                      "populated")}
        row = rows["populated.after_restart.actors_answering"]
        self.assertEqual((row["troupe"], row["of"]["troupe"]), (2, 3))
        self.assertEqual((row["ray"], row["of"]["ray"]), (3, 3))
        self.assertEqual(row["spread"]["troupe"], [2, 3])

    def test_population_rows(self):
        rows = {r["name"]: r for r in gcs_ft_bench.population_rows(self.results())}
        self.assertEqual(rows["populated.population_seconds"]["troupe"], 8.5)  # 6.5 and 10.5
        self.assertEqual(rows["populated.population_seconds"]["spread"]["troupe"], [6.5, 10.5])
        self.assertEqual(rows["populated.head_memory"]["ray"], 2.0)
        self.assertEqual(rows["empty.head_memory"]["ray"], 0.7)

    def test_listening_sockets_finds_a_listener_by_port(self):
        import socket
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            port = server.getsockname()[1]
            self.assertEqual(gcs_ft_bench.listening_sockets(port), set())  # bound, not listening
            server.listen()
            inodes = gcs_ft_bench.listening_sockets(port)
            self.assertEqual(len(inodes), 1)
            # A new listener is told apart from the one before the kill.
            out = {}
            gcs_ft_bench.watch_port(port, inodes, time.monotonic(), out, timeout=0.05)
            self.assertEqual(out["listening_after"], -1)
            gcs_ft_bench.watch_port(port, set(), time.monotonic(), out, timeout=5)
            self.assertGreaterEqual(out["listening_after"], 0)

    def test_kills_are_paced_to_what_the_supervisor_tolerates(self):
        class Head:
            kills = []
            gcs_port = 1

        class Driver:
            def __init__(self):
                self.sent = []

            def send(self, command):
                self.sent.append(command)

            def read_event(self, event):
                return {"t0": 0.0} if event == "killed" else {"new_gcs_pid": 1}

        head = Head()
        head.note_gcs = lambda pid: None
        now = [1000.0]
        slept = []
        with mock.patch.object(gcs_ft_bench.time, "monotonic", side_effect=lambda: now[0]), \
                mock.patch.object(gcs_ft_bench.time, "sleep", side_effect=slept.append), \
                mock.patch.object(gcs_ft_bench, "poll_jobs"), \
                mock.patch.object(gcs_ft_bench, "watch_port"), \
                mock.patch.object(gcs_ft_bench, "listening_sockets", return_value=set()):
            for _ in range(gcs_ft_bench.KILLS_PER_MINUTE):
                gcs_ft_bench.trial(head, Driver(), [])
                now[0] += 1
            self.assertEqual(slept, [])
            gcs_ft_bench.trial(head, Driver(), [])
        # The next kill waits until the first of the last minute is a minute old.
        self.assertEqual(len(slept), 1)
        self.assertAlmostEqual(slept[0], 1000.0 + 60.5 - now[0])


if __name__ == "__main__":
    unittest.main()
