"""Shared by the bench/*.py runners: run one side of a benchmark and read what it printed."""
import json
import subprocess
import sys


def json_lines(command, env=None):
    """Runs `command` (with `env`, default: this process's environment) and returns the JSON
    objects it printed, one per line. If it fails, prints the end of its stderr and exits."""
    out = subprocess.run(command, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.stderr.write(out.stderr[-3000:])
        raise SystemExit("%s failed with %d" % (" ".join(command), out.returncode))
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip().startswith("{")]
