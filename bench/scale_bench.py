"""The scale envelope (issue 18), Troupe and Ray side by side on this machine.

  many_nodes   N simulated nodes (bazel-bin/src/raylet/troupe_simulated_nodes) joined to one
               Troupe head: GCS CPU share (from /proc/<pid>/stat over a window) and RSS, time
               until a node's death reaches a subscriber, a task's scheduling latency under that
               load, `troupe status` wall time. Ray has no simulated-node mode: "n/a".
  many_tasks   N tiny 1-CPU tasks submitted at once on a 2-CPU head: submission and completion
               rates, driver peak RSS and raylet peak RSS.
  many_actors  N actors (holding no resources) alive at once: creation rate, RSS per actor
               process, GCS RSS. Raise N with --actors until something breaks.
  many_pgs     N placement groups of one small bundle created, then removed: rates, GCS RSS.

Every figure comes with the 1-minute load average when it was taken (the machine may be shared).
Build first (optimised):
  bazel build -c opt //src/cli:troupe //src/raylet:troupe_simulated_nodes //bench:scale_bench
Ray comes from ~/.cache/troupe-bench-venv (bash bench/setup_peers.sh).
Usage:
  python3 bench/scale_bench.py [--nodes 500,1000] [--tasks 100000] [--actors 200]
      [--pgs 1000] [--ray-tasks 10000] [--ray-actors 50] [--ray-pgs 1000] [--only many_nodes,...]
      [--no-ray]
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

CLK_TCK = os.sysconf("SC_CLK_TCK")


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


def pss_mib(pid):
    """Proportional set size: shared pages (libraries) split among the processes mapping them."""
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


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
    """Samples the RSS of `pid` every 0.2 s on a thread until stop()."""

    def __init__(self, pid):
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, rss_mib(self.pid))

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self.peak


def json_lines(text):
    return [json.loads(l) for l in text.splitlines() if l.strip().startswith("{")]


# ------------------------------------------------------------------------------------- Troupe

class TroupeHead:
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

    @staticmethod
    def _pid(session, name):
        with open(os.path.join(session, "pids", name + ".pid")) as f:
            return int(f.read().split()[0])

    def bench(self, mode, n, timeout=1800):
        out = subprocess.run([self.args.bench, "--mode=" + mode, "--n=%d" % n], env=self.env,
                             capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError("scale_bench %s failed: %s" % (mode, out.stderr[-2000:]))
        return {l["metric"]: l["value"] for l in json_lines(out.stdout) if "metric" in l}

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


def troupe_many_nodes(args, n):
    head = TroupeHead(args)
    sim = subprocess.Popen([args.simulator, "--nodes=%d" % n, "--resources=sim:1", "--commands",
                            "--report-threads=%d" % args.report_threads],
                           env=head.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        ready = json.loads(sim.stdout.readline())
        time.sleep(args.settle)
        result = {"register_s": ready["register_seconds"], "load": load()}

        def reports_ok():
            sim.stdin.write("stats\n")
            sim.stdin.flush()
            return json.loads(sim.stdout.readline())["reports_ok"]
        before, start = reports_ok(), time.monotonic()
        result["gcs_cpu"] = cpu_share(head.gcs_pid, args.window)
        result["report_rate"] = (reports_ok() - before) / (time.monotonic() - start)
        result["gcs_rss"] = rss_mib(head.gcs_pid)
        result["raylet_cpu"] = cpu_share(head.raylet_pid, 3)
        result["status_s"] = statistics.median(head.status_seconds() for _ in range(3))
        lat = head.bench("latency", 50)
        result["latency_ms"] = lat["task_latency_median"]
        sim.stdin.write("kill\n")
        sim.stdin.flush()
        result["death_s"] = json.loads(sim.stdout.readline())["value"]
        sim.stdin.write("stats\n")
        sim.stdin.flush()
        result["reports"] = json.loads(sim.stdout.readline())
        result["load_end"] = load()
        return result  # the simulator is SIGKILLed below: its nodes die with the head
    finally:
        if sim.poll() is None:
            sim.kill()
        head.stop()


def troupe_many_tasks(args, n):
    head = TroupeHead(args)
    try:
        raylet = PeakRss(head.raylet_pid)
        result = head.bench("many_tasks", n)
        result["raylet_peak_rss"] = raylet.stop()
        result["load"] = load()
        return result
    finally:
        head.stop()


def troupe_many_actors(args, n):
    head = TroupeHead(args)
    try:
        gcs = PeakRss(head.gcs_pid)
        proc = subprocess.Popen([args.bench, "--mode=many_actors", "--n=%d" % n], env=head.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        result = {}
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            item = json.loads(line)
            if "metric" in item:
                result[item["metric"]] = item["value"]
            if item.get("event") == "actors_alive":
                workers = children(head.raylet_pid)
                rss = [rss_mib(p) for p in workers]
                result["actor_processes"] = len(workers)
                result["rss_per_actor"] = sum(rss) / max(1, len(rss))
                result["pss_per_actor"] = sum(pss_mib(p) for p in workers) / max(1, len(workers))
                result["gcs_rss"] = rss_mib(head.gcs_pid)
                result["load"] = load()
        err = proc.stderr.read()
        if proc.wait() != 0:
            result["broke"] = err.strip().splitlines()[-1][:200] if err.strip() else "exit %d" % proc.returncode
        result["gcs_peak_rss"] = gcs.stop()
        return result
    finally:
        head.stop()


def troupe_many_pgs(args, n):
    head = TroupeHead(args)
    try:
        gcs = PeakRss(head.gcs_pid)
        result = head.bench("many_pgs", n)
        result["gcs_peak_rss"] = gcs.stop()
        result["load"] = load()
        return result
    finally:
        head.stop()


# ---------------------------------------------------------------------------------------- Ray

RAY_SCRIPT = r"""
import json, os, sys, time, threading
import ray
mode, n = sys.argv[1], int(sys.argv[2])
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
if mode == "many_tasks":
    @ray.remote(num_cpus=1)
    def small(): return 1
    ray.get(small.remote())
    peak = [0]; stop = threading.Event(); r = find("raylet")
    def sample():
        while not stop.wait(0.2): peak[0] = max(peak[0], mem(r))
    t = threading.Thread(target=sample, daemon=True); t.start()
    start = time.monotonic()
    refs = [small.remote() for _ in range(n)]
    out["tasks_submitted_per_second"] = n / (time.monotonic() - start)
    ray.get(refs)
    out["tasks_completed_per_second"] = n / (time.monotonic() - start)
    stop.set(); t.join()
    out["driver_peak_rss"] = mem(os.getpid(), "VmHWM:")
    out["raylet_peak_rss"] = peak[0]
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
    out["rss_per_actor"] = sum(mem(p) for p in workers) / max(1, len(workers))
    out["pss_per_actor"] = sum(mem(p, "Pss:", "smaps_rollup") for p in workers) / max(1, len(workers))
    out["gcs_rss"] = mem(find("gcs_server"))
elif mode == "many_pgs":
    from ray.util.placement_group import placement_group, remove_placement_group
    start = time.monotonic()
    pgs = [placement_group([{"CPU": 0.001}]) for _ in range(n)]
    ray.get([pg.ready() for pg in pgs])
    out["pgs_created_per_second"] = n / (time.monotonic() - start)
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
        out = subprocess.run([args.ray_python, "-c", RAY_SCRIPT, mode, str(n)], env=env,
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

def fmt(value, spec="%.1f"):
    return "n/a" if value is None else (spec % value if isinstance(value, (int, float)) else str(value))


def row(name, troupe, ray, unit, higher_better=True, spec="%.1f"):
    ratio = ""
    if isinstance(troupe, (int, float)) and isinstance(ray, (int, float)) and troupe and ray:
        ratio = "%.2fx" % ((troupe / ray) if higher_better else (ray / troupe))
    print("  %-40s %12s %12s %8s  %s" % (name, fmt(troupe, spec), fmt(ray, spec), ratio, unit))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--troupe", default="bazel-bin/src/cli/troupe")
    parser.add_argument("--simulator", default="bazel-bin/src/raylet/troupe_simulated_nodes")
    parser.add_argument("--bench", default="bazel-bin/bench/scale_bench")
    parser.add_argument("--ray-python",
                        default=os.path.expanduser("~/.cache/troupe-bench-venv/bin/python"))
    parser.add_argument("--nodes", default="500,1000")
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
    args = parser.parse_args()
    only = args.only.split(",")
    ray = not args.no_ray and os.path.exists(args.ray_python)

    if "many_nodes" in only:
        for n in [int(x) for x in args.nodes.split(",") if x]:
            r = troupe_many_nodes(args, n)
            print("many_nodes N=%d (load %.2f -> %.2f; Ray: n/a, it has no simulated nodes)"
                  % (n, r["load"], r["load_end"]), flush=True)
            row("all nodes registered", r["register_s"], None, "s", False, "%.2f")
            row("GCS CPU (share of one core)", r["gcs_cpu"], None, "cores", False, "%.3f")
            row("resource reports answered (goal 2N)", r["report_rate"], None, "/s", True, "%.0f")
            row("GCS RSS", r["gcs_rss"], None, "MiB", False)
            row("head raylet CPU", r["raylet_cpu"], None, "cores", False, "%.3f")
            row("node death published to a subscriber", r["death_s"], None, "s", False, "%.2f")
            row("task latency (median of 50)", r["latency_ms"], None, "ms", False, "%.2f")
            row("`troupe status` wall time", r["status_s"], None, "s", False, "%.3f")
            print("  (simulator: %(reports_ok)d reports answered, %(reports_failed)d failed)"
                  % r["reports"], flush=True)
    if "many_tasks" in only:
        t = troupe_many_tasks(args, args.tasks)
        r = ray_run(args, "many_tasks", args.ray_tasks) if ray else {}
        print("many_tasks Troupe N=%d (load %.2f), Ray N=%d (load %s)"
              % (args.tasks, t["load"], args.ray_tasks, fmt(r.get("load"), "%.2f")), flush=True)
        row("tasks submitted", t["tasks_submitted_per_second"],
            r.get("tasks_submitted_per_second"), "/s", True, "%.0f")
        row("tasks completed", t["tasks_completed_per_second"],
            r.get("tasks_completed_per_second"), "/s", True, "%.0f")
        row("driver peak RSS", t["driver_peak_rss"], r.get("driver_peak_rss"), "MiB", False)
        row("raylet peak RSS", t["raylet_peak_rss"], r.get("raylet_peak_rss"), "MiB", False)
        if "broke" in r:
            print("  Ray broke: " + r["broke"])
    if "many_actors" in only:
        r = ray_run(args, "many_actors", args.ray_actors) if ray else {}
        for n in [int(x) for x in args.actors.split(",") if x]:
            t = troupe_many_actors(args, n)
            print("many_actors Troupe N=%d (load %s), Ray N=%d (load %s)"
                  % (n, fmt(t.get("load"), "%.2f"), args.ray_actors, fmt(r.get("load"), "%.2f")),
                  flush=True)
            row("actors created", t.get("actors_created_per_second"),
                r.get("actors_created_per_second"), "/s", True)
            row("RSS per actor process", t.get("rss_per_actor"), r.get("rss_per_actor"), "MiB",
                False)
            row("PSS per actor process", t.get("pss_per_actor"), r.get("pss_per_actor"), "MiB",
                False)
            row("actor processes seen", t.get("actor_processes"), r.get("actor_processes"), "",
                True, "%d")
            row("GCS RSS (actors alive)", t.get("gcs_rss"), r.get("gcs_rss"), "MiB", False)
            for side, res in (("Troupe", t), ("Ray", r)):
                if "broke" in res:
                    print("  %s broke: %s" % (side, res["broke"]))
    if "many_pgs" in only:
        t = troupe_many_pgs(args, args.pgs)
        r = ray_run(args, "many_pgs", args.ray_pgs) if ray else {}
        print("many_pgs Troupe N=%d (load %.2f), Ray N=%d (load %s)"
              % (args.pgs, t["load"], args.ray_pgs, fmt(r.get("load"), "%.2f")), flush=True)
        row("PGs created", t["pgs_created_per_second"], r.get("pgs_created_per_second"), "/s")
        row("PGs removed", t["pgs_removed_per_second"], r.get("pgs_removed_per_second"), "/s")
        row("GCS peak RSS", t["gcs_peak_rss"], r.get("gcs_peak_rss"), "MiB", False)
        if "broke" in r:
            print("  Ray broke: " + r["broke"])


if __name__ == "__main__":
    sys.exit(main())
