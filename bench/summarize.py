#!/usr/bin/env python3
"""Turns one run's results files (bench/results/<date>/*.json, written by the bench programs'
--json, format in bench/bench_common.py) into the tables that docs/benchmarks.md and README.md
quote, so that every figure quoted is one a committed results file shows.

  python3 bench/summarize.py bench/results/2026-11-27            # print the tables (markdown)
  python3 bench/summarize.py bench/results/2026-11-27 --write    # also rewrite the generated
      parts of docs/benchmarks.md (between <!-- summary:begin --> and <!-- summary:end -->) and
      README.md (between <!-- bench-figures:begin --> and <!-- bench-figures:end -->)

The summary has, per benchmark, one row per metric: Troupe's median, each peer's median and
Troupe's advantage over it (median of the per-round ratios [min-max]; above 1: Troupe is better),
then the known gaps: every metric where Troupe is below 3x Ray's Python API or below 2x Ray's C++
API, with the cause profiling found (bench/known_gaps.json: metric -> cause) or "not profiled
yet". A quick run (--quick) or a loaded machine is said in the heading; README's figures come only
from a full run (--write refuses a quick one).
"""
import argparse
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench_common import PEER_NAMES  # noqa: E402

# The order benchmarks appear in, and their titles.
BENCHES = [
    ("microbenchmark", "Tasks and objects (Ray's own `ray microbenchmark` workloads)"),
    ("cluster_start", "Cluster start-up"),
    ("collective_bench", "Collectives on one host"),
    ("collective_bench_netns", "Collectives across hosts (network namespaces)"),
    ("train_bench", "Training throughput (ResNet18, CPU)"),
    ("elastic_bench", "Training through worker failures (ResNet18, CPU, 4 workers)"),
    ("elastic_bench_netns", "Training through a node's death (ResNet18, CPU, 3 nodes in network "
                            "namespaces)"),
    ("elastic_bench_chaos", "Training under long chaos (ResNet18, CPU, 4 workers, 2 epochs)"),
    ("transfer_bench", "Cross-node object transfer (network namespaces)"),
    ("reconstruction_bench", "Node death to a reconstructed object"),
    ("gcs_ft_bench", "GCS fault tolerance on Redis"),
    ("scale_bench", "Scale envelope"),
    ("tls_bench", "TLS cost"),
]
# Known-gap thresholds: Troupe's advantage below these is listed as a gap.
GAP_THRESHOLDS = {"ray_python": 3.0, "ray_cpp": 2.0}
# README quotes these (Ray's Python and C++ APIs), as ranges over the full run's rounds.
README_METRICS = ["single_client_tasks_sync", "single_client_tasks_async",
                  "1_1_actor_calls_sync", "1_1_actor_calls_async", "n_n_actor_calls_async",
                  "single_client_put_calls", "single_client_get_calls"]


def load(run_dir):
    """{bench: results document} for every *.json in run_dir."""
    docs = {}
    for path in sorted(glob.glob(os.path.join(run_dir, "*.json"))):
        with open(path) as f:
            doc = json.load(f)
        if not isinstance(doc, dict) or "rows" not in doc or "bench" not in doc:
            raise SystemExit("%s is not a results file (no 'bench' and 'rows'): written by an "
                             "older bench program? Re-run it with --json." % path)
        docs[doc["bench"]] = doc
    if not docs:
        raise SystemExit("no results files (*.json) in %s: run bash bench/run_all.sh first" %
                         run_dir)
    return docs


def number(value):
    if value is None:
        return "-"
    magnitude = abs(value)
    if magnitude >= 1000:
        return "{:,.0f}".format(value)
    if magnitude >= 100:
        return "%.0f" % value
    if magnitude >= 10:
        return "%.1f" % value
    return "%.3g" % value


def ratio_text(ratio):
    if not ratio:
        return "-"
    median, low, high, rounds = ratio
    if rounds < 2:
        return "%.2fx (1 round)" % median
    return "%.2fx [%.2f-%.2f]" % (median, low, high)


def bench_table(doc):
    """A markdown table for one results document."""
    peers = []
    for row in doc["rows"]:
        for peer in list(row["peers"]) + list(row["ratios"]):
            if peer not in peers:
                peers.append(peer)
    header = ["metric", "unit", "Troupe"]
    for peer in peers:
        header += [PEER_NAMES.get(peer, peer), "Troupe's advantage"]
    header.append("note")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in doc["rows"]:
        cells = [row["metric"], row["unit"] + ("" if row["higher_is_better"] else " (lower is "
                                               "better)"), number(row["troupe"])]
        for peer in peers:
            cells += [number(row["peers"].get(peer)), ratio_text(row["ratios"].get(peer))]
        cells.append(note_with_failures(row).replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def note_with_failures(row):
    """The row's note, and, where some side's trials failed (a row's "failed_kills"), how many
    trials each side's figure comes from and how many failed: a median of the trials that worked
    must not hide those that did not."""
    note = row.get("note", "")
    failed = row.get("failed_kills") or {}
    if not any(failed.values()):
        return note
    trials = row.get("trials") or {}
    parts = ["%s %d of %d" % (side, trials.get(side, 0), trials.get(side, 0) + failed.get(side, 0))
             for side in sorted(set(trials) | set(failed))]
    return "%s; figures from the trials that recovered (%s)" % (note, ", ".join(parts))


def heading(doc):
    flags = []
    busy = doc.get("busy_before")
    busy_text = ("CPUs busy just before: %.2f, " % busy) if busy is not None else ""
    if doc.get("quick"):
        flags.append("QUICK RUN, not for quoting")
    if doc.get("loaded"):
        flags.append("LOADED MACHINE (%sload average %.2f before it started), not for quoting" %
                     (busy_text, doc.get("load_before", 0)))
    return "%s to %s, %s round(s), %sload average before: %.2f%s" % (
        doc.get("started", "?"), doc.get("finished", "?"), doc.get("rounds", "?"), busy_text,
        doc.get("load_before", 0), (" — " + "; ".join(flags)) if flags else "")


def known_gaps(docs, causes):
    lines = []
    for bench, doc in docs.items():
        for row in doc["rows"]:
            for peer, threshold in GAP_THRESHOLDS.items():
                ratio = row["ratios"].get(peer)
                if ratio and ratio[0] < threshold:
                    cause = causes.get(row["metric"], "not profiled yet")
                    lines.append("- **%s** (%s): %s against %s (below %gx). Cause: %s" % (
                        row["metric"], bench, ratio_text(ratio), PEER_NAMES[peer], threshold,
                        cause))
    return lines


def summary(run_dir, docs, causes):
    out = ["Generated by `python3 bench/summarize.py %s --write` from the results files in "
           "`%s` (raw figures: each file's `raw`). Troupe's side runs through its C++ API; "
           "\"Ray (Python API)\" is Ray 2.60.0 through its Python API, \"Ray (C++ API)\" the "
           "`ray-cpp` 2.60.0 wheel. Troupe's advantage is the median of the per-round ratios "
           "[min-max] (above 1: Troupe better; for times, the peer's time over Troupe's)." %
           (os.path.relpath(run_dir, ROOT), os.path.relpath(run_dir, ROOT)), ""]
    machine = run_machine(run_dir)
    if machine:
        out += ["Machine: " + machine, ""]
    gaps = known_gaps(docs, causes)
    out.append("### Known gaps (below 3x Ray's Python API or 2x Ray's C++ API)")
    out.append("")
    out += gaps or ["- none in this run"]
    out.append("")
    titles = dict(BENCHES)
    for bench in [b for b, _ in BENCHES if b in docs] + sorted(set(docs) - set(titles)):
        doc = docs[bench]
        out += ["### %s (`%s`)" % (titles.get(bench, bench), bench), "", heading(doc), "",
                bench_table(doc), ""]
    return "\n".join(out).rstrip() + "\n"


def run_machine(run_dir):
    """machine.txt, which bench/run_all.sh writes beside the results (CPU, cores, memory, OS,
    the peers' versions, the run's wall time and load)."""
    path = os.path.join(run_dir, "machine.txt")
    if not os.path.exists(path):
        return ""
    with open(path) as f:
        return "; ".join(line.strip() for line in f if line.strip())


def readme_figures(run_dir, docs):
    doc = docs.get("microbenchmark")
    if not doc:
        return None
    rows = {row["metric"]: row for row in doc["rows"]}
    parts = []
    for metric in README_METRICS:
        row = rows.get(metric)
        if not row:
            continue
        cells = []
        for peer in ("ray_python", "ray_cpp"):
            ratio = row["ratios"].get(peer)
            if ratio:
                cells.append("%.1f-%.1fx %s" % (ratio[1], ratio[2], "Ray Python" if
                                                 peer == "ray_python" else "Ray C++"))
        if cells:
            parts.append("`%s` %s" % (metric, ", ".join(cells)))
    if not parts:
        return None
    low = min(r["ratios"]["ray_python"][1] for r in doc["rows"] if "ray_python" in r["ratios"])
    high = max(r["ratios"]["ray_python"][2] for r in doc["rows"] if "ray_python" in r["ratios"])
    return ("- On Ray's own microbenchmark workloads, run side by side (Troupe through its C++ "
            "API; Ray 2.60.0 through its Python API and through its C++ API), the last full run "
            "(`%s`, %s, %d rounds, min-max over the rounds) gives Troupe %.1f-%.1fx Ray "
            "Python's throughput across all its metrics; for example: %s. Gaps and every other "
            "figure: `docs/benchmarks.md`.\n" % (
                os.path.relpath(run_dir, ROOT), doc.get("started", "?")[:10], doc.get("rounds", 0),
                low, high, "; ".join(parts)))


def replace_between(path, begin, end, text):
    with open(path) as f:
        content = f.read()
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(content):
        raise SystemExit("%s has no %s ... %s block to rewrite" % (path, begin, end))
    content = pattern.sub(lambda _: begin + "\n" + text + end, content)
    with open(path, "w") as f:
        f.write(content)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a bench/results/<date> directory")
    parser.add_argument("--write", action="store_true",
                        help="rewrite the generated parts of docs/benchmarks.md and README.md")
    parser.add_argument("--causes", default=os.path.join(HERE, "known_gaps.json"),
                        help="metric -> the cause profiling found, for the known gaps")
    parser.add_argument("--root", default=ROOT, help="the checkout whose docs --write rewrites")
    args = parser.parse_args()
    docs = load(args.run_dir)
    causes = {}
    if os.path.exists(args.causes):
        with open(args.causes) as f:
            causes = json.load(f)
    text = summary(args.run_dir, docs, causes)
    print(text)
    if args.write:
        if any(doc.get("quick") for doc in docs.values()):
            raise SystemExit("refusing --write: %s holds quick-run results (not for quoting); "
                             "run bash bench/run_all.sh without --quick" % args.run_dir)
        replace_between(os.path.join(args.root, "docs", "benchmarks.md"), "<!-- summary:begin -->",
                        "<!-- summary:end -->", text)
        figures = readme_figures(args.run_dir, docs)
        if figures:
            replace_between(os.path.join(args.root, "README.md"), "<!-- bench-figures:begin -->",
                            "<!-- bench-figures:end -->", figures)


if __name__ == "__main__":
    main()
