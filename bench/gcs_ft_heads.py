"""The heads bench/gcs_ft_bench.py measures, and what it drives them with: a private Redis per
head, a one-node Troupe head and a one-node Ray head started with their CLIs and defaults, their
HTTP jobs APIs, the recovery drivers (talked to over stdin/stdout), and the processes each head
owns (found, measured and stopped by process ID, never by name). Used from one thread, except
http_json and jobs_succeeded, which also run on gcs_ft_bench.py's jobs-list watcher thread."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid

from bench_common import json_lines, use_ray_token_auth

REDIS_SERVER = "/usr/bin/redis-server"
RAY_DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gcs_ft_ray_driver.py")


def run(cmd, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    """A private redis-server: free port, its own dir, AOF on (appendfsync everysec, the
    default), no RDB snapshots. stop() SIGKILLs it (only this pid) and removes the dir."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="gcs-ft-redis-")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--appendonly", "yes", "--save", "", "--logfile", os.path.join(self.dir, "redis.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start (see %s)" % self.dir)
            time.sleep(0.02)

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def process_table():
    """{pid: (ppid, session id, command line)} of every live process."""
    procs = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    cmdline = f.read().decode(errors="replace")
            except OSError:
                continue
            procs[int(entry)] = (int(fields[1]), int(fields[3]), cmdline)
    return procs


def pids_started_from(roots=(), marker=None):
    """Every live process in the sessions `roots` (session ids = pids of processes this program
    started under setsid), or whose command line holds `marker` (a temp dir of ours), and,
    transitively, their children (a daemon that made its own session is still its parent's
    child). Never this process."""
    procs = process_table()
    found = {pid for pid, (_, sid, cmdline) in procs.items()
             if sid in roots or pid in roots or (marker and marker in cmdline)}
    while True:
        more = {pid for pid, (ppid, _, _) in procs.items() if ppid in found} - found
        if not more:
            break
        found |= more
    found.discard(os.getpid())
    return found


def pss_gib(pids):
    """The proportional set size of `pids` together (shared pages divided among their users),
    in GiB: what they take of the machine's memory."""
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/smaps_rollup" % pid) as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return total / 2.0 ** 30


def kill_started(roots):
    """SIGKILLs what pids_started_from(roots) finds, until nothing is left (10 s at most)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pids = pids_started_from(roots)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.1)


def remove_temp(args, path):
    """Removes a stopped head's temp dir, or with --keep-temp says where it is."""
    if args.keep_temp:
        print("  kept %s" % path)
    else:
        shutil.rmtree(path, ignore_errors=True)


def http_json(head, method, path, body=None, timeout=30):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(head.http + path, data=data, method=method,
                                     headers=dict(head.headers,
                                                  **{"Content-Type": "application/json"}))
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def wait_http(head, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        try:
            http_json(head, "GET", "/api/version", timeout=5)
            return
        except (OSError, ValueError):
            if time.monotonic() > deadline:
                raise RuntimeError("%s: no HTTP API at %s within %d s" % (head.name, head.http,
                                                                           timeout))
            time.sleep(0.2)


def jobs_succeeded(head, ids, timeout=30):
    """How many of the submission `ids` the jobs list (GET /api/jobs/) shows SUCCEEDED; raises if
    the list is not served. A job that ended otherwise is an error."""
    wanted = set(ids)
    count = 0
    for job in http_json(head, "GET", "/api/jobs/", timeout=timeout):
        if job.get("submission_id") in wanted:
            if job.get("status") == "SUCCEEDED":
                count += 1
            elif job.get("status") in ("FAILED", "STOPPED"):
                raise RuntimeError("%s: job %s ended %s: %s" % (
                    head.name, job["submission_id"], job["status"], job.get("message")))
    return count


def submit_jobs(head, ids, batch=10):
    """Submits a job (`echo done`) per submission id through the head's jobs API, `batch` at a
    time, each batch waited for until every job of it SUCCEEDED (a job supervisor is a process
    on both sides: batches keep their number, and the memory they take, bounded)."""
    for first in range(0, len(ids), batch):
        chunk = ids[first:first + batch]
        for sid in chunk:
            http_json(head, "POST", "/api/jobs/", {"entrypoint": "echo done", "submission_id": sid})
        deadline = time.monotonic() + 300
        while jobs_succeeded(head, chunk) < len(chunk):
            if time.monotonic() > deadline:
                raise RuntimeError("%s: jobs %s not done within 300 s" % (head.name, chunk))
            time.sleep(0.1)


# Ray's processes (raylet, workers, drivers) exit once the GCS has been away this long; 300 s,
# as Troupe's driver waits (its gcs_reconnect_timeout_s), so that a slow recovery is measured
# rather than ended.
RAY_ENV = {"RAY_gcs_rpc_server_reconnect_timeout_s": "300", "RAY_USAGE_STATS_ENABLED": "0"}


class RayHead:
    """A one-node Ray head as `ray start --head` makes it with its defaults (the dashboard and its
    jobs API on, CPUs detected, token authentication on: bench_common.use_ray_token_auth), on
    127.0.0.1, in its own temp dir, GCS FT on `redis` if given. Its fixed default ports (GCS
    6379, dashboard 8265, client server 10001, dashboard agent 52365) are replaced by free ones
    so that another cluster on the machine cannot collide with it. `ray start` runs under setsid: stop() SIGKILLs that
    session's processes, their children and the GCS processes the driver relaunched (note_gcs)."""
    name = "ray"

    def __init__(self, args, redis):
        self.args = args
        self.temp_dir = tempfile.mkdtemp(prefix="rayft-")
        self.env = dict(os.environ, **RAY_ENV)
        use_ray_token_auth(self.env)  # one mode for every Ray process (bench_common.py)
        if redis:
            self.env["RAY_REDIS_ADDRESS"] = redis.address
            self.env["RAY_external_storage_namespace"] = uuid.uuid4().hex
        self.roots = set()
        self.kills = []  # when each GCS kill was sent
        self.gcs_port = free_port()
        dashboard_port = free_port()
        self.http = "http://127.0.0.1:%d" % dashboard_port
        # What JobSubmissionClient sends with token authentication on.
        self.headers = {"Authorization": "Bearer " + self.env["RAY_AUTH_TOKEN"]}
        start = subprocess.Popen(
            [args.ray, "start", "--head", "--node-ip-address=127.0.0.1",
             "--port=%d" % self.gcs_port, "--dashboard-port=%d" % dashboard_port,
             "--ray-client-server-port=%d" % free_port(),
             "--dashboard-agent-listen-port=%d" % free_port(),
             "--temp-dir=" + self.temp_dir, "--disable-usage-stats"],
            env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.roots.add(start.pid)
        out, err = start.communicate()
        if start.returncode != 0:
            self.stop()
            raise RuntimeError("ray start --head failed:\n" + out + err)
        try:
            wait_http(self)
        except RuntimeError:
            self.stop()
            raise

    def recovery_driver(self):
        return Driver([self.args.python, RAY_DRIVER, "recovery", "127.0.0.1:%d" % self.gcs_port,
                       str(self.gcs_port)], self.env,
                      os.path.join(self.temp_dir, "driver.err"))

    def throughput(self, actors, pgs):
        return json_lines([self.args.python, RAY_DRIVER, "throughput",
                           "127.0.0.1:%d" % self.gcs_port, str(actors), str(pgs)], env=self.env)

    def note_gcs(self, pid):
        self.roots.add(pid)  # the driver relaunched it under setsid

    def processes(self):
        """The head's processes: daemons, dashboard, workers."""
        return pids_started_from(self.roots)

    def stop(self):
        kill_started(self.roots)
        remove_temp(self.args, self.temp_dir)


class TroupeHead:
    """A one-node Troupe head as `troupe start --head [--redis-address=...]` makes it with its
    defaults (the HTTP API on, CPUs detected, on 127.0.0.1), under a fresh temp dir; its fixed
    default ports (GCS 6380, HTTP 8265) are replaced by free ones, as Ray's are. The head's
    supervisor restarts its GCS. stop(): `troupe stop --force` on that temp dir."""
    name = "troupe"

    def __init__(self, args, redis):
        self.args = args
        self.temp_root = tempfile.mkdtemp(prefix="troupe-gcs-ft-")
        self.kills = []  # when each GCS kill was sent
        self.gcs_port = free_port()
        cmd = [args.troupe, "start", "--head", "--port=%d" % self.gcs_port,
               "--http-port=%d" % free_port(), "--temp-dir=" + self.temp_root]
        if redis:
            cmd.append("--redis-address=" + redis.address)
        if not os.access(args.troupe, os.X_OK) or not os.access(args.bench, os.X_OK):
            shutil.rmtree(self.temp_root, ignore_errors=True)
            raise RuntimeError("%s or %s is missing: build them with `bazel build -c opt "
                               "//src/cli:troupe //bench:gcs_ft_bench` (bench/gcs_ft_bench.sh "
                               "does)" % (args.troupe, args.bench))
        result = run(cmd)
        if result.returncode != 0:
            self.stop()
            raise RuntimeError(" ".join(cmd) + "\n" + result.stdout + result.stderr)
        session = os.path.join(self.temp_root, "session_latest")
        with open(os.path.join(session, "token")) as f:
            token = f.read().strip()
        with open(os.path.join(session, "http_address")) as f:
            self.http = f.read().strip()
        self.headers = {"Authorization": "Bearer " + token}
        self.pid_file = os.path.join(session, "pids", "gcs.pid")
        self.env = dict(os.environ, TROUPE_ADDRESS="127.0.0.1:%d" % self.gcs_port,
                        TROUPE_TOKEN=token)
        try:
            wait_http(self)
        except RuntimeError:
            self.stop()
            raise

    def recovery_driver(self):
        return Driver([self.args.bench, "--mode=recovery", "--gcs-pid-file=" + self.pid_file],
                      self.env, os.path.join(self.temp_root, "driver.err"))

    def throughput(self, actors, pgs):
        return json_lines([self.args.bench, "--mode=throughput", "--actors=%d" % actors,
                           "--pgs=%d" % pgs], env=self.env)

    def note_gcs(self, pid):
        pass  # the head's supervisor owns it; `troupe stop` stops it

    def processes(self):
        """The head's processes: daemons (their command lines name the temp dir), workers."""
        return pids_started_from(marker=self.temp_root)

    def stop(self):
        run([self.args.troupe, "stop", "--force", "--temp-dir=" + self.temp_root])
        remove_temp(self.args, self.temp_root)


class Driver:
    """A recovery driver (gcs_ft_bench.cc --mode=recovery or gcs_ft_ray_driver.py recovery) talked to
    over its stdin/stdout; its stderr goes to `stderr_path` (its end is printed if it fails)."""

    def __init__(self, command, env, stderr_path):
        self.stderr_path = stderr_path
        self.stderr = open(stderr_path, "w")
        self.proc = subprocess.Popen(command, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True,
                                     bufsize=1)

    def send(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def read_event(self, event, timeout=None):
        """The driver's next JSON line for `event`. With `timeout` (seconds), a driver that has
        not printed it by then is killed and the RuntimeError says so."""
        timer = threading.Timer(timeout, self.proc.kill) if timeout else None
        if timer:
            timer.start()
        try:
            for line in self.proc.stdout:
                if line.startswith("{"):
                    record = json.loads(line)
                    if record.get("event") == event:
                        return record
        finally:
            if timer:
                timer.cancel()
        self.proc.wait()
        with open(self.stderr_path) as f:
            sys.stderr.write(f.read()[-3000:])
        if timer and self.proc.returncode == -signal.SIGKILL:
            raise RuntimeError("no %r within %d s (the bench's bound per kill): the recovery "
                               "driver was stopped" % (event, timeout))
        raise RuntimeError("the recovery driver exited with %s before printing %r"
                           % (self.proc.returncode, event))

    def close(self):
        if self.proc.poll() is None:
            try:
                self.send("exit")
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()
