#!/usr/bin/env python3
"""Training through failures, side by side in one run (issue 33's measurement): Troupe's
DataParallelTrainer, torchrun (elastic agent, Debian's PyTorch, gloo) and Ray Train (TorchTrainer
with a FailureConfig) train the same workload, and one of the 4 workers is killed, stopped, or
killed again and again:

  workload   ResNet18 on FashionMNIST (examples/resnet18_fashion_mnist's model and data; the
             peers: bench/elastic_peer_train.py), 4 workers on the CPU, one thread each, batch
             --batch-size per worker (default 16: a step is short), Adam 1e-3, seed 0; every side
             checkpoints every --checkpoint-every steps (torchrun's and Ray Train's documented way
             to survive a restart) and at the epoch's end
  recovery   SIGKILL one worker (the highest rank other than 0, which writes the step lines) once
             step --kill-step is committed; then train to --steps and evaluate on the first
             --test-limit test images:
             seconds from the kill to the next committed step, steps lost (redone or skipped),
             final accuracy against the failure-free run's
  hang       SIGSTOP that worker instead: the same figures, or "none within --hang-seconds"
  chaos      a worker SIGKILLed every --chaos-interval seconds for --chaos-seconds (restarts and
             replacements allowed): committed samples per second over the window, and its ratio
             to the failure-free run's (the issue's 10 minutes shortened to keep the whole bench
             affordable); with --chaos-epochs=E the chaos run trains E whole epochs instead,
             with a kill every --chaos-interval seconds from its first step to its evaluation,
             and the clean run trains the same E epochs: goodput over the whole run and the final
             accuracy against the failure-free run's (the issue's long chaos run, 2 epochs are
             about 11 minutes of chaos, its own command below)
  clean      the failure-free run: committed samples per second, final accuracy
  node       (--netns only) a whole node dies: its link is cut (no reset reaches anyone: as when
             a machine loses power) and every process on it SIGKILLed once step --kill-step is
             committed; the node killed is the one holding the highest rank other than 0. The
             figures of "recovery", plus the seconds until the GCS declared the node dead
             (`troupe status`, polled every 0.1 s) and from then to the next committed step

Across hosts (--netns, Troupe only, needs root): 3 network namespaces (bench/netns_cluster.py),
each a node of 1 CPU with its own /dev/shm: the head on node 1, where the driver runs, one worker
per node (--workers=3). A fresh cluster for every run. The peers' multi-node forms are not run.

Each side writes an events file (examples/fashion_mnist/fashion_mnist.h says the lines: a
"worker" line per rank with its pid, a "step" line per committed optimizer step with its wall
time, the step number and the samples committed so far, an "eval" line with the test accuracy);
every figure comes from those lines alone (the functions below the imports), and the worker to
kill is the pid its own line names, checked to be a descendant of the side's process.

Sides (run as each is documented to be run, defaults otherwise):
  troupe     bazel-bin/examples/resnet18_fashion_mnist/resnet18_fashion_mnist on an embedded
             cluster of 4 CPUs; today a worker's death restarts the whole group from the latest
             checkpoint (--max-failures). --troupe-elastic=MIN:MAX runs it with the elastic
             worker group instead (--min-workers=MIN --max-workers=MAX, issue 33: the example
             must have those flags, and its loop must write a "worker" line for each worker
             that (re)joins and put the group's generation in "gen"); --troupe-flag=F passes any
             other flag F on.
  torchrun   torchrun --nnodes=1 --nproc_per_node=4 --max_restarts=N --rdzv_backend=c10d
             --rdzv_endpoint=localhost:PORT --redirects=4:3 --tee=4:3 (torch 1.13's agent
             restarts every local worker when one fails; --torchrun-nnodes=1:4 runs the elastic
             form, whose rendezvous waits its 30 s last call for the nodes that never come on one
             machine; --redirects/--tee: see TorchrunSide)
  ray_train  Ray Train in the bench virtualenv (bash bench/setup_peers.sh): TorchTrainer,
             ScalingConfig(num_workers=4), FailureConfig(max_failures=N), CheckpointConfig(
             num_to_keep=2) as Troupe's example keeps 2, ray.init(num_cpus=4)

  bazel build -c opt --config=nocuda //examples/resnet18_fashion_mnist
  python3 bench/elastic_bench.py            # 3 rounds, alternating sides
  python3 bench/elastic_bench.py --quick    # 1 round, fewer steps, shorter bounds: a check
                                            # (12 minutes on the 2-core VM under load ~12)
  python3 bench/elastic_bench.py --sides=troupe,torchrun --scenarios=recovery,hang
  python3 bench/elastic_bench.py --sides=troupe --troupe-elastic=3:4 --rounds=1 \
      --scenarios=clean,chaos --chaos-epochs=2   # the long chaos run (about 23 minutes)

--json FILE writes the results file of bench/bench_common.py (peers "torchrun", "ray_train"):
rows recovery_seconds, recovery_steps_lost, hang_recovery_seconds (lower is better; no figure
when a side made no step within the bound), committed_samples_per_s, goodput_under_chaos_*,
final_accuracy_*; every run's figures and the load averages are in "raw".
"""
import argparse
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench_common import (alternate, load_average, stop_processes, summary_row,  # noqa: E402
                          write_results)
from netns_cluster import NETNS, NetnsCluster  # noqa: E402

PEER_SCRIPT = os.path.join(HERE, "elastic_peer_train.py")
SIDES = ("troupe", "torchrun", "ray_train")
SCENARIOS = ("clean", "recovery", "hang", "chaos", "node")

# --- The events and what they show (pure functions, tested by bench_harness_test.py) ---

_INT_FIELDS = {"step", "samples", "world", "rank", "pid"}
_FLOAT_FIELDS = {"t", "accuracy"}


def parse_event(line):
    """One events-file line ("<kind> t=<unix s> key=value ...") as a dict with "kind", or None
    for a line that is not one (a torn or foreign line is skipped, not fatal)."""
    parts = line.split()
    if len(parts) < 2 or "=" in parts[0]:
        return None
    event = {"kind": parts[0]}
    try:
        for part in parts[1:]:
            key, sep, value = part.partition("=")
            if not key or not sep:
                return None
            event[key] = (int(value) if key in _INT_FIELDS else
                          float(value) if key in _FLOAT_FIELDS else value)
    except ValueError:
        return None
    return event if "t" in event else None


def parse_events(text):
    return [e for e in (parse_event(line) for line in text.splitlines()) if e is not None]


def steps_of(events):
    """The committed steps in time order."""
    return sorted((e for e in events if e["kind"] == "step"), key=lambda e: e["t"])


def fault_figures(events, fault_time, bound):
    """What a fault (a SIGKILL or SIGSTOP at `fault_time`) did to the run: the first step
    committed after it by another generation than the one committing when it struck (a restart
    or a new group; a step the old group still finished is not a recovery) within `bound`
    seconds. Returns {recovered, seconds (to that step), steps_redone (old steps done again),
    steps_skipped, steps_lost (both), last_step_before, first_step_after}; seconds and the
    step counts are None when there was none within the bound. ValueError when no step was
    committed before the fault (the fault came too early to measure anything)."""
    steps = steps_of(events)
    before = [s for s in steps if s["t"] <= fault_time]
    if not before:
        raise ValueError("no step was committed before the fault at %.3f" % fault_time)
    generation = before[-1]["gen"]
    last_old = max(s["step"] for s in steps if s["gen"] == generation)
    after = next((s for s in steps if s["t"] > fault_time and s["gen"] != generation), None)
    figures = {"recovered": False, "seconds": None, "steps_redone": None, "steps_skipped": None,
               "steps_lost": None, "last_step_before": last_old, "first_step_after": None}
    if after is None or after["t"] - fault_time > bound:
        return figures
    resumed = after["step"]
    redone, skipped = max(0, last_old - (resumed - 1)), max(0, resumed - 1 - last_old)
    figures.update(recovered=True, seconds=after["t"] - fault_time, steps_redone=redone,
                   steps_skipped=skipped, steps_lost=redone + skipped, first_step_after=resumed)
    return figures


def committed_rate(events):
    """Samples committed per second from the first step to the last (a failure-free run), or
    None with fewer than two steps."""
    steps = steps_of(events)
    if len(steps) < 2 or steps[-1]["t"] <= steps[0]["t"]:
        return None
    return (steps[-1]["samples"] - steps[0]["samples"]) / (steps[-1]["t"] - steps[0]["t"])


def progress_at(events, when):
    """The samples committed as of `when`: those of the last step at or before it (after a
    restart from a checkpoint the count goes back, so what was redone is not counted twice)."""
    done = [s for s in steps_of(events) if s["t"] <= when]
    return done[-1]["samples"] if done else 0


def goodput(events, start, end):
    """Committed samples per second over [start, end]: the progress made in the window."""
    if end <= start:
        raise ValueError("the window must not be empty")
    return (progress_at(events, end) - progress_at(events, start)) / (end - start)


def final_accuracy(events):
    evals = [e for e in events if e["kind"] == "eval"]
    return evals[-1]["accuracy"] if evals else None


def pick_victim(events, alive, spare_rank=0):
    """The worker to fault: of the workers whose "worker" line names a pid alive(pid) says is
    running, the highest rank other than `spare_rank` (rank 0 writes the step lines), the latest
    line first. None if there is none."""
    workers = [e for e in events if e["kind"] == "worker" and e.get("rank") != spare_rank]
    for e in sorted(workers, key=lambda e: (e["rank"], e["t"]), reverse=True):
        if alive(e["pid"]):
            return e["pid"]
    return None


# --- Processes ---

def parent_of(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), fields[0]
    except (OSError, ValueError, IndexError):
        return None, None


def gone(pid):
    """Has `pid` exited (no such process, or a zombie)?"""
    ppid, state = parent_of(pid)
    return ppid is None or state == "Z"


def descendants(root):
    """Every process below `root` (a snapshot of /proc)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            ppid, _ = parent_of(int(entry))
            if ppid is not None:
                children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EventsReader:
    """Reads an events file as it grows: events() returns every complete line so far, parsed
    (a line still being written waits for its end)."""

    def __init__(self, path):
        self.path = path
        self._offset, self._events, self._partial = 0, [], b""

    def events(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return self._events
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        self._events += parse_events(b"\n".join(lines).decode(errors="replace"))
        return self._events


class SideRun:
    """One run of one side: its processes (a session of their own), its events file and its log
    under `workdir`. stop() kills every process of it."""

    def __init__(self, command, env, workdir, events_path, cleanup_patterns=()):
        self.workdir, self.events_path = workdir, events_path
        self.cleanup_patterns = list(cleanup_patterns)
        self.log_path = os.path.join(workdir, "log.txt")
        self._log = open(self.log_path, "w")
        self._log.write("$ %s\n" % " ".join(shlex.quote(c) for c in command))
        self._log.flush()
        self.proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.events = EventsReader(events_path).events

    def wait(self, predicate, timeout):
        """Until predicate(events) holds (True), the side exits or `timeout` passes (False)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if predicate(self.events()):
                return True
            if self.proc.poll() is not None:
                time.sleep(0.2)  # the last lines
                return predicate(self.events())
            time.sleep(0.05)
        return False

    def ours(self, pid):
        """Is `pid` a live (not zombie) descendant of this run's process?"""
        seen = 0
        current = pid
        while current and current > 1 and seen < 64:
            ppid, state = parent_of(current)
            if ppid is None or (current == pid and state == "Z"):
                return False
            if ppid == self.proc.pid:
                return True
            current, seen = ppid, seen + 1
        return False

    def fault(self, sig):
        """Sends `sig` to the worker pick_victim chooses, waiting (up to 60 s) for one to exist.
        Returns (pid, time just before the signal)."""
        deadline = time.time() + 60
        while time.time() < deadline:
            pid = pick_victim(self.events(), self.ours)
            if pid is not None:
                when = time.time()
                os.kill(pid, sig)
                return pid, when
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("no worker to fault (no live worker other than rank 0 in %s)" %
                           self.events_path)

    def stop(self):
        pids = descendants(self.proc.pid) + [self.proc.pid]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)  # stopped ones too
            except OSError:
                pass
        if self.cleanup_patterns:
            stop_processes(self.cleanup_patterns)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.time() + 10
        while time.time() < deadline and not all(gone(pid) for pid in pids):
            time.sleep(0.05)
        self._log.close()

    def log_tail(self, lines=15):
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])


# --- The sides ---

class Side:
    """How one side starts a run: start(tag, steps, epochs, max_failures) -> SideRun."""

    def __init__(self, name, args, scratch):
        self.name, self.args, self.scratch = name, args, scratch
        self.count = 0

    def workdir(self, tag):
        self.count += 1
        path = os.path.join(self.scratch, "%s-%d-%s" % (self.name, self.count, tag))
        os.makedirs(path)
        return path

    def common(self, events, steps, epochs):
        a = self.args
        return ["--batch-size=%d" % a.batch_size, "--lr=%g" % a.lr, "--epochs=%d" % epochs,
                "--limit-batches=%d" % steps, "--checkpoint-every=%d" % a.checkpoint_every,
                "--seed=0", "--data-dir=" + a.data_dir, "--test-limit=%d" % a.test_limit]

    def start(self, tag, steps, epochs, max_failures):
        workdir = self.workdir(tag)
        events = os.path.join(workdir, "events.txt")
        command, env, patterns = self.command(workdir, events, steps, epochs, max_failures)
        return SideRun(command, env, workdir, events, patterns)

    def cleanup(self, run):
        """Files a run leaves outside its workdir."""


def troupe_mode_flags(args):
    """The flags that choose how Troupe's side survives a failure: none today (the whole group
    restarts from the latest checkpoint), the elastic group's with --troupe-elastic, and any
    --troupe-flag."""
    flags = []
    if args.troupe_elastic:
        low, high = args.troupe_elastic
        flags += ["--min-workers=%d" % low, "--max-workers=%d" % high]
    return flags + list(args.troupe_flag)


def troupe_mode(args):
    if args.troupe_elastic:
        return "Troupe: elastic group, %d to %d workers" % tuple(args.troupe_elastic)
    return "Troupe: the whole group restarts from the latest checkpoint"


class TroupeSide(Side):
    def program(self, workdir, events, steps, epochs, max_failures):
        """The example's command line, whatever cluster it runs on."""
        a = self.args
        return [os.path.abspath(a.troupe), "--num-workers=%d" % a.workers, "--cpus-per-worker=1",
                "--max-failures=%d" % max_failures, "--events-file=" + events,
                "--storage-path=" + os.path.join(workdir, "results"),
                "--name=" + os.path.basename(workdir)
                ] + self.common(events, steps, epochs) + troupe_mode_flags(a)

    def command(self, workdir, events, steps, epochs, max_failures):
        env = dict(os.environ, TROUPE_TEMP_DIR=os.path.join(workdir, "t"))
        env.pop("TROUPE_ADDRESS", None)  # an embedded cluster of --num-cpus, whatever runs here
        command = self.program(workdir, events, steps, epochs, max_failures)
        return command[:1] + ["--num-cpus=%d" % self.args.workers] + command[1:], env, []

    def cleanup(self, run):
        name = os.path.basename(run.workdir)
        # The example's rank 0 writes checkpoints to /tmp/troupe-ckpt-<name>-<pid>; the workers
        # unpack the one they resume from to /tmp/troupe-resume-<pid>-<name>-<suffix>.
        tmp = tempfile.gettempdir()
        for entry in os.listdir(tmp):
            if (entry.startswith("troupe-ckpt-" + name + "-") or
                    (entry.startswith("troupe-resume-") and ("-" + name + "-") in entry)):
                shutil.rmtree(os.path.join(tmp, entry), ignore_errors=True)


class TroupeNetnsSide(TroupeSide):
    """Troupe's side on a fresh 3-node namespace cluster per run (see --netns above): the driver
    runs on node 1 and attaches to the cluster; run.cluster is the cluster, closed by cleanup."""

    def start(self, tag, steps, epochs, max_failures):
        a = self.args
        cluster = NetnsCluster(a.netns_prefix, a.workers, a.troupe_cli, num_cpus=1)
        try:
            cluster.start_troupe()
            workdir = self.workdir(tag)
            events = os.path.join(workdir, "events.txt")
            command = cluster.exec_args(1, cluster.driver_env()) + self.program(
                workdir, events, steps, epochs, max_failures)
            run = SideRun(command, dict(os.environ), workdir, events)
        except BaseException:
            cluster.close()
            raise
        run.cluster = cluster
        return run

    def cleanup(self, run):
        run.cluster.close()
        TroupeSide.cleanup(self, run)


class TorchrunSide(Side):
    def command(self, workdir, events, steps, epochs, max_failures):
        a = self.args
        # Torch 1.13 on Python 3.11: the default --redirects/--tee ("0", nothing redirected)
        # parse to None (3.11's enum.Flag no longer iterates the zero member) and torchrun stops
        # at start with "'NoneType' object has no attribute 'get'". The same setting in the
        # mapping form (a local rank that does not exist: nothing redirected) parses.
        unused_rank = "%d:3" % a.workers
        command = shlex.split(a.torchrun) + [
            "--nnodes=" + a.torchrun_nnodes, "--nproc_per_node=%d" % a.workers,
            "--max_restarts=%d" % max_failures, "--rdzv_backend=c10d",
            "--rdzv_endpoint=localhost:%d" % free_port(), "--rdzv_id=" + os.path.basename(workdir),
            "--redirects=" + unused_rank, "--tee=" + unused_rank, PEER_SCRIPT, "torchrun", "--events=" + events,
            "--checkpoint-dir=" + os.path.join(workdir, "checkpoint")
        ] + self.common(events, steps, epochs)
        return command, dict(os.environ), []


class RaySide(Side):
    def command(self, workdir, events, steps, epochs, max_failures):
        a = self.args
        # Short: Ray's Unix sockets live under it.
        temp = tempfile.mkdtemp(prefix="erb-", dir="/tmp")
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
        command = [a.ray_python, PEER_SCRIPT, "ray", "--events=" + events,
                   "--workers=%d" % a.workers, "--max-failures=%d" % max_failures,
                   "--storage-path=" + os.path.join(workdir, "ray_results"),
                   "--name=" + os.path.basename(workdir), "--ray-temp-dir=" + temp
                   ] + self.common(events, steps, epochs)
        self.temp = temp
        return command, env, [re.escape(temp)]

    def cleanup(self, run):
        shutil.rmtree(self.temp, ignore_errors=True)


# --- The scenarios: one run each; figures from its events ---

def finish(side, run, keep):
    run.stop()
    side.cleanup(run)
    if not keep:
        shutil.rmtree(run.workdir, ignore_errors=True)


def has_step(at_least):
    return lambda events: any(e["kind"] == "step" and e["step"] >= at_least for e in events)


def has_eval(events):
    return any(e["kind"] == "eval" for e in events)


def has_evals(count):
    """The run has evaluated `count` times: the example evaluates after every epoch, so a run of
    E epochs has ended once it has E "eval" lines."""
    return lambda events: sum(e["kind"] == "eval" for e in events) >= count


def failed(run, what):
    return RuntimeError("%s (log %s):\n%s" % (what, run.log_path, run.log_tail()))


def clean_run(side, args):
    epochs = args.chaos_epochs or 1  # the long chaos run's reference: the same whole epochs
    if args.chaos_epochs:
        run = side.start("clean", 0, epochs, args.max_failures)
    else:
        run = side.start("clean", args.steps, 1, args.max_failures)
    try:
        if not run.wait(has_evals(epochs), args.run_timeout):
            raise failed(run, "no evaluation within %d s" % args.run_timeout)
        events = run.events()
        return {"clean_samples_per_s": committed_rate(events),
                "clean_accuracy": final_accuracy(events),
                "clean_steps": steps_of(events)[-1]["step"]}
    finally:
        finish(side, run, args.keep)


def fault_run(side, args, sig, bound, tag):
    run = side.start(tag, args.steps, 1, args.max_failures)
    try:
        if not run.wait(has_step(args.kill_step), args.run_timeout):
            raise failed(run, "step %d not reached within %d s" % (args.kill_step,
                                                                    args.run_timeout))
        pid, when = run.fault(sig)
        if sig == signal.SIGKILL:  # train to the end: the accuracy after a failure
            run.wait(has_eval, bound + args.run_timeout)
        else:  # a stopped worker: the next step of another group within the bound, or none
            run.wait(lambda events: fault_figures(events, when, bound)["recovered"], bound)
        events = run.events()
        figures = fault_figures(events, when, bound)
        figures.update(pid=pid, bound=bound)
        if sig == signal.SIGKILL:
            figures["accuracy"] = final_accuracy(events)
        return figures
    finally:
        finish(side, run, args.keep)


def node_of(cluster, pid):
    """The node (1..n) whose namespace runs `pid`, or None."""
    for node in range(1, cluster.n + 1):
        out = subprocess.run([NETNS, "pids", cluster.prefix, str(node)], capture_output=True,
                             text=True)
        if str(pid) in out.stdout.split():
            return node
    return None


def node_dead_at(cluster, node, t0, timeout):
    """Polls `troupe status` on node 1 every 0.1 s from `t0` until node `node` (by its address)
    is DEAD: the time the GCS recorded its death (its end_time_ms; the same machine's clock),
    else when it was first seen so; None if not within `timeout`."""
    status = cluster.exec_args(1) + cluster.status_command()
    deadline = t0 + timeout
    while time.time() < deadline:
        out = subprocess.run(status, capture_output=True, text=True)
        if out.returncode == 0:
            for n in json.loads(out.stdout)["nodes"]:
                if n.get("node_ip") == cluster.ip(node) and n["state"] == "DEAD":
                    return n["end_time_ms"] / 1000.0 if n.get("end_time_ms") else time.time()
        time.sleep(0.1)
    return None


def node_run(side, args):
    """A whole node dies (see "node" above)."""
    run = side.start("node", args.steps, 1, args.max_failures)
    try:
        if not run.wait(has_step(args.kill_step), args.run_timeout):
            raise failed(run, "step %d not reached within %d s" % (args.kill_step,
                                                                    args.run_timeout))
        cluster = run.cluster
        workers = [e for e in run.events() if e["kind"] == "worker" and e.get("rank") != 0]
        node = None
        for e in sorted(workers, key=lambda e: (e["rank"], e["t"]), reverse=True):
            node = node_of(cluster, e["pid"])
            if node not in (None, 1):
                break
        if node in (None, 1):
            raise failed(run, "no worker other than rank 0 on a node other than the head's")
        when = time.time()
        subprocess.run([NETNS, "link", cluster.prefix, str(node), "down"], check=True)
        subprocess.run([NETNS, "kill", cluster.prefix, str(node)], check=True)
        dead = node_dead_at(cluster, node, when, args.recovery_bound)
        run.wait(has_eval, args.recovery_bound + args.run_timeout)
        events = run.events()
        figures = fault_figures(events, when, args.recovery_bound)
        figures.update(node=node, accuracy=final_accuracy(events),
                       declared_dead_seconds=None if dead is None else dead - when)
        if dead is not None and figures["seconds"] is not None:
            figures["after_declared_dead_seconds"] = figures["seconds"] - (dead - when)
        return figures
    finally:
        finish(side, run, args.keep)


def chaos_run(side, args):
    """A worker SIGKILLed every --chaos-interval seconds: for --chaos-seconds of an endless run,
    or (--chaos-epochs) until a run of that many epochs evaluates."""
    to_the_end = bool(args.chaos_epochs)
    run = side.start("chaos", 0, args.chaos_epochs or 1000, args.chaos_max_failures)
    try:
        if not run.wait(has_step(1), args.run_timeout):
            raise failed(run, "no step within %d s" % args.run_timeout)
        start = steps_of(run.events())[0]["t"]
        # Whole epochs: bounded by the run's timeout, ended by its evaluation.
        end = start + (args.run_timeout if to_the_end else args.chaos_seconds)
        kills, next_kill = [], start + args.chaos_interval
        while time.time() < end:
            time.sleep(max(0.0, min(next_kill, end) - time.time()))
            ended = to_the_end and (has_evals(args.chaos_epochs)(run.events()) or
                                    run.proc.poll() is not None)
            if time.time() >= end or ended:
                break
            pid = pick_victim(run.events(), run.ours)
            if pid is None:  # restarting: the next worker that shows up
                time.sleep(0.05)
                continue
            kills.append(time.time())
            os.kill(pid, signal.SIGKILL)
            next_kill = kills[-1] + args.chaos_interval
        if to_the_end:
            if not run.wait(has_evals(args.chaos_epochs), 60):
                raise failed(run, "no evaluation within %d s of the first step" %
                             (args.run_timeout + 60))
            events = run.events()
            end = steps_of(events)[-1]["t"]
        else:
            time.sleep(max(0.0, end - time.time()))
            events = run.events()
        first = fault_figures(events, kills[0], end - start) if kills else {}
        figures = {"chaos_samples_per_s": goodput(events, start, end), "chaos_kills": len(kills),
                   "chaos_seconds": end - start,
                   "chaos_first_recovery_seconds": first.get("seconds")}
        if to_the_end:
            figures.update(chaos_accuracy=final_accuracy(events),
                           chaos_steps=steps_of(events)[-1]["step"])
        return figures
    finally:
        finish(side, run, args.keep)


def run_side(side, args):
    """One round of one side: the chosen scenarios, in order. Returns the figures, with
    "errors" for scenarios that failed."""
    figures, errors = {"load": {}}, {}
    for scenario in args.scenarios:
        figures["load"][scenario] = load_average()
        try:
            if scenario == "clean":
                figures.update(clean_run(side, args))
            elif scenario == "recovery":
                r = fault_run(side, args, signal.SIGKILL, args.recovery_bound, "recovery")
                figures.update(recovery_seconds=r["seconds"], recovery_steps_lost=r["steps_lost"],
                               recovery_detail=r, recovery_accuracy=r.get("accuracy"))
            elif scenario == "hang":
                r = fault_run(side, args, signal.SIGSTOP, args.hang_seconds, "hang")
                figures.update(hang_seconds=r["seconds"], hang_steps_lost=r["steps_lost"],
                               hang_detail=r)
            elif scenario == "node":
                r = node_run(side, args)
                figures.update(node_seconds=r["seconds"], node_steps_lost=r["steps_lost"],
                               node_declared_dead_seconds=r["declared_dead_seconds"],
                               node_after_dead_seconds=r.get("after_declared_dead_seconds"),
                               node_accuracy=r["accuracy"], node_detail=r)
            elif scenario == "chaos":
                figures.update(chaos_run(side, args))
                if figures.get("clean_samples_per_s") and figures.get("chaos_samples_per_s")\
                        is not None:
                    figures["chaos_ratio"] = (figures["chaos_samples_per_s"] /
                                              figures["clean_samples_per_s"])
                if figures.get("clean_accuracy") is not None and \
                        figures.get("chaos_accuracy") is not None:
                    figures["chaos_accuracy_points"] = 100 * (figures["chaos_accuracy"] -
                                                              figures["clean_accuracy"])
        except (RuntimeError, ValueError, OSError) as e:
            errors[scenario] = str(e)
            sys.stderr.write("!! %s %s: %s\n" % (side.name, scenario, e))
    if errors:
        figures["errors"] = errors
    return figures


# --- Rows and the printed table ---

def result_rows(results, args):
    """The results file's rows from {side: [figures per round]}."""
    def values(side, key):
        return [r.get(key) for r in results.get(side, [])]

    def row(metric, unit, key, higher, note):
        peers = {p: values(p, key) for p in ("torchrun", "ray_train") if p in results}
        return summary_row(metric, unit, values("troupe", key), peers, higher, note)

    work = ("ResNet18, FashionMNIST, %d workers on the CPU, batch %d per worker, checkpoint every "
            "%d steps; %s" % (args.workers, args.batch_size, args.checkpoint_every,
                              troupe_mode(args)))
    rows = []
    chosen = set(args.scenarios)
    if "recovery" in chosen:
        rows += [row("recovery_seconds", "seconds", "recovery_seconds", False,
                     "SIGKILL of one worker after step %d to the next committed step; no figure: "
                     "none within %d s; %s" % (args.kill_step, args.recovery_bound, work)),
                 row("recovery_steps_lost", "steps", "recovery_steps_lost", False,
                     "committed steps redone or skipped after that kill"),
                 row("final_accuracy_after_kill", "fraction", "recovery_accuracy", True,
                     "test accuracy after %d steps with that kill" % args.steps)]
    if "node" in chosen:
        where = "a node of 3 (network namespaces, one worker each)"
        rows += [row("node_recovery_seconds", "seconds", "node_seconds", False,
                     "%s dies (link cut, every process SIGKILLed) after step %d, to the next "
                     "committed step; %s" % (where, args.kill_step, work)),
                 row("node_declared_dead_seconds", "seconds", "node_declared_dead_seconds", False,
                     "that node's death to the GCS declaring it dead (troupe status)"),
                 row("node_recovery_after_declared_dead_seconds", "seconds",
                     "node_after_dead_seconds", False,
                     "the node declared dead to the next committed step (negative: the workers "
                     "went on before the GCS declared it)"),
                 row("node_steps_lost", "steps", "node_steps_lost", False,
                     "committed steps redone or skipped after the node's death"),
                 row("final_accuracy_after_node_death", "fraction", "node_accuracy", True,
                     "test accuracy after %d steps with that node's death" % args.steps)]
    if "hang" in chosen:
        rows.append(row("hang_recovery_seconds", "seconds", "hang_seconds", False,
                        "SIGSTOP of one worker after step %d to the next step committed without "
                        "it; no figure: none within %d s" % (args.kill_step, args.hang_seconds)))
    if "clean" in chosen:
        length = ("%d whole epochs" % args.chaos_epochs if args.chaos_epochs else
                  "%d steps" % args.steps)
        rows += [row("committed_samples_per_s", "samples_per_second", "clean_samples_per_s",
                     True, "failure-free, first to last step of %s; %s" % (length, work)),
                 row("final_accuracy_failure_free", "fraction", "clean_accuracy", True,
                     "test accuracy after %s failure-free" % length)]
    if "chaos" in chosen:
        window = ("for %d whole epochs (to the evaluation)" % args.chaos_epochs
                  if args.chaos_epochs else "for %g s (the issue asks 600 s)" % args.chaos_seconds)
        rows.append(row("goodput_under_chaos_samples_per_s", "samples_per_second",
                        "chaos_samples_per_s", True,
                        "a worker SIGKILLed every %g s %s" % (args.chaos_interval, window)))
        if "clean" in chosen:
            rows.append(row("goodput_under_chaos_ratio", "ratio", "chaos_ratio", True,
                            "goodput under chaos / the same side's failure-free rate"))
        if args.chaos_epochs:
            rows.append(row("final_accuracy_under_chaos", "fraction", "chaos_accuracy", True,
                            "test accuracy after %d epochs with a kill every %g s" %
                            (args.chaos_epochs, args.chaos_interval)))
    return rows


def show(value, fmt="%.2f"):
    return "-" if value is None else fmt % value


def print_table(results, args, out=sys.stdout):
    keys = [("clean_samples_per_s", "clean samples/s", "%.1f"),
            ("clean_accuracy", "clean accuracy", "%.4f"),
            ("recovery_seconds", "kill: s to next step", "%.2f"),
            ("recovery_steps_lost", "kill: steps lost", "%d"),
            ("recovery_accuracy", "kill: accuracy", "%.4f"),
            ("hang_seconds", "stop: s to next step", "%.2f"),
            ("node_seconds", "node: s to next step", "%.2f"),
            ("node_declared_dead_seconds", "node: s to DEAD", "%.2f"),
            ("node_after_dead_seconds", "node: DEAD to step", "%.2f"),
            ("node_steps_lost", "node: steps lost", "%d"),
            ("node_accuracy", "node: accuracy", "%.4f"),
            ("chaos_samples_per_s", "chaos samples/s", "%.1f"),
            ("chaos_ratio", "chaos / clean", "%.2f"),
            ("chaos_kills", "chaos kills", "%d"),
            ("chaos_seconds", "chaos seconds", "%.0f"),
            ("chaos_accuracy", "chaos accuracy", "%.4f"),
            ("chaos_accuracy_points", "chaos - clean (pts)", "%+.2f")]
    out.write("%-22s" % "" + "".join("%-28s" % side for side in results) + "\n")
    for key, label, fmt in keys:
        if not any(key in r for rounds in results.values() for r in rounds):
            continue
        cells = []
        for rounds in results.values():
            cells.append(", ".join(show(r.get(key), fmt) for r in rounds))
        out.write("%-22s" % label + "".join("%-28s" % c for c in cells) + "\n")
    out.write("(per round; '-': no figure, e.g. no committed step within the bound: kill %d s, "
              "stop %d s)\n" % (args.recovery_bound, args.hang_seconds))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="1 round of 20 steps, stop bound 20 s, chaos 30 s (the flags "
                             "below still override)")
    parser.add_argument("--rounds", type=int, help="default 3 (--quick: 1)")
    parser.add_argument("--sides", default=",".join(SIDES), help="of " + ",".join(SIDES))
    parser.add_argument("--scenarios",
                        help="of %s, run in this order per side (default: all but node; "
                             "--netns: node)" % ",".join(SCENARIOS))
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16, help="per worker")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, help="steps of a clean or kill run (default 40; "
                                                  "--quick 20)")
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--kill-step", type=int,
                        help="fault once this step is committed (default 1.5 checkpoint "
                             "intervals: half an interval after a checkpoint)")
    parser.add_argument("--recovery-bound", type=int, default=180,
                        help="seconds after a kill within which a step counts as recovery")
    parser.add_argument("--hang-seconds", type=int, help="bound after SIGSTOP (default 30; "
                                                         "--quick 20)")
    parser.add_argument("--chaos-seconds", type=float, help="default 60 (--quick 30)")
    parser.add_argument("--chaos-interval", type=float, default=10)
    parser.add_argument("--chaos-epochs", type=int, default=0,
                        help="the long chaos run: chaos (and clean) train this many whole epochs,"
                             " kills until the evaluation (see above; replaces --chaos-seconds)")
    parser.add_argument("--max-failures", type=int, default=10,
                        help="restarts each side may make in a clean, kill or stop run")
    parser.add_argument("--chaos-max-failures", type=int, default=1000)
    parser.add_argument("--run-timeout", type=int,
                        help="seconds per run (default 600; 900 per epoch with --chaos-epochs)")
    parser.add_argument("--troupe",
                        default="bazel-bin/examples/resnet18_fashion_mnist/resnet18_fashion_mnist")
    parser.add_argument("--troupe-elastic", metavar="MIN:MAX",
                        help="Troupe's elastic worker group (see above); default: today's "
                             "whole-group restart")
    parser.add_argument("--troupe-flag", action="append", default=[],
                        help="another flag for Troupe's example (repeat)")
    parser.add_argument("--torchrun", default="torchrun",
                        help="the torchrun command (Debian's torch 1.13: /usr/bin/torchrun)")
    parser.add_argument("--torchrun-nnodes", default="1",
                        help="torchrun's --nnodes (1:4: the elastic form, see above)")
    parser.add_argument("--ray-python",
                        default=os.path.expanduser("~/.cache/troupe-bench-venv/bin/python"),
                        help="the bench virtualenv's python (bash bench/setup_peers.sh)")
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--test-limit", type=int, default=2000,
                        help="test images each evaluation uses (0: all 10,000)")
    parser.add_argument("--netns", action="store_true",
                        help="Troupe across 3 network namespaces (see above; needs root)")
    parser.add_argument("--netns-prefix", default="elb", help="scripts/netns.sh PREFIX")
    parser.add_argument("--troupe-cli", default="bazel-bin/src/cli/troupe",
                        help="--netns: the troupe CLI that starts the nodes")
    parser.add_argument("--keep", action="store_true",
                        help="keep each run's directory (events, logs) under the scratch dir")
    parser.add_argument("--json", metavar="FILE", help="also write a results file (see above)")
    args = parser.parse_args()
    q = args.quick
    args.rounds = args.rounds or (1 if q else 3)
    args.steps = args.steps or (20 if q else 40)
    args.kill_step = args.kill_step or (args.checkpoint_every * 3 // 2)
    args.hang_seconds = args.hang_seconds or (20 if q else 30)
    args.chaos_seconds = args.chaos_seconds or (30 if q else 60)
    args.run_timeout = args.run_timeout or max(600, 900 * args.chaos_epochs)
    if args.troupe_elastic:
        match = re.fullmatch(r"(\d+):(\d+)", args.troupe_elastic)
        if not match or not 0 < int(match.group(1)) <= args.workers <= int(match.group(2)):
            parser.error("--troupe-elastic must be MIN:MAX with 0 < MIN <= --workers (%d) <= "
                         "MAX, got '%s'" % (args.workers, args.troupe_elastic))
        args.troupe_elastic = (int(match.group(1)), int(match.group(2)))
    args.sides = [s for s in args.sides.split(",") if s]
    args.scenarios = ([s for s in args.scenarios.split(",") if s] if args.scenarios else
                      ["node"] if args.netns else [s for s in SCENARIOS if s != "node"])
    for side in args.sides:
        if side not in SIDES:
            parser.error("--sides: unknown side '%s' (of %s)" % (side, ", ".join(SIDES)))
    for scenario in args.scenarios:
        if scenario not in SCENARIOS:
            parser.error("--scenarios: unknown '%s' (of %s)" % (scenario, ", ".join(SCENARIOS)))
    if args.checkpoint_every < 1:
        parser.error("--checkpoint-every must be 1 or more")
    if args.netns:
        if args.sides != ["troupe"]:
            parser.error("--netns runs Troupe only (the peers' multi-node forms are not built): "
                         "add --sides=troupe")
        if args.workers != 3:
            parser.error("--netns has 3 nodes of one worker each: add --workers=3")
        if not os.access(args.troupe_cli, os.X_OK):
            parser.error("%s is not built: bazel build -c opt --config=nocuda //src/cli:troupe" %
                         args.troupe_cli)
    elif "node" in args.scenarios:
        parser.error("--scenarios: 'node' kills a whole node: it needs --netns")
    if args.chaos_epochs < 0:
        parser.error("--chaos-epochs must be 0 (a --chaos-seconds window) or more")
    if not 0 < args.kill_step < args.steps:
        parser.error("--kill-step must be within the run's --steps (1..%d)" % (args.steps - 1))
    if "troupe" in args.sides and not os.access(args.troupe, os.X_OK):
        parser.error("%s is not built: bazel build -c opt --config=nocuda "
                     "//examples/resnet18_fashion_mnist (or leave troupe out of --sides)" %
                     args.troupe)
    if "ray_train" in args.sides and not os.access(args.ray_python, os.X_OK):
        parser.error("%s is missing: bash bench/setup_peers.sh (or leave ray_train out of "
                     "--sides)" % args.ray_python)

    scratch = tempfile.mkdtemp(prefix="elastic-bench-")
    kinds = {"troupe": TroupeNetnsSide if args.netns else TroupeSide,
             "torchrun": TorchrunSide, "ray_train": RaySide}
    sides = [(name, kinds[name](name, args, scratch)) for name in args.sides]
    started, load_before = time.time(), load_average()
    print("ResNet18 on FashionMNIST, %d workers, batch %d per worker, %d steps per run, "
          "checkpoint every %d, fault after step %d; %s; %s; %d round(s); load average before "
          "%.2f" % (args.workers, args.batch_size, args.steps, args.checkpoint_every,
                    args.kill_step, ", ".join(args.scenarios), troupe_mode(args), args.rounds,
                    load_before), flush=True)
    try:
        results, loads = alternate([(name, lambda side=side: run_side(side, args))
                                    for name, side in sides], args.rounds)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    print_table(results, args)
    print("load average (1 min) at each side's start: %s; now %.2f" % (
        ", ".join("%s %d %.2f" % (name, i + 1, load) for i, name, load in loads),
        load_average()))
    if args.keep:
        print("runs kept in %s" % scratch)
    errors = {name: [r["errors"] for r in rounds if "errors" in r]
              for name, rounds in results.items()}
    errors = {name: e for name, e in errors.items() if e}
    if args.json:
        # The node run and the long chaos run are benchmarks of their own (own results files).
        name = ("elastic_bench_netns" if args.netns else
                "elastic_bench_chaos" if args.chaos_epochs else "elastic_bench")
        write_results(args.json, name, result_rows(results, args), started,
                      load_before, args.rounds, quick=args.quick,
                      raw={"rounds": results, "loads": loads, "errors": errors,
                           "settings": {k: getattr(args, k) for k in (
                               "workers", "batch_size", "lr", "steps", "checkpoint_every",
                               "kill_step", "recovery_bound", "hang_seconds", "chaos_seconds",
                               "test_limit",
                               "chaos_interval", "torchrun_nnodes", "troupe_elastic",
                               "troupe_flag")}})
    if errors:
        print("errors: %s" % errors)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
