"""The scale envelope (issue 18), Troupe and Ray side by side on this machine.

  many_nodes   N simulated nodes (bazel-bin/src/raylet/troupe_simulated_nodes) joined to one
               Troupe head, in two cases per N: churn (the default first row: every node's
               available resources change on every report, and a driver keeps tasks needing
               the nodes' "sim" resource running there, their leases spilled back by the head's
               raylet to the nodes' pretend workers) and best (resources unchanged, no tasks:
               every report's reply is empty). GCS CPU share (from /proc/<pid>/stat over a
               window) and RSS, the report rate, the resource changes the GCS applied and the
               view entries it handed out per second, tasks run on the nodes per second, time
               until a node's death reaches a subscriber, a task's scheduling latency on the
               head, `troupe status` wall time. Ray has no simulated-node mode: "n/a".
  many_tasks   N tiny 1-CPU tasks submitted at once on a 2-CPU head: submission and completion
               rates, driver peak RSS and raylet peak RSS.
  many_actors  N actors (holding no resources) alive at once: creation rate, RSS/PSS/anonymous
               memory per actor process, GCS RSS and its anonymous part (at once, 2 s later,
               and, for Troupe, after the driver exited). Raise N with --actors until something
               breaks; with Ray on, Troupe also runs at Ray's N so the GCS figures compare at
               equal N.

Memory figures come as RSS and its anonymous part (the process's own heap and stacks); the rest
of RSS is file pages (executable and shared-library code, shared between processes).
  many_pgs     N placement groups of one small bundle created, then removed: rates, GCS RSS.

The comparisons with Ray (many_tasks, many_actors, many_pgs) run --rounds rounds (default 3),
Troupe then Ray in each; the results file has each side's median and the median per-round ratio
with its range. Where Troupe's N differs from Ray's, Troupe also runs at Ray's N and only that
figure is compared. many_nodes (Troupe only) runs once.
Every figure comes with the 1-minute load average when it was taken (the machine may be shared).
Build first (optimised):
  bazel build -c opt //src/cli:troupe //src/raylet:troupe_simulated_nodes //bench:scale_bench
Ray comes from ~/.cache/troupe-bench-venv (bash bench/setup_peers.sh).
Usage:
  python3 bench/scale_bench.py [--nodes 250,1000] [--node-cases churn,best] [--tasks 100000]
      [--actors 200] [--pgs 1000] [--ray-tasks 10000] [--ray-actors 50] [--ray-pgs 1000]
      [--only many_nodes,...] [--no-ray] [--rounds 3] [--json FILE] [--quick]
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import summary_row, write_results  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
# Seconds a daemon is left alone before a "settled" or idle memory figure is read (both systems).
SETTLE_S = 2.0


def load():
    return os.getloadavg()[0]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def rss_mib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def rollup_mib(pid, key):
    """One field of /proc/<pid>/smaps_rollup, in MiB (0 when the process is gone)."""
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def pss_mib(pid):
    """Proportional set size: shared pages (libraries) split among the processes mapping them."""
    return rollup_mib(pid, "Pss")


def anon_mib(pid):
    """Anonymous resident memory: the process's own heap, stacks and copied-on-write data. The
    rest of RSS is file pages (the executable's and shared libraries' code and read-only data,
    shared with every process mapping them)."""
    return rollup_mib(pid, "Anonymous")


def cpu_share(pid, window):
    """Fraction of one core `pid` used over `window` seconds."""
    before, start = cpu_seconds(pid), time.monotonic()
    time.sleep(window)
    return (cpu_seconds(pid) - before) / (time.monotonic() - start)


def children(pid):
    """Pids whose parent is `pid`."""
    result = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    result.append(int(entry))
        except (OSError, ValueError, IndexError):
            pass
    return result


class PeakRss:
    """Samples the RSS (and its anonymous part, as peak_anon) of `pid` every 0.2 s on a thread
    until stop()."""

    def __init__(self, pid):
        self.pid, self.peak, self.peak_anon, self._stop = pid, 0.0, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, rss_mib(self.pid))
            self.peak_anon = max(self.peak_anon, anon_mib(self.pid))

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self.peak


def json_lines(text):
    return [json.loads(l) for l in text.splitlines() if l.strip().startswith("{")]


# ------------------------------------------------------------------------------------- Troupe

class TroupeHead:
    """A fresh one-node Troupe head in its own temp dir; a context manager that stops it."""

    def __init__(self, args, cpus=2):
        self.args = args
        self.temp = tempfile.mkdtemp(prefix="troupe-scale-")
        self.port = free_port()
        # No HTTP server (--http-port=0): nothing here uses it, and two runs at once would both
        # want the default port.
        out = subprocess.run([args.troupe, "start", "--head", "--port=%d" % self.port,
                              "--http-port=0", "--num-cpus=%d" % cpus, "--temp-dir=" + self.temp],
                             capture_output=True, text=True)
        if out.returncode != 0:
            self.stop()
            raise RuntimeError(out.stdout + out.stderr)
        session = os.path.join(self.temp, "session_latest")
        with open(os.path.join(session, "token")) as f:
            token = f.read().strip()
        self.env = dict(os.environ, TROUPE_ADDRESS="127.0.0.1:%d" % self.port, TROUPE_TOKEN=token)
        self.gcs_pid = self._pid(session, "gcs")
        self.raylet_pid = self._pid(session, "raylet")
        time.sleep(SETTLE_S)  # let the GCS finish starting before its idle RSS is read
        self.gcs_idle_rss = rss_mib(self.gcs_pid)
        self.gcs_idle_anon = anon_mib(self.gcs_pid)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    @staticmethod
    def _pid(session, name):
        with open(os.path.join(session, "pids", name + ".pid")) as f:
            return int(f.read().split()[0])

    def bench(self, mode, n, on_event=None):
        """Runs bench/scale_bench.cc; returns its metrics, plus what on_event(item) returned
        for each {"event": ...} line (read while the driver waits), plus "broke" if it failed."""
        proc = subprocess.Popen([self.args.bench, "--mode=" + mode, "--n=%d" % n], env=self.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        result = {}
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            item = json.loads(line)
            if "metric" in item:
                result[item["metric"]] = item["value"]
            elif on_event is not None:
                result.update(on_event(item))
        err = proc.stderr.read().strip()
        if proc.wait() != 0:
            result["broke"] = err.splitlines()[-1][:200] if err else "exit %d" % proc.returncode
        return result

    def status_seconds(self):
        start = time.monotonic()
        out = subprocess.run([self.args.troupe, "status", "--temp-dir=" + self.temp],
                             capture_output=True, text=True, env=self.env)
        if out.returncode != 0:
            raise RuntimeError(out.stderr)
        return time.monotonic() - start

    def stop(self):
        subprocess.run([self.args.troupe, "stop", "--force", "--temp-dir=" + self.temp],
                       capture_output=True)
        shutil.rmtree(self.temp, ignore_errors=True)


def per_entity_kib(rss, idle, n):
    """GCS memory growth per entity: (RSS with n entities - idle RSS) / n, in KiB."""
    if not isinstance(rss, (int, float)) or not isinstance(idle, (int, float)) or not n:
        return None
    return (rss - idle) * 1024.0 / n


def stats_rates(before, after, seconds):
    """Per-second rates of the simulator's counters between two "stats" answers."""
    return {key: (after[key] - before[key]) / seconds for key in after if key in before}


def troupe_many_nodes(args, n, churn):
    """N simulated nodes on a fresh head. churn: every node's available resources change on
    every report (the simulator's --churn) and a driver keeps tasks running on the nodes (their
    leases spilled back from the head's raylet) while the GCS's CPU is sampled; otherwise the
    best case: resources unchanged, every report's reply empty, no tasks."""
    with TroupeHead(args) as head:
        command = [args.simulator, "--nodes=%d" % n, "--commands",
                   "--report-threads=%d" % args.report_threads]
        if churn:
            command += ["--resources=sim:%d" % args.sim_slots, "--churn",
                        "--task-ms=%d" % args.task_ms]
        else:
            command += ["--resources=sim:1"]
        sim = subprocess.Popen(command, env=head.env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
        driver = None
        try:
            def ask(command):
                sim.stdin.write(command + "\n")
                sim.stdin.flush()
                return json.loads(sim.stdout.readline())
            ready = json.loads(sim.stdout.readline())
            time.sleep(args.settle)
            result = {"register_s": ready["register_seconds"], "load": load(),
                      "gcs_idle_rss": head.gcs_idle_rss}
            if churn:
                # Tasks on the simulated nodes all through the window (it starts once the
                # driver's first wave is done and its leases are warm).
                driver = subprocess.Popen([args.bench, "--mode=sim_tasks",
                                           "--n=%d" % (args.window + 2)], env=head.env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True)
                for line in driver.stdout:
                    if line.startswith("{") and json.loads(line).get("event") == "begin":
                        break
            before, sim_cpu, start = ask("stats"), cpu_seconds(sim.pid), time.monotonic()
            result["gcs_cpu"] = cpu_share(head.gcs_pid, args.window)
            after, elapsed = ask("stats"), time.monotonic() - start
            result["sim_cpu"] = (cpu_seconds(sim.pid) - sim_cpu) / elapsed
            rates = stats_rates(before, after, elapsed)
            result["report_rate"] = rates["reports_ok"]
            result["changes_rate"] = rates["reports_changed"]
            result["entries_rate"] = rates["view_entries_received"]
            result["entries_per_report"] = (rates["view_entries_received"] / rates["reports_ok"]
                                            if rates["reports_ok"] else None)
            result["gcs_us_per_report"] = (result["gcs_cpu"] * 1e6 / rates["reports_ok"]
                                           if rates["reports_ok"] else None)
            result["leases_rate"] = rates["leases_granted"]
            result["sim_tasks_rate"] = rates["tasks_run"]
            if driver is not None:
                out, err = driver.communicate(timeout=600)
                metrics = {m["metric"]: m["value"] for m in json_lines(out) if "metric" in m}
                result["driver_tasks_rate"] = metrics.get("sim_tasks_per_second")
                result["driver_tasks_failed"] = metrics.get("sim_tasks_failed")
                if driver.returncode != 0:
                    result["broke"] = (err.strip().splitlines() or
                                       ["exit %d" % driver.returncode])[-1][:200]
            result["gcs_rss"] = rss_mib(head.gcs_pid)
            result["gcs_kib_per_node"] = per_entity_kib(result["gcs_rss"], head.gcs_idle_rss, n)
            result["raylet_cpu"] = cpu_share(head.raylet_pid, 3)
            result["status_s"] = statistics.median(head.status_seconds() for _ in range(3))
            result["latency_ms"] = head.bench("latency", 50)["task_latency_median"]
            result["death_s"] = ask("kill")["value"]
            result["reports"] = ask("stats")
            result["load_end"] = load()
            return result  # the simulator is SIGKILLed below: its nodes die with the head
        finally:
            if driver is not None and driver.poll() is None:
                driver.kill()
            if sim.poll() is None:
                sim.kill()


# (label, key, unit, higher_better, format) of the many_nodes rows; churn_only rows are left
# out of the best case (no tasks, no changes).
MANY_NODES_ROWS = [
    ("all nodes registered", "register_s", "s", False, "%.2f", False),
    ("GCS CPU (share of one core)", "gcs_cpu", "cores", False, "%.3f", False),
    ("resource reports answered (goal 2N)", "report_rate", "per_second", True, "%.0f", False),
    ("GCS CPU per report (all work / reports)", "gcs_us_per_report", "us", False, "%.0f", False),
    ("resource changes the GCS applied", "changes_rate", "per_second", True, "%.0f", False),
    ("view entries the GCS handed to the nodes", "entries_rate", "per_second", True, "%.0f",
     False),
    ("  per report (the reply's delta)", "entries_per_report", "entries", False, "%.1f", False),
    ("simulator CPU (same window)", "sim_cpu", "cores", False, "%.3f", False),
    ("tasks run on simulated nodes (driver)", "driver_tasks_rate", "per_second", True, "%.0f",
     True),
    ("tasks answered by simulated nodes", "sim_tasks_rate", "per_second", True, "%.0f", True),
    ("leases granted by simulated nodes", "leases_rate", "per_second", True, "%.0f", True),
    ("tasks that failed", "driver_tasks_failed", "tasks", False, "%.0f", True),
    ("GCS RSS idle", "gcs_idle_rss", "MiB", False, "%.1f", False),
    ("GCS RSS", "gcs_rss", "MiB", False, "%.1f", False),
    ("GCS growth per node", "gcs_kib_per_node", "KiB", False, "%.1f", False),
    ("head raylet CPU", "raylet_cpu", "cores", False, "%.3f", False),
    ("node death published to a subscriber", "death_s", "s", False, "%.2f", False),
    ("task latency on the head (median of 50)", "latency_ms", "ms", False, "%.2f", False),
    ("`troupe status` wall time", "status_s", "s", False, "%.3f", False)]


def troupe_run(args, mode, n, on_event=None, sample_pid=None):
    """One driver run on a fresh head: its metrics, the GCS idle and peak RSS, the peak RSS (and
    anonymous part) of sample_pid(head) while it ran (as "sampled_peak_rss"/"_anon"), and the
    load average."""
    with TroupeHead(args) as head:
        gcs = PeakRss(head.gcs_pid)
        sampled = PeakRss(sample_pid(head)) if sample_pid else None
        result = head.bench(mode, n, lambda item: on_event(head, item) if on_event else {})
        result["gcs_peak_rss"] = gcs.stop()
        result["gcs_idle_rss"] = head.gcs_idle_rss
        time.sleep(SETTLE_S)  # the driver has exited: its job, actors and connections are gone
        result["gcs_rss_after"] = rss_mib(head.gcs_pid)
        result["gcs_anon_after"] = anon_mib(head.gcs_pid)
        result["gcs_idle_anon"] = head.gcs_idle_anon
        if sampled:
            result["sampled_peak_rss"] = sampled.stop()
            result["sampled_peak_anon"] = sampled.peak_anon
        result.setdefault("load", load())
        return result


def phase_cpu(head, item):
    """Between the driver's "begin" and "end" events of a phase: GCS and raylet CPU time per
    operation, in microseconds ("gcs_us_per_<phase>"; includes the work the operation caused
    after its reply, e.g. bundle returns, and the daemons' idle ticks over the phase)."""
    daemons = (("gcs", head.gcs_pid), ("raylet", head.raylet_pid))
    if item.get("event") == "begin":
        head.cpu_before = {name: cpu_seconds(pid) for name, pid in daemons}
    elif item.get("event") == "end":
        return {"%s_us_per_%s" % (name, item["phase"]):
                (cpu_seconds(pid) - head.cpu_before[name]) * 1e6 / item["n"]
                for name, pid in daemons}
    return {}


def actor_processes(head, item):
    """At the driver's "actors_alive" event: RSS, PSS and anonymous memory per actor process,
    GCS RSS at once and SETTLE_S later (the driver holds its actors 6 s by default), with its
    anonymous part."""
    if item.get("event") != "actors_alive":
        return {}
    workers = children(head.raylet_pid)
    count = max(1, len(workers))
    result = {"actor_processes": len(workers),
              "rss_per_actor": sum(rss_mib(p) for p in workers) / count,
              "pss_per_actor": sum(pss_mib(p) for p in workers) / count,
              "anon_per_actor": sum(anon_mib(p) for p in workers) / count,
              "gcs_rss": rss_mib(head.gcs_pid), "load": load()}
    time.sleep(SETTLE_S)
    result["gcs_rss_settled"] = rss_mib(head.gcs_pid)
    result["gcs_anon_settled"] = anon_mib(head.gcs_pid)
    return result


# ---------------------------------------------------------------------------------------- Ray

RAY_SCRIPT = r"""
import json, os, sys, time, threading
import ray
mode, n, settle = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
def parent_of(pid):
    with open("/proc/%d/stat" % pid) as f: return int(f.read().rsplit(")", 1)[1].split()[1])
def descendants(root):
    kids = {}
    for e in os.listdir("/proc"):
        if e.isdigit():
            try: kids.setdefault(parent_of(int(e)), []).append(int(e))
            except (OSError, ValueError, IndexError): pass
    out, todo = [], [root]
    while todo:
        for k in kids.get(todo.pop(), []): out.append(k); todo.append(k)
    return out
def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f: return f.read().strip()
    except OSError: return ""
def mem(pid, key="VmRSS:", path="status"):
    try:
        with open("/proc/%d/%s" % (pid, path)) as f:
            for line in f:
                if line.startswith(key): return int(line.split()[1]) / 1024.0
    except OSError: pass
    return 0.0
def find(prefix):
    for p in descendants(os.getpid()):
        if comm(p).startswith(prefix): return p
out = {"load": os.getloadavg()[0]}
time.sleep(settle)
gcs = find("gcs_server")
out["gcs_idle_rss"] = mem(gcs)
out["gcs_idle_anon"] = mem(gcs, "Anonymous:", "smaps_rollup")
if mode == "many_tasks":
    @ray.remote(num_cpus=1)
    def small(): return 1
    ray.get(small.remote())
    peak = [0, 0]; stop = threading.Event(); r = find("raylet")
    def sample():
        while not stop.wait(0.2):
            peak[0] = max(peak[0], mem(r))
            peak[1] = max(peak[1], mem(r, "Anonymous:", "smaps_rollup"))
    t = threading.Thread(target=sample, daemon=True); t.start()
    start = time.monotonic()
    refs = [small.remote() for _ in range(n)]
    out["tasks_submitted_per_second"] = n / (time.monotonic() - start)
    done, _ = ray.wait(refs, num_returns=n, timeout=0)
    out["tasks_queued_at_end_of_submission"] = n - len(done)
    ray.get(refs)
    out["tasks_completed_per_second"] = n / (time.monotonic() - start)
    stop.set(); t.join()
    out["driver_peak_rss"] = mem(os.getpid(), "VmHWM:")
    out["raylet_peak_rss"] = peak[0]
    out["raylet_peak_anon"] = peak[1]
elif mode == "many_actors":
    @ray.remote(num_cpus=0)
    class Tiny:
        def ping(self): return 1
    start = time.monotonic()
    actors = [Tiny.remote() for _ in range(n)]
    ray.get([a.ping.remote() for a in actors])
    out["actors_created_per_second"] = n / (time.monotonic() - start)
    workers = [p for p in descendants(os.getpid()) if comm(p).startswith("ray::Tiny")]
    out["actor_processes"] = len(workers)
    per_actor = lambda *field: sum(mem(p, *field) for p in workers) / max(1, len(workers))
    out["rss_per_actor"] = per_actor()
    out["pss_per_actor"] = per_actor("Pss:", "smaps_rollup")
    out["anon_per_actor"] = per_actor("Anonymous:", "smaps_rollup")
    out["gcs_rss"] = mem(gcs)
    time.sleep(settle)
    out["gcs_rss_settled"] = mem(gcs)
    out["gcs_anon_settled"] = mem(gcs, "Anonymous:", "smaps_rollup")
elif mode == "many_pgs":
    from ray.util.placement_group import placement_group, remove_placement_group
    start = time.monotonic()
    pgs = [placement_group([{"CPU": 0.001}]) for _ in range(n)]
    # pg.wait (a GCS call), as Ray's own benchmark (ray_perf.py) and Troupe's side wait;
    # pg.ready() would run a task in every group.
    if not all(pg.wait(timeout_seconds=300) for pg in pgs):
        raise SystemExit("placement groups not created within 300 s")
    out["pgs_created_per_second"] = n / (time.monotonic() - start)
    start = time.monotonic()
    for pg in pgs: pg.wait(1)
    out["pg_round_trips_per_second"] = n / (time.monotonic() - start)
    start = time.monotonic()
    for pg in pgs: remove_placement_group(pg)
    out["pgs_removed_per_second"] = n / (time.monotonic() - start)
    out["gcs_peak_rss"] = mem(find("gcs_server"), "VmHWM:")
print(json.dumps(out))
ray.shutdown()
"""


def ray_run(args, mode, n):
    temp = tempfile.mkdtemp(prefix="ray-scale-")
    env = dict(os.environ, RAY_TMPDIR=temp)
    try:
        out = subprocess.run([args.ray_python, "-c", RAY_SCRIPT, mode, str(n), str(SETTLE_S)],
                             env=env,
                             capture_output=True, text=True, timeout=900)
        lines = json_lines(out.stdout)
        if not lines:
            return {"broke": (out.stderr.strip().splitlines() or ["exit %d" % out.returncode])[-1][:200]}
        return lines[-1]
    except subprocess.TimeoutExpired:
        return {"broke": "timed out after 900 s"}
    finally:
        shutil.rmtree(temp, ignore_errors=True)


# -------------------------------------------------------------------------------------- Table

# Every figure printed, for --json: one object per metric and side.
RECORDS = []
N_IN_NAME = ("many_nodes", "many_tasks", "many_actors")  # workloads run at more than one N
ROUND = [0]  # the comparison round being recorded (many_tasks, many_actors, many_pgs)


def record(workload, case, side, n, metric, value, unit, load_average, higher_better=True):
    if isinstance(value, (int, float)):
        RECORDS.append({"benchmark": "scale_bench", "workload": workload, "case": case,
                        "side": side, "n": n, "round": ROUND[0],
                        "name": ".".join(part for part in (workload, case, metric) if part),
                        "value": value, "unit": unit, "load": load_average,
                        "higher_is_better": higher_better})


def results_rows(records):
    """The results-file rows (bench_common.summary_row) from RECORDS: one per workload, case and
    metric, Troupe's figures and Ray's (Python API) where it ran, one per round (each side's
    median, and the median per-round ratio with its range). Where the sides ran at different N
    the note says so."""
    rows, order = {}, []
    for r in records:
        # Troupe also runs at Ray's N where its own N differs: those figures are compared.
        key = r["name"] + ".N=%d" % r["n"] if r["workload"] in N_IN_NAME else r["name"]
        if key not in rows:
            rows[key] = {"unit": r["unit"], "higher": r["higher_is_better"], "sides": {}}
            order.append(key)
        values, _ = rows[key]["sides"].setdefault(r["side"], ([], r["n"]))
        values.append(r["value"])
    out = []
    for key in order:
        sides = rows[key]["sides"]
        troupe = sides.get("troupe", ([None], None))
        peers, note = {}, ""
        if "ray" in sides:
            if sides["ray"][1] != troupe[1]:
                # Unlike work: both figures are in raw, and no ratio is made of them.
                note = "Troupe at N=%s, Ray at N=%s: not compared" % (troupe[1], sides["ray"][1])
            elif rows[key]["unit"] in ("", "tasks"):
                note = "a count, not compared"  # e.g. actor processes seen: a check of the run
            else:
                peers["ray_python"] = sides["ray"][0]
        elif key.startswith("many_nodes"):
            note = "Ray has no simulated nodes"
        row = summary_row(key, rows[key]["unit"], troupe[0], peers,
                          higher_is_better=rows[key]["higher"], note=note)
        if "ray" in sides and not peers:
            row["peers"]["ray_python"] = statistics.median(sides["ray"][0])  # shown only
        out.append(row)
    return out


def fmt(value, spec="%.1f"):
    return "n/a" if value is None else (spec % value if isinstance(value, (int, float)) else str(value))


def row(name, troupe, ray, unit, higher_better=True, spec="%.1f"):
    ratio = ""
    if isinstance(troupe, (int, float)) and isinstance(ray, (int, float)) and troupe and ray:
        ratio = "%.2fx" % ((troupe / ray) if higher_better else (ray / troupe))
    print("  %-40s %12s %12s %8s  %s" % (name, fmt(troupe, spec), fmt(ray, spec), ratio, unit))


def compare(workload, n, ray_n, troupe, ray, rows):
    """Prints one workload's Troupe and Ray figures side by side (and records them for --json);
    rows: (label, key, unit, higher_better, format)."""
    for label, key, unit, higher_better, _ in rows:
        record(workload, "", "troupe", n, key, troupe.get(key), unit, troupe.get("load"),
               higher_better)
        if n == ray_n:  # once per round: Troupe's run at Ray's N is the one compared
            record(workload, "", "ray", ray_n, key, ray.get(key), unit, ray.get("load"),
                   higher_better)
    ray_part = ("Ray N=%d (load %s)" % (ray_n, fmt(ray.get("load"), "%.2f"))
                if ray.get("load") is not None else "Ray not run")
    if n != ray_n:
        ray, ray_part = {}, "Ray at N=%d only (above)" % ray_n
    print("%s Troupe N=%d (load %s), %s" % (workload, n, fmt(troupe.get("load"), "%.2f"), ray_part),
          flush=True)
    for label, key, unit, higher_better, spec in rows:
        row(label, troupe.get(key), ray.get(key), unit, higher_better, spec)
    for side, result in (("Troupe", troupe), ("Ray", ray)):
        if "broke" in result:
            print("  %s broke: %s" % (side, result["broke"]))


def troupe_ns(ns, ray, ray_n):
    """Troupe's N for a workload: its own, and Ray's first where Ray runs at another N."""
    return ([ray_n] if ray and ray_n not in ns else []) + ns


def many_tasks(args, ray):
    runs = []
    for n in troupe_ns([args.tasks], ray, args.ray_tasks):
        t = troupe_run(args, "many_tasks", n, sample_pid=lambda head: head.raylet_pid)
        t["raylet_peak_rss"] = t.get("sampled_peak_rss")
        t["raylet_peak_anon"] = t.get("sampled_peak_anon")
        runs.append((n, t))
    r = ray_run(args, "many_tasks", args.ray_tasks) if ray else {}
    for n, t in runs:
        compare("many_tasks", n, args.ray_tasks, t, r, [
            ("tasks submitted", "tasks_submitted_per_second", "/s", True, "%.0f"),
            ("tasks completed", "tasks_completed_per_second", "/s", True, "%.0f"),
            ("queued when the last was submitted", "tasks_queued_at_end_of_submission", "tasks",
             True, "%.0f"),
            ("driver peak RSS", "driver_peak_rss", "MiB", False, "%.1f"),
            ("raylet peak RSS", "raylet_peak_rss", "MiB", False, "%.1f"),
            ("raylet peak anonymous (own memory)", "raylet_peak_anon", "MiB", False, "%.1f")])


def many_actors(args, ray):
    runs = []
    for n in troupe_ns([int(x) for x in args.actors.split(",") if x], ray, args.ray_actors):
        t = troupe_run(args, "many_actors", n, on_event=actor_processes)
        t["gcs_kib_per_actor"] = per_entity_kib(t.get("gcs_rss"), t.get("gcs_idle_rss"), n)
        t["gcs_after"] = "%.1f / %.1f" % (t["gcs_rss_after"], t["gcs_anon_after"])
        runs.append((n, t))
    r = ray_run(args, "many_actors", args.ray_actors) if ray else {}
    r["gcs_kib_per_actor"] = per_entity_kib(r.get("gcs_rss"), r.get("gcs_idle_rss"),
                                            args.ray_actors)
    for n, t in runs:
        compare("many_actors", n, args.ray_actors, t, r, [
            ("actors created", "actors_created_per_second", "/s", True, "%.1f"),
            ("RSS per actor process", "rss_per_actor", "MiB", False, "%.1f"),
            ("PSS per actor process", "pss_per_actor", "MiB", False, "%.1f"),
            ("anonymous per actor process", "anon_per_actor", "MiB", False, "%.1f"),
            ("actor processes seen", "actor_processes", "", True, "%d"),
            ("GCS RSS idle", "gcs_idle_rss", "MiB", False, "%.1f"),
            ("GCS anonymous idle", "gcs_idle_anon", "MiB", False, "%.1f"),
            ("GCS RSS (actors alive)", "gcs_rss", "MiB", False, "%.1f"),
            ("GCS RSS (alive, %.0f s later)" % SETTLE_S, "gcs_rss_settled", "MiB", False,
             "%.1f"),
            ("GCS anonymous (alive, settled)", "gcs_anon_settled", "MiB", False, "%.1f"),
            ("GCS growth per actor", "gcs_kib_per_actor", "KiB", False, "%.1f"),
            ("GCS RSS / anonymous after the driver",
             "gcs_after", "MiB", False, "%s")])


def many_pgs(args, ray):
    t = troupe_run(args, "many_pgs", args.pgs, on_event=phase_cpu)
    r = ray_run(args, "many_pgs", args.ray_pgs) if ray else {}
    for side, n in ((t, args.pgs), (r, args.ray_pgs)):
        side["gcs_kib_per_pg"] = per_entity_kib(side.get("gcs_peak_rss"),
                                                side.get("gcs_idle_rss"), n)
    compare("many_pgs", args.pgs, args.ray_pgs, t, r, [
        ("PGs created", "pgs_created_per_second", "/s", True, "%.1f"),
        ("round trips (Wait on a created PG)", "pg_round_trips_per_second", "/s", True,
         "%.1f"),
        ("GCS CPU per round trip", "gcs_us_per_round_trip", "us", False, "%.0f"),
        ("PGs removed", "pgs_removed_per_second", "/s", True, "%.1f"),
        ("GCS CPU per removal (with its returns)", "gcs_us_per_removal", "us", False,
         "%.0f"),
        ("raylet CPU per removal (the returns)", "raylet_us_per_removal", "us", False, "%.0f"),
        ("GCS RSS idle", "gcs_idle_rss", "MiB", False, "%.1f"),
        ("GCS anonymous idle", "gcs_idle_anon", "MiB", False, "%.1f"),
        ("GCS peak RSS", "gcs_peak_rss", "MiB", False, "%.1f"),
        ("GCS growth per PG (peak - idle)", "gcs_kib_per_pg", "KiB", False, "%.1f")])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--troupe", default="bazel-bin/src/cli/troupe")
    parser.add_argument("--simulator", default="bazel-bin/src/raylet/troupe_simulated_nodes")
    parser.add_argument("--bench", default="bazel-bin/bench/scale_bench")
    parser.add_argument("--ray-python",
                        default=os.path.expanduser("~/.cache/troupe-bench-venv/bin/python"))
    parser.add_argument("--nodes", default="250,1000")
    parser.add_argument("--node-cases", default="churn,best",
                        help="many_nodes cases: churn (resources change every report, tasks "
                        "run on the nodes) and/or best (resources unchanged)")
    parser.add_argument("--sim-slots", type=int, default=8,
                        help="churn: each simulated node's amount of the 'sim' resource")
    parser.add_argument("--task-ms", type=int, default=10,
                        help="churn: how long a simulated node's pretend worker takes per task")
    parser.add_argument("--json", help="also write the results file (bench/bench_common.py's "
                        "format; every figure as recorded in its 'raw')")
    parser.add_argument("--tasks", type=int, default=100000)
    parser.add_argument("--actors", default="200")
    parser.add_argument("--pgs", type=int, default=1000)
    parser.add_argument("--ray-tasks", type=int, default=10000)
    parser.add_argument("--ray-actors", type=int, default=50)
    parser.add_argument("--ray-pgs", type=int, default=1000)
    parser.add_argument("--report-threads", type=int, default=16,
                        help="the simulator's reporting threads (blocking calls)")
    parser.add_argument("--window", type=float, default=10, help="GCS CPU sampling window, s")
    parser.add_argument("--settle", type=float, default=5, help="wait after the nodes joined, s")
    parser.add_argument("--only", default="many_nodes,many_tasks,many_actors,many_pgs")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--rounds", type=int,
                        help="rounds of the comparisons with Ray (many_tasks, many_actors, "
                        "many_pgs), Troupe then Ray in each (--quick: 1)")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes for a check that everything runs (250 nodes, churn "
                        "only, 10,000 tasks, 50 actors, 200 PGs; Ray 2,000 / 20 / 200)")
    args = parser.parse_args()
    if args.quick:
        args.nodes, args.node_cases, args.tasks, args.actors, args.pgs = "250", "churn", 10000, \
            "50", 200
        args.ray_tasks, args.ray_actors, args.ray_pgs, args.window, args.settle = 2000, 20, \
            200, 5, 2
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    started, load_before = time.time(), os.getloadavg()[0]
    only = args.only.split(",")
    ray = not args.no_ray and os.path.exists(args.ray_python)

    if "many_nodes" in only:
        cases = [c for c in args.node_cases.split(",") if c]
        for n in [int(x) for x in args.nodes.split(",") if x]:
            for case in cases:
                churn = case == "churn"
                r = troupe_many_nodes(args, n, churn)
                what = ("churn: resources change every report, tasks run on the nodes" if churn
                        else "best case: resources unchanged, no tasks")
                print("many_nodes N=%d, %s (load %.2f -> %.2f; Ray: n/a, it has no simulated "
                      "nodes)" % (n, what, r["load"], r["load_end"]), flush=True)
                for label, key, unit, higher_better, spec, churn_only in MANY_NODES_ROWS:
                    if churn_only and not churn:
                        continue
                    row(label, r.get(key), None, unit, higher_better, spec)
                    record("many_nodes", case, "troupe", n, key, r.get(key), unit, r["load"],
                           higher_better)
                print("  (simulator: %(reports_ok)d reports answered, %(reports_failed)d failed, "
                      "%(reports_changed)d changed)" % r["reports"], flush=True)
                if "broke" in r:
                    print("  Troupe broke: %s" % r["broke"], flush=True)
    # The comparisons: --rounds rounds, Troupe then Ray in each (A B A B ...). Troupe also runs
    # at Ray's N where its own differs, so that like is compared with like.
    for ROUND[0] in range(args.rounds):
        if args.rounds > 1:
            print("round %d/%d" % (ROUND[0] + 1, args.rounds), flush=True)
        if "many_tasks" in only:
            many_tasks(args, ray)
        if "many_actors" in only:
            many_actors(args, ray)
        if "many_pgs" in only:
            many_pgs(args, ray)
    if args.json:
        write_results(args.json, "scale_bench", results_rows(RECORDS), started, load_before,
                      args.rounds,
                      quick=args.quick, raw={"records": RECORDS, "args": vars(args)})


if __name__ == "__main__":
    sys.exit(main())
