"""Tests of bench/summarize.py on results files written by bench_common.write_results: the tables,
the known gaps (below 3x Ray's Python API or 2x its C++ API), the refusal to quote a quick run, and
the rewrite of the generated blocks in docs/benchmarks.md and README.md. Run by
summarize_test.sh (bazel test //bench:summarize_test)."""
import contextlib
import io
import json
import os
import sys
import tempfile
import time
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_common  # noqa: E402
import summarize  # noqa: E402


def write_run(directory, quick=False):
    rows = [
        bench_common.summary_row("single_client_tasks_async", "per_second", [9000, 10000, 11000],
                                 {"ray_python": [1000, 1000, 1000], "ray_cpp": [6000, 6000, 6000]}),
        bench_common.summary_row("single_client_put_calls", "per_second", [2000, 2100, 2200],
                                 {"ray_python": [1000, 1000, 1000]}),
        bench_common.summary_row("1_1_actor_call_sync_latency_us", "microseconds", [50, 50, 50],
                                 {"ray_python": [500, 400, 600]}, higher_is_better=False),
    ]
    bench_common.write_results(os.path.join(directory, "microbenchmark.json"), "microbenchmark",
                               rows, time.time(), 0.1, 3, quick=quick)
    with open(os.path.join(directory, "machine.txt"), "w") as f:
        f.write("CPU: test, 2 cores\nmemory: 24 GiB\n")


def run_main(*argv):
    out = io.StringIO()
    with mock.patch.object(sys, "argv", ["summarize.py"] + list(argv)), \
            contextlib.redirect_stdout(out):
        summarize.main()
    return out.getvalue()


class SummarizeTest(unittest.TestCase):
    def setUp(self):
        self.temp = tempfile.TemporaryDirectory()
        self.run_dir = os.path.join(self.temp.name, "results")
        os.makedirs(self.run_dir)
        self.root = os.path.join(self.temp.name, "checkout")
        os.makedirs(os.path.join(self.root, "docs"))
        with open(os.path.join(self.root, "docs", "benchmarks.md"), "w") as f:
            f.write("# B\n<!-- summary:begin -->\nold table\n<!-- summary:end -->\nmethods\n")
        with open(os.path.join(self.root, "README.md"), "w") as f:
            f.write("x\n<!-- bench-figures:begin -->\n- 4-440x Ray\n<!-- bench-figures:end -->\ny\n")
        self.causes = os.path.join(self.temp.name, "causes.json")
        with open(self.causes, "w") as f:
            json.dump({"single_client_put_calls": "the store's create RPC"}, f)

    def tearDown(self):
        self.temp.cleanup()

    def test_table_and_known_gaps(self):
        write_run(self.run_dir)
        text = run_main(self.run_dir, "--causes", self.causes)
        self.assertIn("| single_client_tasks_async | per_second | 10,000 | 1,000 | "
                      "10.00x [9.00-11.00] | 6,000 | 1.67x [1.50-1.83] |", text)
        # Lower is better: the advantage is Ray's time over Troupe's, per round.
        self.assertIn("microseconds (lower is better) | 50.0 | 500 | 10.00x [8.00-12.00]", text)
        gaps = text[text.index("### Known gaps"):text.index("### Tasks and objects")]
        self.assertIn("**single_client_put_calls** (microbenchmark): 2.10x [2.00-2.20] against "
                      "Ray (Python API) (below 3x). Cause: the store's create RPC", gaps)
        self.assertIn("**single_client_tasks_async** (microbenchmark): 1.67x [1.50-1.83] against "
                      "Ray (C++ API) (below 2x). Cause: not profiled yet", gaps)
        self.assertNotIn("latency", gaps)
        self.assertIn("Machine: CPU: test, 2 cores; memory: 24 GiB", text)

    def test_failed_trials_are_named_beside_the_figures_of_those_that_worked(self):
        row = {"note": "seconds to X", "trials": {"troupe": 9, "ray": 4},
               "failed_kills": {"troupe": 0, "ray": 2}}
        self.assertEqual(summarize.note_with_failures(row), "seconds to X; figures from the "
                         "trials that recovered (ray 4 of 6, troupe 9 of 9)")
        row["failed_kills"]["ray"] = 0
        self.assertEqual(summarize.note_with_failures(row), "seconds to X")

    def test_write_rewrites_only_the_generated_blocks(self):
        write_run(self.run_dir)
        run_main(self.run_dir, "--write", "--root", self.root, "--causes", self.causes)
        with open(os.path.join(self.root, "docs", "benchmarks.md")) as f:
            doc = f.read()
        self.assertNotIn("old table", doc)
        self.assertTrue(doc.startswith("# B\n<!-- summary:begin -->\n"))
        self.assertTrue(doc.endswith("<!-- summary:end -->\nmethods\n"))
        self.assertIn("10.00x [9.00-11.00]", doc)
        with open(os.path.join(self.root, "README.md")) as f:
            readme = f.read()
        self.assertNotIn("4-440x", readme)
        self.assertIn("`single_client_tasks_async` 9.0-11.0x Ray Python, 1.5-1.8x Ray C++", readme)
        self.assertTrue(readme.endswith("<!-- bench-figures:end -->\ny\n"))

    def test_a_quick_run_is_never_written_into_the_docs(self):
        write_run(self.run_dir, quick=True)
        with self.assertRaises(SystemExit) as raised:
            run_main(self.run_dir, "--write", "--root", self.root)
        self.assertIn("quick-run results", str(raised.exception))
        with open(os.path.join(self.root, "README.md")) as f:
            self.assertIn("4-440x", f.read())

    def test_a_file_that_is_not_a_results_file_is_named(self):
        with open(os.path.join(self.run_dir, "old.json"), "w") as f:
            json.dump({"rounds": {}}, f)
        with self.assertRaises(SystemExit) as raised:
            run_main(self.run_dir)
        self.assertIn("old.json is not a results file", str(raised.exception))

    def test_an_empty_directory_says_what_to_run(self):
        with self.assertRaises(SystemExit) as raised:
            run_main(self.run_dir)
        self.assertIn("bash bench/run_all.sh", str(raised.exception))


if __name__ == "__main__":
    unittest.main()
