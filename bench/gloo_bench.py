#!/usr/bin/env python3
"""PyTorch gloo's side of the collective benchmark: the same operations, sizes, dtype (f32) and
rank counts as bench/collective_bench.cc, one JSON object per line. Ranks are processes on this
machine (torch.multiprocessing), rendezvous over loopback TCP; or, with --rank, this process is
one rank of --ranks W meeting at --master-addr (bench/collective_bench.py --netns starts one per
network namespace that way), and rank 0 prints.

torch 1.13 (Debian) has no reduce_scatter in gloo: that row is measured the way a gloo user has to
do it, all_reduce of the whole input then keeping the own block, and marked "emulated".
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def sizes(args):
    out, b = [], args.min_bytes
    while b <= args.max_bytes:
        out.append(b)
        b *= args.factor
    if args.extra_bytes > 0:
        out.append(args.extra_bytes)
    return sorted(out)


def member(rank, world, args, port, queue):
    os.environ["MASTER_ADDR"] = args.master_addr
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    lines = []
    for op in args.ops:
        for nbytes in sizes(args):
            count = nbytes // 4
            block = count // world
            a = torch.ones(count)
            outs = [torch.zeros(block) for _ in range(world)]
            mine = torch.ones(block)

            def once():
                if op == "allreduce":
                    dist.all_reduce(a)
                elif op == "allgather":
                    dist.all_gather(outs, mine)
                else:  # emulated: all-reduce everything, keep this rank's block
                    dist.all_reduce(a)
                    a[rank * block:(rank + 1) * block].clone()

            once()
            dist.barrier()
            start = time.perf_counter()
            once()
            estimate = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
            dist.broadcast(estimate, 0)
            iterations = int(min(max(args.seconds / max(estimate.item(), 1e-7), 3), 100000))
            dist.barrier()
            cpu_start = time.process_time()
            start = time.perf_counter()
            for _ in range(iterations):
                once()
            elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
            # CPU time per operation, averaged over the ranks (all of the process's threads).
            cpu = torch.tensor([time.process_time() - cpu_start], dtype=torch.float64)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
            dist.all_reduce(cpu)
            per_op = elapsed.item() / iterations
            algbw = nbytes / per_op / 1e9
            bus = (2.0 if op == "allreduce" else 1.0) * (world - 1) / world
            lines.append(json.dumps({
                "impl": "gloo", "op": op, "ranks": world, "bytes": nbytes,
                "time_us": round(per_op * 1e6, 2), "algbw_gbps": round(algbw, 4),
                "busbw_gbps": round(algbw * bus, 4),
                "cpu_us_per_member": round(cpu.item() / world / iterations * 1e6, 2),
                **({"note": "emulated (all_reduce + slice)"} if op == "reduce_scatter" else {})}))
    if rank == 0 and queue is not None:
        queue.put("\n".join(lines))
    elif rank == 0:
        print("\n".join(lines), flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--min-bytes", type=int, default=1024)
    parser.add_argument("--max-bytes", type=int, default=256 << 20)
    parser.add_argument("--factor", type=int, default=4)
    parser.add_argument("--extra-bytes", type=int, default=45 << 20)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--ranks", type=int, nargs="*", default=[2, 4])
    parser.add_argument("--ops", nargs="*", default=["allreduce", "allgather", "reduce_scatter"])
    parser.add_argument("--rank", type=int, default=-1,
                        help="be this one rank of --ranks W (started elsewhere), not all of them")
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="default: 29600 + world size")
    args = parser.parse_args()
    if args.rank >= 0:
        world = args.ranks[0]
        member(args.rank, world, args, args.port or 29600 + world, None)
        return
    ctx = mp.get_context("spawn")
    for world in args.ranks:
        queue = ctx.SimpleQueue()
        port = args.port or 29600 + world
        procs = [ctx.Process(target=member, args=(r, world, args, port, queue)) for r in range(world)]
        for p in procs:
            p.start()
        print(queue.get(), flush=True)
        for p in procs:
            p.join()
            if p.exitcode != 0:
                sys.exit("gloo rank exited with %d" % p.exitcode)


if __name__ == "__main__":
    main()
