"""A Troupe cluster across network namespaces for the bench/*.py runners that measure "across
hosts" (collective_bench.py --netns, train_bench.py --netns). Needs root (scripts/netns.sh).

Nodes 1..n are namespaces PREFIXn1..n with addresses 10.99.0.I, each (by default) with its own
/dev/shm, as separate hosts or containers have. Node 1 runs the Troupe head, every other node joins
it the way the head's join_command says (address, token, CA pin). A command run on a node through
exec_args() gets that node's TLS files (TROUPE_TLS_DIR), so drivers and `troupe status` there trust
the cluster. close() stops Troupe, removes the temp dirs and the namespaces.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NETNS = os.path.join(ROOT, "scripts", "netns.sh")
HEAD_PORT = 6380


def run(cmd, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


class NetnsCluster:
    """Namespaces are made in the constructor (SystemExit with the reason if they cannot be);
    start_troupe() starts the nodes and waits until all are ALIVE. Use as a context manager, or
    call close()."""

    def __init__(self, prefix, n, troupe_cli, private_shm=True, num_cpus=2,
                 object_store_memory="256MiB", head_flags=()):
        self.prefix, self.n = prefix, n
        self.troupe = os.path.abspath(troupe_cli)
        self.num_cpus, self.object_store_memory = num_cpus, object_store_memory
        self.head_flags = list(head_flags)  # e.g. ["--tls=off"]; the head's choice is the cluster's
        self.temps, self.token, self.ca_cert_hash = [], "", ""
        check = run([NETNS, "check"])
        if check.returncode != 0:
            raise SystemExit("--netns: " + check.stdout.strip())
        up = run([NETNS, "up", prefix, str(n)] + (["--private-shm"] if private_shm else []))
        if up.returncode != 0:
            run([NETNS, "down", prefix])
            raise SystemExit("--netns: " + up.stderr.strip())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @staticmethod
    def ip(node):
        return "10.99.0.%d" % node

    def address(self):
        return "%s:%d" % (self.ip(1), HEAD_PORT)

    def tls_dir(self, node):
        """Node `node`'s TLS files, or None (before it started, or with --tls=off)."""
        if node > len(self.temps):
            return None
        tls = os.path.join(self.temps[node - 1], "session_latest", "tls")
        return tls if os.path.exists(os.path.join(tls, "ca.pem")) else None

    def exec_args(self, node, env=None):
        """The argv prefix that runs a command on `node` with `env` (plus the node's TLS dir)."""
        env = dict(env or {})
        if self.tls_dir(node):
            env.setdefault("TROUPE_TLS_DIR", self.tls_dir(node))
        return [NETNS, "exec", self.prefix, str(node), "--", "env"] + [
            "%s=%s" % kv for kv in env.items()]

    def driver_env(self):
        """Environment for a driver on any node: the head's address and the token."""
        return {"TROUPE_ADDRESS": self.address(), "TROUPE_TOKEN": self.token}

    def start_troupe(self):
        for node in range(1, self.n + 1):
            temp = tempfile.mkdtemp(prefix="troupe-%s-n%d-" % (self.prefix, node))
            self.temps.append(temp)
            if node == 1:
                cmd = [self.troupe, "start", "--head", "--port=%d" % HEAD_PORT,
                       "--http-port=0"] + self.head_flags
            else:  # what the head's join_command says
                cmd = [self.troupe, "start", "--address=" + self.address(), "--token=" + self.token]
                if self.ca_cert_hash:
                    cmd.append("--ca-cert-hash=" + self.ca_cert_hash)
            cmd += ["--node-ip-address=" + self.ip(node), "--temp-dir=" + temp,
                    "--num-cpus=%g" % self.num_cpus,
                    "--object-store-memory=" + self.object_store_memory]
            started = run(self.exec_args(node) + cmd)
            if started.returncode != 0:
                raise SystemExit(" ".join(cmd) + "\n" + started.stdout + started.stderr)
            if node == 1:
                self._read_head_session(temp)
        self._wait_all_alive(timeout_s=60)

    def _read_head_session(self, temp):
        session = os.path.join(temp, "session_latest")
        with open(os.path.join(session, "token")) as f:
            self.token = f.read().strip()
        join_command = os.path.join(session, "join_command")
        if os.path.exists(join_command):
            with open(join_command) as f:
                pin = re.search(r"--ca-cert-hash=(\S+)", f.read())
            self.ca_cert_hash = pin.group(1) if pin else ""

    def status_command(self):
        """`troupe status --format=json` against the head, to run on a node (exec_args)."""
        return [self.troupe, "status", "--format=json", "--address=" + self.address(),
                "--token=" + self.token]

    def _wait_all_alive(self, timeout_s):
        status = self.status_command()
        deadline = time.monotonic() + timeout_s
        out = None
        while time.monotonic() < deadline:
            out = run(self.exec_args(1) + status)
            if out.returncode == 0 and sum(
                    node["state"] == "ALIVE" for node in json.loads(out.stdout)["nodes"]) == self.n:
                return
            time.sleep(0.2)
        raise SystemExit("the %d Troupe nodes did not all join within %d s%s" % (
            self.n, timeout_s, "" if out is None else ": " + (out.stdout + out.stderr)[-2000:]))

    def close(self):
        for node, temp in enumerate(self.temps, 1):
            run(self.exec_args(node) + [self.troupe, "stop", "--force", "--temp-dir=" + temp])
            shutil.rmtree(temp, ignore_errors=True)
        self.temps = []
        run([NETNS, "down", self.prefix])
