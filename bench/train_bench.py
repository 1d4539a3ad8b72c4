#!/usr/bin/env python3
"""Training throughput, side by side in one run (ResNet18 on FashionMNIST-shaped batches, batch
128 per worker, Adam 1e-3, one thread per worker, CPU):

  (a) 1 Troupe worker (DataParallelTrainer)   vs  a plain single-process LibTorch loop
  (b) 2 Troupe workers                        vs  PyTorch DDP, gloo, 2 processes

  bazel build -c opt --config=nocuda //bench:train_bench
  python3 bench/train_bench.py            # /usr/bin/python3 with Debian's python3-torch

Each configuration runs --repeats times, alternating, and the median is reported.
"""
import argparse
import os
import statistics

from bench_common import json_lines

HERE = os.path.dirname(os.path.abspath(__file__))


def rate(command):
    return json_lines(command)[-1]["images_per_s"]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--troupe", default="bazel-bin/bench/train_bench")
    parser.add_argument("--python", default="/usr/bin/python3")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    common = ["--steps=%d" % args.steps]
    configs = {
        "libtorch plain, 1 process": [args.troupe, "--mode=plain"] + common,
        "troupe, 1 worker": [args.troupe, "--mode=troupe", "--workers=1"] + common,
        "torch DDP gloo, 2 processes": [args.python, os.path.join(HERE, "ddp_bench.py"),
                                        "--workers", "2", "--steps", str(args.steps)],
        "troupe, 2 workers": [args.troupe, "--mode=troupe", "--workers=2"] + common,
    }
    samples = {name: [] for name in configs}
    for _ in range(args.repeats):
        for name, command in configs.items():
            samples[name].append(rate(command))
    median = {name: statistics.median(values) for name, values in samples.items()}
    for name, values in samples.items():
        print("%-30s %8.1f img/s  (runs: %s)" % (name, median[name],
                                                 ", ".join("%.1f" % v for v in values)))
    print("(a) troupe 1 worker / plain libtorch: %.3fx" % (
        median["troupe, 1 worker"] / median["libtorch plain, 1 process"]))
    print("(b) troupe 2 workers / torch DDP gloo: %.3fx" % (
        median["troupe, 2 workers"] / median["torch DDP gloo, 2 processes"]))


if __name__ == "__main__":
    main()
