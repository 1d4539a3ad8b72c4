"""Tests of the benchmark harness (bench_common.py, microbenchmark.py) on fake sides: the order of
the alternation, the ratio's median and range, and how microbenchmark.py builds each column
(Troupe's store and inline runs, Ray's figures from Ray's own program, the replica only for the
rest); the results-file format (summary_row, per_round_ratios, write_results); how each
bench/*.py runner with --json alternates its sides and turns its rounds into rows;
gcs_ft_bench.py's rows and kill pacing; and elastic_bench.py's figures from events lines (time to
the next committed step, steps lost, goodput) and its fault runs on a fake side that restarts
its workers. Run by bench_harness_test.sh
(bazel test //bench:bench_harness_test)."""
import argparse
import contextlib
import datetime
import io
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402
import cluster_start  # noqa: E402
import collective_bench  # noqa: E402
import elastic_bench  # noqa: E402
import gcs_ft_bench  # noqa: E402
import microbenchmark  # noqa: E402
import reconstruction_bench  # noqa: E402
import scale_bench  # noqa: E402
import tls_bench  # noqa: E402
import train_bench  # noqa: E402
import transfer_bench  # noqa: E402


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


class LoadedMarkTest(unittest.TestCase):
    def test_run_alls_busy_cpus_decide_over_a_lagging_load_average(self):
        with mock.patch.dict(os.environ, {bench_common.BUSY_BEFORE_ENV: "0.02"}):
            self.assertEqual(bench_common.busy_before(), 0.02)
            self.assertFalse(bench_common.is_loaded(5.7, threshold=1.0))
        with mock.patch.dict(os.environ, {bench_common.BUSY_BEFORE_ENV: "1.6"}):
            self.assertTrue(bench_common.is_loaded(0.1, threshold=1.0))

    def test_by_hand_the_load_average_decides(self):
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertIsNone(bench_common.busy_before())
            self.assertTrue(bench_common.is_loaded(5.7, threshold=1.0))
            self.assertFalse(bench_common.is_loaded(0.5, threshold=1.0))

    def test_results_file_records_the_busy_cpus(self):
        with tempfile.TemporaryDirectory() as temp, \
                mock.patch.dict(os.environ, {bench_common.BUSY_BEFORE_ENV: "1.5"}):
            path = os.path.join(temp, "r.json")
            bench_common.write_results(path, "b", [], time.time(), 0.2, 3)
            doc = json.load(open(path))
        self.assertEqual(doc["busy_before"], 1.5)
        self.assertTrue(doc["loaded"])

    def test_busy_cpus_counts_this_process_spinning(self):
        stop = time.time() + 0.5

        def spin():
            while time.time() < stop:
                pass
        spinner = threading.Thread(target=spin)
        spinner.start()
        busy = bench_common.busy_cpus(0.4)
        spinner.join()
        self.assertGreater(busy, 0.5)


class RunAllArgumentsTest(unittest.TestCase):
    """run_all.sh refuses a wrong command line before building or running anything."""

    def run_all(self, *args):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_all.sh")
        result = subprocess.run(["bash", script] + list(args), capture_output=True, text=True,
                                timeout=30)
        return result.returncode, result.stderr

    def test_an_unknown_benchmark_is_named_with_the_known_ones(self):
        code, err = self.run_all("--only=microbench")
        self.assertEqual(code, 2)
        self.assertIn("--only names 'microbench', which is not a benchmark", err)
        self.assertIn(" microbenchmark ", err)
        self.assertIn(" elastic_bench_chaos ", err)

    def test_a_flag_without_its_value_is_refused(self):
        for args in (["--only"], ["--only", "--quick"], ["--out"]):
            code, err = self.run_all(*args)
            self.assertEqual(code, 2, args)
            self.assertIn("needs a value", err, args)

    def test_the_value_may_follow_as_its_own_argument(self):
        code, err = self.run_all("--only", "nosuch")
        self.assertEqual(code, 2)
        self.assertIn("--only names 'nosuch'", err)

    def test_an_empty_list_is_refused(self):
        code, err = self.run_all("--only=,")
        self.assertEqual(code, 2)
        self.assertIn("names no benchmark", err)


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
        defaults = dict(troupe=None, python=None, seconds=0.1, ray_sleep=None,
                        compared_only=False)
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

    def test_compared_only_leaves_out_rays_metrics_without_a_troupe_figure(self):
        python = os.path.join(self.dir, "python")
        with open(python, "w") as f:
            f.write("#!/bin/sh\necho \"$@\" >> %s.args\n" % python)
        os.chmod(python, 0o755)
        microbenchmark.ray_side(self.args(python=python, compared_only=True), None)
        with open(python + ".args") as f:
            ray_call = f.read().splitlines()[0]
        self.assertIn("--only=", ray_call)
        self.assertIn("1:1 actor calls sync", ray_call)
        self.assertIn("placement group create/removal", ray_call)
        self.assertNotIn("async-actor", ray_call)
        self.assertNotIn("multi client put calls", ray_call)

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
    def test_a_driver_that_prints_nothing_within_the_bound_is_stopped_and_named(self):
        import gcs_ft_heads
        with tempfile.TemporaryDirectory() as scratch:
            driver = gcs_ft_heads.Driver([sys.executable, "-c", "import time; time.sleep(60)"],
                                         None, os.path.join(scratch, "err"))
            started = time.time()
            with self.assertRaisesRegex(RuntimeError, "no 'trial' within 1 s"):
                driver.read_event("trial", 1)
            self.assertLess(time.time() - started, 30)  # not the driver's own 60 s
            driver.close()

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

            def read_event(self, event, timeout=None):
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
class RayTokenAuthTest(unittest.TestCase):
    def test_token_mode_with_a_fresh_token_or_the_one_set(self):
        environ = {}
        bench_common.use_ray_token_auth(environ)
        self.assertEqual(environ["RAY_AUTH_MODE"], "token")
        self.assertRegex(environ["RAY_AUTH_TOKEN"], "^[0-9a-f]{64}$")
        environ = {"RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN": "mine"}
        bench_common.use_ray_token_auth(environ)
        self.assertEqual(environ, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "mine"})


def gone(pid, timeout=10.0):
    """Whether process `pid` ended (or is a zombie) within `timeout` seconds."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.02)
    return False


class StopProcessesTest(unittest.TestCase):
    def test_the_matching_processes_and_their_children_only(self):
        import subprocess
        marker = "bench-harness-%d" % os.getpid()
        # A "cluster" process naming the marker, with a child that does not name it (as Ray's
        # agents under a raylet), and a bystander that names another marker.
        script = ("import subprocess, sys, time\n"
                  "child = subprocess.Popen([sys.executable, '-c',\n"
                  "                          'import time; time.sleep(60)'])\n"
                  "print(child.pid, flush=True)\n"
                  "time.sleep(60)\n")
        cluster = subprocess.Popen([sys.executable, "-c", script, "--temp-dir=/tmp/" + marker],
                                   stdout=subprocess.PIPE, text=True)
        bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                      "--temp-dir=/tmp/other-" + marker])
        try:
            child = int(cluster.stdout.readline())
            pids = bench_common.stop_processes([r"--temp-dir=/tmp/%s\b" % marker])
            self.assertEqual(sorted(pids), sorted([cluster.pid, child]))
            self.assertEqual(cluster.wait(timeout=10), -9)
            self.assertTrue(gone(child))
            self.assertIsNone(bystander.poll())
        finally:
            for p in (cluster, bystander):
                p.kill()
                p.wait()
            cluster.stdout.close()


class PerRoundRatiosTest(unittest.TestCase):
    def test_troupe_over_peer_when_higher_is_better(self):
        self.assertEqual(bench_common.per_round_ratios([10, 20, 30], [5, 40, 10]),
                         [2.0, 0.5, 3.0, 3])

    def test_peer_over_troupe_when_lower_is_better(self):
        # Troupe took 1 s and 2 s where the peer took 4 s and 3 s: 4x and 1.5x Troupe's advantage.
        self.assertEqual(bench_common.per_round_ratios([1.0, 2.0], [4.0, 3.0],
                                                       higher_is_better=False),
                         [2.75, 1.5, 4.0, 2])

    def test_rounds_without_both_figures_are_skipped(self):
        self.assertEqual(
            bench_common.per_round_ratios([1.0, None, 2.0, 0.0], [2.0, 5.0, None, 1.0]),
            [0.5, 0.5, 0.5, 1])
        self.assertIsNone(bench_common.per_round_ratios([None, 1.0], [1.0, None]))
        self.assertIsNone(bench_common.per_round_ratios([], []))


class SummaryRowTest(unittest.TestCase):
    def test_medians_and_ratio_per_peer(self):
        row = bench_common.summary_row("m", "per_second", [10, 30, 20], {"ray_python": [5, 10, 2]},
                                       note="n")
        self.assertEqual(row, {"metric": "m", "unit": "per_second", "higher_is_better": True,
                               "troupe": 20, "peers": {"ray_python": 5},
                               "ratios": {"ray_python": [3.0, 2.0, 10.0, 3]}, "note": "n"})

    def test_lower_is_better_is_inverted_so_above_one_is_troupe_faster(self):
        row = bench_common.summary_row("start_head", "s", [0.1, 0.2], {"ray_python": [3.0, 2.0]},
                                       higher_is_better=False)
        self.assertFalse(row["higher_is_better"])
        self.assertAlmostEqual(row["troupe"], 0.15)
        self.assertEqual(row["peers"], {"ray_python": 2.5})
        median, low, high, rounds = row["ratios"]["ray_python"]
        self.assertAlmostEqual(median, 20.0)
        self.assertAlmostEqual(low, 10.0)
        self.assertAlmostEqual(high, 30.0)
        self.assertEqual(rounds, 2)

    def test_a_none_figure_is_skipped_in_the_medians_and_the_ratios(self):
        row = bench_common.summary_row("m", "GB_per_second", [1.0, None, 3.0],
                                       {"gloo": [2.0, 4.0, None]})
        self.assertEqual(row["troupe"], 2.0)  # of 1 and 3
        self.assertEqual(row["peers"], {"gloo": 3.0})  # of 2 and 4
        self.assertEqual(row["ratios"], {"gloo": [0.5, 0.5, 0.5, 1]})  # round 1 only

    def test_no_figures_at_all(self):
        row = bench_common.summary_row("m", "s", [None], {"ray_python": [None], "gloo": []})
        self.assertIsNone(row["troupe"])
        self.assertEqual(row["peers"], {})
        self.assertEqual(row["ratios"], {})
        self.assertEqual(bench_common.summary_row("m", "s", [1.0])["peers"], {})


class WriteResultsTest(unittest.TestCase):
    def setUp(self):
        self.path = os.path.join(tempfile.mkdtemp(), "r.json")

    def read(self):
        with open(self.path) as f:
            return json.load(f)

    def test_the_document(self):
        rows = [bench_common.summary_row("m", "s", [1.0], {"ray_python": [2.0]},
                                         higher_is_better=False)]
        started = datetime.datetime(2026, 11, 27, 17, 0, 5,
                                    tzinfo=datetime.timezone.utc).timestamp()
        with mock.patch.object(sys, "argv", ["bench/x.py", "--quick"]):
            bench_common.write_results(self.path, "x", rows, started, 0.25, 3, quick=True,
                                       raw={"a": [1, 2]}, loaded_threshold=1.0)
        doc = self.read()
        self.assertEqual(doc["bench"], "x")
        self.assertEqual(doc["started"], "2026-11-27T17:00:05Z")
        self.assertRegex(doc["finished"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertGreaterEqual(doc["finished"], doc["started"])
        self.assertEqual(doc["command"], ["bench/x.py", "--quick"])
        self.assertEqual(doc["load_before"], 0.25)
        self.assertFalse(doc["loaded"])
        self.assertTrue(doc["quick"])
        self.assertEqual(doc["rounds"], 3)
        self.assertEqual(doc["rows"], json.loads(json.dumps(rows)))
        self.assertEqual(doc["raw"], {"a": [1, 2]})

    def test_a_run_on_a_loaded_machine_is_marked(self):
        # Default threshold: half the cores.
        with mock.patch.object(bench_common.os, "cpu_count", return_value=4):
            bench_common.write_results(self.path, "x", [], 0, 2.5, 1)
            self.assertTrue(self.read()["loaded"])
            bench_common.write_results(self.path, "x", [], 0, 1.5, 1)
            self.assertFalse(self.read()["loaded"])
        bench_common.write_results(self.path, "x", [], 0, 1.5, 1, loaded_threshold=1.0)
        self.assertTrue(self.read()["loaded"])
        # The caller's own verdict wins over the load average.
        bench_common.write_results(self.path, "x", [], 0, 0.0, 1, loaded=True)
        self.assertTrue(self.read()["loaded"])
        self.assertFalse(self.read()["quick"])


@contextlib.contextmanager
def quiet_loads():
    """Patches every load-average read of the runners to 0.5 (they import it by name), swallows
    the progress lines they write to stderr and keeps their Ray settings out of os.environ."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ))
        for module, name in ((bench_common, "load_average"), (cluster_start, "load_average"),
                             (collective_bench, "load_average"),
                             (reconstruction_bench, "load_average"), (tls_bench, "load_average"),
                             (transfer_bench, "load_average"), (train_bench, "load_1min")):
            stack.enter_context(mock.patch.object(module, name, return_value=0.5))
        stack.enter_context(mock.patch("sys.stderr", io.StringIO()))
        yield


class ClusterStartTest(unittest.TestCase):
    def test_iterations_alternate_and_the_json_has_one_row_per_step(self):
        calls = []

        def fake(name, seconds):
            def once(binary, temp_root):
                calls.append(name)
                return seconds
            return once

        path = os.path.join(tempfile.mkdtemp(), "r.json")
        argv = ["cluster_start.py", "--troupe=/x/troupe", "--ray=/x/ray", "--quick",
                "--json=" + path]
        with mock.patch.object(cluster_start, "troupe_once", fake("troupe", (0.1, 0.2, 0.1))), \
                mock.patch.object(cluster_start, "ray_once", fake("ray", (3.0, 6.0, 5.0))), \
                mock.patch.object(sys, "argv", argv), \
                quiet_loads(), mock.patch("sys.stdout", io.StringIO()):
            cluster_start.main()
        self.assertEqual(calls, ["troupe", "ray", "troupe", "ray"])  # --quick: 2 iterations
        with open(path) as f:
            doc = json.load(f)
        self.assertEqual(doc["bench"], "cluster_start")
        self.assertTrue(doc["quick"])
        self.assertEqual(doc["rounds"], 2)
        self.assertEqual([r["metric"] for r in doc["rows"]],
                         ["start_head", "head_ready", "worker_join"])
        for row, ratio in zip(doc["rows"], (30.0, 30.0, 50.0)):
            self.assertFalse(row["higher_is_better"])
            self.assertAlmostEqual(row["ratios"]["ray_python"][0], ratio)
            self.assertEqual(row["ratios"]["ray_python"][3], 2)
        self.assertEqual(len(doc["raw"]["loads"]), 4)

    def test_without_ray_there_is_no_peer(self):
        table = cluster_start.rows({"troupe": [{"start_head": 1.0, "head_ready": 2.0,
                                                "worker_join": 3.0}]})
        self.assertEqual([r["troupe"] for r in table], [1.0, 2.0, 3.0])
        self.assertEqual([r["peers"] for r in table], [{}, {}, {}])


class ReconstructionTest(unittest.TestCase):
    def test_sides_alternate_and_the_row_is_lower_is_better(self):
        calls = []
        args = argparse.Namespace(troupe="t", bench="b", bytes=1, ray="r", python="p",
                                  no_ray=False, iterations=3)
        troupe = iter([3.0, 3.2, 2.9])
        ray = iter([15.0, 16.0, 14.5])
        with mock.patch.object(reconstruction_bench, "troupe_once",
                               lambda *a: calls.append("troupe") or next(troupe)), \
                mock.patch.object(reconstruction_bench, "ray_once",
                                  lambda *a: calls.append("ray") or next(ray)), \
                quiet_loads():
            results, loads = reconstruction_bench.measure(args)
        self.assertEqual(calls, ["troupe", "ray"] * 3)
        self.assertEqual(len(loads), 6)
        row = reconstruction_bench.rows(results)[0]
        self.assertEqual(row["metric"], "node_death_to_reconstructed_get")
        self.assertFalse(row["higher_is_better"])
        self.assertEqual((row["troupe"], row["peers"]["ray_python"]), (3.0, 15.0))
        self.assertAlmostEqual(row["ratios"]["ray_python"][0], 5.0)  # 15/3, 16/3.2, 14.5/2.9

    def test_no_ray_no_peer(self):
        self.assertEqual(reconstruction_bench.rows({"troupe": [3.0]})[0]["peers"], {})


class ScaleTest(unittest.TestCase):
    def test_rounds_alternate_and_only_equal_n_is_compared(self):
        calls = []
        args = argparse.Namespace(actors="200", ray_actors=50, tasks=1000, ray_tasks=100)
        troupe_created = iter([100.0, 90.0, 110.0, 80.0, 120.0, 70.0])  # N=50, N=200 per round
        ray_created = iter([5.0, 4.0, 6.0])

        def troupe_run(args, mode, n, **kwargs):
            calls.append(("troupe", n))
            return {"actors_created_per_second": next(troupe_created), "load": 0.1,
                    "gcs_rss": 20.0, "gcs_idle_rss": 19.0, "gcs_rss_after": 19.0,
                    "gcs_anon_after": 2.0}

        def ray_run(args, mode, n):
            calls.append(("ray", n))
            return {"actors_created_per_second": next(ray_created), "load": 0.1,
                    "gcs_rss": 40.0, "gcs_idle_rss": 30.0}

        del scale_bench.RECORDS[:]
        with mock.patch.object(scale_bench, "troupe_run", troupe_run), \
                mock.patch.object(scale_bench, "ray_run", ray_run), \
                contextlib.redirect_stdout(io.StringIO()):
            for scale_bench.ROUND[0] in range(3):
                scale_bench.many_actors(args, True)
        self.assertEqual(calls, [("troupe", 50), ("troupe", 200), ("ray", 50)] * 3)
        rows = {r["metric"]: r for r in scale_bench.results_rows(scale_bench.RECORDS)}
        at_50 = rows["many_actors.actors_created_per_second.N=50"]
        self.assertEqual((at_50["troupe"], at_50["peers"]["ray_python"]), (110.0, 5.0))
        self.assertAlmostEqual(at_50["ratios"]["ray_python"][0], 20.0)  # 100/5, 110/4, 120/6
        at_200 = rows["many_actors.actors_created_per_second.N=200"]
        self.assertEqual(at_200["troupe"], 80.0)
        self.assertEqual(at_200["peers"], {})  # Ray never ran 200: nothing to compare with
        del scale_bench.RECORDS[:]


class TlsTest(unittest.TestCase):
    def test_rounds_alternate_and_the_ratio_is_on_over_off(self):
        calls = []

        def run_cluster(troupe, bench, tls, seconds, transfer_mb):
            calls.append((tls, seconds, transfer_mb))
            value = {"off": 100.0, "on": 80.0}[tls]
            figures = {"tasks_async": {"metric": "tasks_async", "value": value,
                                       "unit": "per_second"}}
            if tls == "off" or len(calls) > 2:  # the first TLS-on round lacks the transfer
                figures["node_to_node_transfer"] = {"metric": "node_to_node_transfer",
                                                    "value": value / 100, "unit": "GB_per_second"}
            return figures

        path = os.path.join(tempfile.mkdtemp(), "r.json")
        with mock.patch.object(tls_bench, "run_cluster", run_cluster), \
                mock.patch.object(sys, "argv", ["tls_bench.py", "--quick", "--json", path]), \
                quiet_loads(), mock.patch("sys.stdout", io.StringIO()), \
                mock.patch("sys.stderr", io.StringIO()):
            tls_bench.main()
        self.assertEqual(calls, [("off", 1.0, 20), ("on", 1.0, 20)] * 2)
        with open(path) as f:
            rows = {r["metric"]: r for r in json.load(f)["rows"]}
        self.assertEqual(rows["tasks_async"]["troupe"], 80.0)
        self.assertEqual(rows["tasks_async"]["peers"], {"tls_off": 100.0})
        self.assertEqual(rows["tasks_async"]["ratios"]["tls_off"], [0.8, 0.8, 0.8, 2])
        self.assertIn("TLS's cost", rows["tasks_async"]["note"])
        # A round without the figure is left out of the ratio, not counted as zero.
        self.assertEqual(rows["node_to_node_transfer"]["ratios"]["tls_off"], [0.8, 0.8, 0.8, 1])
        self.assertEqual(rows["node_to_node_transfer"]["unit"], "GB_per_second")


def record(impl, op, ranks, nbytes, busbw, **extra):
    return dict({"impl": impl, "op": op, "ranks": ranks, "bytes": nbytes, "time_us": 10.0,
                 "busbw_gbps": busbw, "cpu_us_per_member": 5.0}, **extra)


class CollectiveTest(unittest.TestCase):
    def test_rows_for_the_summary_sizes_only_pairing_the_rounds(self):
        samples = {}
        for round_index, (troupe, gloo) in enumerate(((4.0, 2.0), (3.0, 3.0))):
            for nbytes in (1024, 4096, 1 << 20, 64 << 20):
                samples.setdefault(("troupe", "allreduce", 2, nbytes), {})[round_index] = \
                    record("troupe", "allreduce", 2, nbytes, troupe)
                samples.setdefault(("gloo", "allreduce", 2, nbytes), {})[round_index] = \
                    record("gloo", "allreduce", 2, nbytes, gloo)
        samples[("troupe", "reduce_scatter", 4, 4096)] = {
            1: record("troupe", "reduce_scatter", 4, 4096, 1.0)}
        samples[("gloo", "reduce_scatter", 4, 4096)] = {
            0: record("gloo", "reduce_scatter", 4, 4096, 1.0, note="emulated")}
        rows = {r["metric"]: r for r in collective_bench.busbw_rows(
            samples, 2, collective_bench.SUMMARY_BYTES)}
        # The summary sizes only, all-reduce first, by size.
        self.assertEqual(list(rows), ["allreduce_busbw_2ranks_4KB", "allreduce_busbw_2ranks_1MB",
                                      "allreduce_busbw_2ranks_64MB",
                                      "reduce_scatter_busbw_4ranks_4KB"])
        row = rows["allreduce_busbw_2ranks_4KB"]
        self.assertEqual(row["unit"], "GB_per_second")
        self.assertTrue(row["higher_is_better"])
        self.assertEqual(row["ratios"]["gloo"], [1.5, 1.0, 2.0, 2])
        # Troupe's only figure is from round 2, gloo's from round 1: no pair, no ratio.
        scatter = rows["reduce_scatter_busbw_4ranks_4KB"]
        self.assertEqual(scatter["ratios"], {})
        self.assertIn("emulated", scatter["note"])

    def test_single_host_json_and_quick_sizes(self):
        commands = []

        def json_lines(command):
            commands.append(command)
            world = int(command[-1].split("=")[-1])
            impl = "gloo" if "gloo_bench.py" in command[1] else "troupe"
            return [record(impl, "allreduce", world, n, 2.0 if impl == "troupe" else 1.0)
                    for n in (4096, 1 << 20, 64 << 20)]

        path = os.path.join(tempfile.mkdtemp(), "r.json")
        argv = ["collective_bench.py", "--troupe=/x/collective_bench", "--python=/x/python",
                "--quick", "--json", path]
        with mock.patch.object(collective_bench, "json_lines", json_lines), \
                mock.patch.object(sys, "argv", argv), \
                quiet_loads(), mock.patch("sys.stdout", io.StringIO()):
            collective_bench.main()
        # Troupe then gloo per rank count, each with the summary sizes only.
        self.assertEqual([c[0] for c in commands],
                         ["/x/collective_bench", "/x/python", "/x/collective_bench", "/x/python"])
        self.assertIn("--extra-bytes=67108864", commands[0])
        self.assertIn("--factor=256", commands[0])
        self.assertEqual(commands[1][commands[1].index("--extra-bytes") + 1], "67108864")
        self.assertEqual(commands[1][commands[1].index("--seconds") + 1], "0.2")
        with open(path) as f:
            doc = json.load(f)
        self.assertEqual(len(doc["rows"]), 6)  # 2 rank counts x 3 sizes
        self.assertTrue(all(r["ratios"]["gloo"][0] == 2.0 for r in doc["rows"]))
        self.assertEqual(len(doc["raw"]["records"]), 12)


class TrainTest(unittest.TestCase):
    def test_rounds_rotate_and_rows_pair_the_rounds(self):
        calls = []
        configs = [(name, lambda name=name: calls.append(name) or len(calls))
                   for name in ("a", "b", "c")]
        with quiet_loads():
            samples, loads = train_bench.rotated_rounds(configs, 3)
        self.assertEqual(calls, ["a", "b", "c", "b", "c", "a", "c", "a", "b"])
        self.assertEqual(samples, {"a": [1, 6, 8], "b": [2, 4, 9], "c": [3, 5, 7]})
        self.assertEqual(loads[3], (1, "b", 0.5))

        rows = train_bench.throughput_rows({
            "troupe, 1 worker": [600.0, 660.0], "libtorch plain, 1 process": [600.0, 600.0],
            "troupe, 2 workers": [1100.0, 1200.0], "torch DDP gloo, 2 processes": [1000.0, 1000.0]})
        self.assertEqual([r["metric"] for r in rows], ["train_1_worker_images_per_s",
                                                        "train_2_workers_images_per_s"])
        self.assertAlmostEqual(rows[0]["ratios"]["libtorch"][0], 1.05)
        self.assertAlmostEqual(rows[1]["ratios"]["torch_ddp"][0], 1.15)

    def test_scaling_row(self):
        rate = lambda *values: [{"images_per_s": v} for v in values]
        row = train_bench.scaling_row({
            "troupe, 1 worker": rate(100.0, 100.0), "troupe, 2 workers": rate(180.0, 160.0),
            "plain, 1 process": rate(100.0, 0.0), "plain, 2 processes at once": rate(190.0, 150.0)})
        self.assertEqual(row["metric"], "scaling_efficiency_2_workers")
        self.assertAlmostEqual(row["troupe"], 0.85)  # of 0.9 and 0.8
        # The second round's ceiling has no figure (a zero rate): only the first pairs.
        self.assertAlmostEqual(row["ratios"]["libtorch"][0], 0.9 / 0.95)
        self.assertEqual(row["ratios"]["libtorch"][3], 1)


class TransferTest(unittest.TestCase):
    def test_one_row_per_size_with_both_peers(self):
        rows = {1 << 20: {"troupe": [1.0, 2.0], "ray": [0.5, 0.5], "tcp": [4.0, 4.0]},
                1 << 30: {"troupe": [3.0], "ray": [], "tcp": [6.0]}}
        out = transfer_bench.rows_of([1 << 20, 1 << 30], rows)
        self.assertEqual([r["metric"] for r in out], ["node_to_node_transfer_1MB",
                                                       "node_to_node_transfer_1GB"])
        self.assertEqual(out[0]["ratios"]["ray_python"], [3.0, 2.0, 4.0, 2])
        self.assertEqual(out[0]["ratios"]["raw_tcp"], [0.375, 0.25, 0.5, 2])
        self.assertEqual(sorted(out[1]["peers"]), ["raw_tcp"])  # --no-ray


class MicrobenchmarkRowsTest(unittest.TestCase):
    def test_rows_carry_both_ray_peers_and_floors_carry_none(self):
        troupe = [{"single_client_tasks_async": 20000.0, "grpc_unary_async_calls": 14000.0,
                   "1_1_actor_call_sync_latency_us": 300.0,
                   "single_client_get_calls_inline": 1e6}] * 3
        ray = [{"single_client_tasks_async": 5000.0, "1_1_actor_call_sync_latency_us": 900.0}] * 3
        ray_cpp = [{"single_client_tasks_async": 10000.0}] * 3
        metrics = ["single_client_tasks_async", "grpc_unary_async_calls",
                   "1_1_actor_call_sync_latency_us", "single_client_get_calls_inline",
                   "single_client_get_object_containing_10k_refs"]
        units = {"1_1_actor_call_sync_latency_us": "microseconds"}
        rows = {r["metric"]: r for r in microbenchmark.summary_rows(
            metrics, units, {"single_client_tasks_async": "ray_perf"}, troupe, ray, ray_cpp,
            {"single_client_get_object_containing_10k_refs": ("no borrowing", "per_second")})}
        tasks = rows["single_client_tasks_async"]
        self.assertEqual(tasks["ratios"]["ray_python"], [4.0, 4.0, 4.0, 3])
        self.assertEqual(tasks["ratios"]["ray_cpp"], [2.0, 2.0, 2.0, 3])
        self.assertIn("ray_perf", tasks["note"])
        # A time: Troupe's advantage is Ray's time over Troupe's.
        latency = rows["1_1_actor_call_sync_latency_us"]
        self.assertFalse(latency["higher_is_better"])
        self.assertEqual(latency["ratios"]["ray_python"][0], 3.0)
        # Floors and the inline path have no peer, and say why.
        self.assertEqual(rows["grpc_unary_async_calls"]["peers"], {})
        self.assertIn("physical floor", rows["grpc_unary_async_calls"]["note"])
        self.assertEqual(rows["single_client_get_calls_inline"]["peers"], {})
        self.assertIn("not in Ray's C++ API: no borrowing",
                      rows["single_client_get_object_containing_10k_refs"]["note"])



def step_line(t, step, gen, samples_per_step=64):
    return "step t=%.3f step=%d samples=%d world=4 gen=%s" % (t, step, step * samples_per_step,
                                                              gen)


def elastic_events(*lines):
    return elastic_bench.parse_events("\n".join(lines))


class ElasticEventsTest(unittest.TestCase):
    def test_lines_parse_and_foreign_or_torn_ones_are_skipped(self):
        events = elastic_bench.parse_events(
            "worker t=10.5 rank=3 world=4 pid=4242 gen=77-1\n"
            "step t=11.25 step=1 samples=64 world=4 gen=77-1\n"
            "eval t=30 step=60 accuracy=0.8125 gen=77-1\n"
            "(pid=1, node=a) rank 3 trains on cpu\n"  # not an event
            "step t=12.0 step=2 samp\n"  # torn: no value
            "step step=3 samples=192\n"  # no time
            "step t=x step=3\n")  # not a number
        self.assertEqual(events, [
            {"kind": "worker", "t": 10.5, "rank": 3, "world": 4, "pid": 4242, "gen": "77-1"},
            {"kind": "step", "t": 11.25, "step": 1, "samples": 64, "world": 4, "gen": "77-1"},
            {"kind": "eval", "t": 30.0, "step": 60, "accuracy": 0.8125, "gen": "77-1"}])

    def test_a_restart_from_a_checkpoint_redoes_the_steps_since_it(self):
        # Steps 1..7 at t=1..7; a kill at 7.5; the restarted group resumes from the checkpoint
        # of step 4: its first step is 5, at t=20.
        events = elastic_events(*[step_line(t, t, "a") for t in range(1, 8)] +
                                [step_line(20 + i, 5 + i, "b") for i in range(4)])
        figures = elastic_bench.fault_figures(events, 7.5, bound=60)
        self.assertEqual(figures, {"recovered": True, "seconds": 12.5, "steps_redone": 3,
                                   "steps_skipped": 0, "steps_lost": 3, "last_step_before": 7,
                                   "first_step_after": 5})

    def test_a_step_the_old_group_still_commits_is_not_the_recovery(self):
        # The step in flight at the fault (6) still commits in the old generation; the next
        # generation's first step (7) is the recovery, and nothing was lost.
        events = elastic_events(*[step_line(t, t, "a") for t in range(1, 6)] +
                                [step_line(5.6, 6, "a"), step_line(6.5, 7, "b"),
                                 step_line(7.0, 8, "b")])
        figures = elastic_bench.fault_figures(events, 5.5, bound=60)
        self.assertTrue(figures["recovered"])
        self.assertAlmostEqual(figures["seconds"], 1.0)
        self.assertEqual((figures["last_step_before"], figures["first_step_after"],
                          figures["steps_lost"]), (6, 7, 0))

    def test_skipped_steps_count_as_lost(self):
        events = elastic_events(step_line(1, 1, "a"), step_line(2, 2, "a"), step_line(3, 5, "b"))
        figures = elastic_bench.fault_figures(events, 2.5, bound=60)
        self.assertEqual((figures["steps_redone"], figures["steps_skipped"],
                          figures["steps_lost"]), (0, 2, 2))

    def test_no_step_within_the_bound_is_no_figure(self):
        late = elastic_events(step_line(1, 1, "a"), step_line(2, 2, "a"),
                              step_line(200, 3, "b"))
        never = elastic_events(step_line(1, 1, "a"), step_line(2, 2, "a"))
        # A stopped worker's peers stay in their generation: steps of it are no recovery.
        same_group = elastic_events(step_line(1, 1, "a"), step_line(2, 2, "a"),
                                    step_line(2.6, 3, "a"))
        for events in (late, never, same_group):
            figures = elastic_bench.fault_figures(events, 2.5, bound=30)
            self.assertFalse(figures["recovered"])
            self.assertIsNone(figures["seconds"])
            self.assertIsNone(figures["steps_lost"])

    def test_a_fault_before_any_step_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "no step was committed before the fault"):
            elastic_bench.fault_figures(elastic_events(step_line(5, 1, "a")), 2.0, bound=30)

    def test_committed_rate_and_goodput_count_what_was_redone_once(self):
        clean = elastic_events(*[step_line(t, t + 1, "a") for t in range(0, 11)])
        self.assertAlmostEqual(elastic_bench.committed_rate(clean), 64.0)
        self.assertIsNone(elastic_bench.committed_rate(clean[:1]))
        # Steps 1..5 at t=0..4, a kill, the restart resumes at step 3 (checkpoint 2) at t=10:
        # at t=12 the run has committed 5 steps (320 samples), 1 of them (64) already at t=0.
        chaos = elastic_events(*[step_line(t, t + 1, "a") for t in range(5)] +
                               [step_line(10 + i, 3 + i, "b") for i in range(3)])
        self.assertEqual(elastic_bench.progress_at(chaos, 4.5), 320)
        self.assertEqual(elastic_bench.progress_at(chaos, 10.5), 192)  # back to the checkpoint
        self.assertEqual(elastic_bench.progress_at(chaos, -1), 0)
        self.assertAlmostEqual(elastic_bench.goodput(chaos, 0, 12), (320 - 64) / 12)
        with self.assertRaisesRegex(ValueError, "window"):
            elastic_bench.goodput(chaos, 3, 3)

    def test_final_accuracy_is_the_last_evaluation(self):
        self.assertIsNone(elastic_bench.final_accuracy(elastic_events(step_line(1, 1, "a"))))
        self.assertEqual(elastic_bench.final_accuracy(elastic_events(
            "eval t=1 step=5 accuracy=0.5 gen=a", "eval t=2 step=9 accuracy=0.75 gen=b")), 0.75)

    def test_the_victim_is_the_highest_live_rank_but_never_rank_0(self):
        events = elastic_events(
            "worker t=1 rank=0 world=4 pid=100 gen=a", "worker t=1 rank=3 world=4 pid=103 gen=a",
            "worker t=1 rank=2 world=4 pid=102 gen=a",
            "worker t=9 rank=0 world=4 pid=200 gen=b", "worker t=9 rank=3 world=4 pid=203 gen=b")
        self.assertEqual(elastic_bench.pick_victim(events, lambda pid: True), 203)
        self.assertEqual(elastic_bench.pick_victim(events, lambda pid: pid != 203), 103)
        self.assertEqual(elastic_bench.pick_victim(events, lambda pid: pid in (102, 200)), 102)
        self.assertIsNone(elastic_bench.pick_victim(events, lambda pid: pid in (100, 200)))

    def test_the_events_file_is_read_as_it_grows(self):
        path = os.path.join(tempfile.mkdtemp(), "events.txt")
        reader = elastic_bench.EventsReader(path)
        self.assertEqual(reader.events(), [])  # not there yet
        with open(path, "w") as f:
            f.write("step t=1 step=1 samples=64 world=4 gen=a\nstep t=2 st")
        self.assertEqual([e["step"] for e in reader.events()], [1])  # the torn line waits
        with open(path, "a") as f:
            f.write("ep=2 samples=128 world=4 gen=a\n")
        self.assertEqual([e["step"] for e in reader.events()], [1, 2])

    def test_rows_are_lower_is_better_for_times_and_carry_no_figure_for_none(self):
        args = argparse.Namespace(workers=4, batch_size=16, checkpoint_every=20, kill_step=30,
                                  recovery_bound=180, hang_seconds=30, steps=60,
                                  chaos_interval=10, chaos_seconds=60, chaos_epochs=0,
                                  troupe_elastic=None,
                                  scenarios=["clean", "recovery", "hang", "chaos"])
        results = {
            "troupe": [{"recovery_seconds": 2.0, "recovery_steps_lost": 10, "hang_seconds": None,
                        "clean_samples_per_s": 100.0, "chaos_ratio": 0.5},
                       {"recovery_seconds": 4.0, "recovery_steps_lost": 10, "hang_seconds": None,
                        "clean_samples_per_s": 110.0, "chaos_ratio": 0.7}],
            "torchrun": [{"recovery_seconds": 20.0, "recovery_steps_lost": 11,
                          "hang_seconds": None, "clean_samples_per_s": 90.0, "chaos_ratio": 0.1},
                         {"recovery_seconds": 20.0, "recovery_steps_lost": 11,
                          "hang_seconds": None, "clean_samples_per_s": 100.0,
                          "chaos_ratio": 0.2}]}
        rows = {r["metric"]: r for r in elastic_bench.result_rows(results, args)}
        self.assertEqual(sorted(rows), sorted([
            "recovery_seconds", "recovery_steps_lost", "final_accuracy_after_kill",
            "hang_recovery_seconds", "committed_samples_per_s", "final_accuracy_failure_free",
            "goodput_under_chaos_samples_per_s", "goodput_under_chaos_ratio"]))
        recovery = rows["recovery_seconds"]
        self.assertFalse(recovery["higher_is_better"])
        self.assertEqual((recovery["troupe"], recovery["peers"]["torchrun"]), (3.0, 20.0))
        self.assertEqual(recovery["ratios"]["torchrun"], [7.5, 5.0, 10.0, 2])  # 20/2, 20/4
        self.assertIsNone(rows["hang_recovery_seconds"]["troupe"])
        self.assertEqual(rows["hang_recovery_seconds"]["ratios"], {})
        ratio = rows["goodput_under_chaos_ratio"]["ratios"]["torchrun"]
        self.assertAlmostEqual(ratio[0], 4.25)  # of 0.5 / 0.1 and 0.7 / 0.2
        self.assertAlmostEqual(ratio[1], 3.5)
        self.assertNotIn("ray_train", recovery["peers"])
        self.assertIn("the whole group restarts", recovery["note"])
        args.troupe_elastic = (3, 4)
        self.assertIn("elastic group, 3 to 4 workers",
                      elastic_bench.result_rows(results, args)[0]["note"])
        args.chaos_epochs = 2  # the long chaos run: whole epochs, and the accuracy under chaos
        rows = {r["metric"]: r for r in elastic_bench.result_rows(results, args)}
        self.assertIn("final_accuracy_under_chaos", rows)
        self.assertIn("for 2 whole epochs", rows["goodput_under_chaos_samples_per_s"]["note"])
        self.assertIn("2 whole epochs", rows["committed_samples_per_s"]["note"])
        args.chaos_epochs = 0
        args.scenarios = ["recovery"]
        self.assertEqual([r["metric"] for r in elastic_bench.result_rows(results, args)],
                         ["recovery_seconds", "recovery_steps_lost", "final_accuracy_after_kill"])


# A side whose "workers" are two processes under a supervisor that restarts both when one dies,
# resuming after the last multiple of 5 steps (a checkpoint every 5), as torchrun's agent does:
# rank 0 commits a step every 50 ms whatever rank 1 does, and evaluates after the last. An epoch
# is 10 steps.
FAKE_WORKER = """
import os, sys, time
events, rank, gen, start, steps = sys.argv[1:6]
rank, start, steps = int(rank), int(start), int(steps)
def event(kind, fields):
    fd = os.open(events, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, ("%s t=%.6f %s\\n" % (kind, time.time(), fields)).encode())
    os.close(fd)
event("worker", "rank=%d world=2 pid=%d gen=%s" % (rank, os.getpid(), gen))
if rank == 0:
    for step in range(start + 1, steps + 1):
        time.sleep(0.05)
        event("step", "step=%d samples=%d world=2 gen=%s" % (step, 32 * step, gen))
        if step % 10 == 0 or step == steps:  # the end of an epoch
            event("eval", "step=%d accuracy=0.5 gen=%s" % (step, gen))
else:
    time.sleep(3600)
"""
FAKE_SUPERVISOR = """
import os, subprocess, sys, time
events, steps, worker = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def last_step():
    try:
        with open(events) as f:
            done = [int(w[5:]) for line in f for w in line.split() if w.startswith("step=")]
    except FileNotFoundError:
        return 0
    return max(done) if done else 0
for restart in range(20):
    start = last_step() // 5 * 5
    procs = [subprocess.Popen([sys.executable, "-c", worker, events, str(rank), "g%d" % restart,
                               str(start), str(steps)]) for rank in (0, 1)]
    while procs[0].poll() is None and procs[1].poll() is None:
        time.sleep(0.02)
    if procs[0].poll() == 0:
        procs[1].kill()
        sys.exit(0)
    for p in procs:
        p.kill()
        p.wait()
sys.exit(1)
"""


class FakeSide(elastic_bench.Side):
    def command(self, workdir, events, steps, epochs, max_failures):
        return ([sys.executable, "-c", FAKE_SUPERVISOR, events, str(steps or 10 * epochs),
                 FAKE_WORKER], None, [])


class ElasticFaultRunTest(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.mkdtemp()
        self.args = argparse.Namespace(steps=30, kill_step=7, run_timeout=60, max_failures=3,
                                       chaos_max_failures=10, keep=False, chaos_seconds=1.5,
                                       chaos_interval=0.5, chaos_epochs=0)
        self.side = FakeSide("fake", self.args, self.scratch)

    def test_a_killed_worker_is_restarted_and_the_figures_come_from_its_events(self):
        figures = elastic_bench.fault_run(self.side, self.args, signal.SIGKILL, 30, "recovery")
        self.assertTrue(figures["recovered"])
        self.assertGreaterEqual(figures["last_step_before"], 7)
        # The supervisor resumed after the last multiple of 5: the steps since were redone.
        self.assertEqual(figures["first_step_after"], figures["last_step_before"] // 5 * 5 + 1)
        self.assertEqual(figures["steps_lost"], figures["last_step_before"] % 5)
        self.assertGreater(figures["seconds"], 0)
        self.assertEqual(figures["accuracy"], 0.5)  # trained to the end
        self.assertEqual(os.listdir(self.scratch), [])  # the run's directory is gone
        self.assertTrue(elastic_bench.gone(figures["pid"]))  # the victim (rank 1)

    def test_a_stopped_worker_that_nobody_replaces_gives_no_figure(self):
        started = time.time()
        figures = elastic_bench.fault_run(self.side, self.args, signal.SIGSTOP, 1, "hang")
        self.assertFalse(figures["recovered"])
        self.assertIsNone(figures["seconds"])
        self.assertLess(time.time() - started, 30)  # stopped at the bound, not at the run's end
        self.assertTrue(elastic_bench.gone(figures["pid"]))  # killed with the run

    def test_chaos_kills_every_interval_and_measures_the_progress(self):
        figures = elastic_bench.chaos_run(self.side, self.args)
        self.assertGreaterEqual(figures["chaos_kills"], 2)
        self.assertGreater(figures["chaos_samples_per_s"], 0)
        self.assertLess(figures["chaos_samples_per_s"], 32 / 0.05)  # below one step per 50 ms
        self.assertNotIn("chaos_accuracy", figures)  # a window: no evaluation

    def test_chaos_over_whole_epochs_kills_until_the_evaluation(self):
        self.args.chaos_epochs = 3  # 30 steps of 50 ms, restarted after each kill
        self.args.chaos_interval = 0.6
        figures = elastic_bench.chaos_run(self.side, self.args)
        self.assertEqual(figures["chaos_accuracy"], 0.5)
        self.assertEqual(figures["chaos_steps"], 30)  # all 3 epochs, not the first
        self.assertGreaterEqual(figures["chaos_kills"], 2)
        self.assertGreater(figures["chaos_seconds"], 1.5)  # 30 steps of 50 ms, and what was redone
        self.assertLess(figures["chaos_samples_per_s"], 32 / 0.05)
        self.assertEqual(os.listdir(self.scratch), [])


if __name__ == "__main__":
    unittest.main()
