#!/usr/bin/env python3
"""PyTorch's side of the training-throughput benchmark: the same ResNet18 (1x28x28 input, 10
classes), Adam 1e-3, batch 128 per process, one thread per process, fixed random batches; as one
plain process (--workers 1) or as DDP over gloo with N processes started like torchrun would
(MASTER_ADDR/PORT, RANK, WORLD_SIZE; Debian's torchrun itself is broken). Or, with --rank, this
process is one rank of --workers W meeting at --master-addr (bench/train_bench.py --netns starts
one per network namespace that way; set GLOO_SOCKET_IFNAME there). Rank 0 prints a JSON line
with the global images/s.

With --from-env the rank, world size and meeting point come from torchrun's environment (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as `torchrun` and `troupe train launch` set them), and
--device cuda --backend nccl trains on the GPU that CUDA_VISIBLE_DEVICES leaves first (the GPU
check, scripts/gpu_check.sh, runs it so under `troupe train launch`)."""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torchvision


def make_model():
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return model


def steps(model, warmup, count, device="cpu"):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    torch.manual_seed(0)
    x = torch.randn(128, 1, 28, 28).to(device)
    y = torch.randint(0, 10, (128,)).to(device)
    loss_fn = torch.nn.CrossEntropyLoss()
    for i in range(warmup + count):
        if i == warmup:
            start = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        if device != "cpu" and i + 1 == warmup:
            torch.cuda.synchronize()
    if device != "cpu":
        torch.cuda.synchronize()
    return count * 128 / (time.perf_counter() - start)


def ddp_rate(rank, world, args):
    """Trains as rank `rank` of `world`; returns the global images/s (every rank's, summed)."""
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR=args.master_addr, MASTER_PORT=str(args.port), RANK=str(rank),
                      WORLD_SIZE=str(world))
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(make_model())
    rate = torch.tensor([steps(model, args.warmup, args.steps)], dtype=torch.float64)
    dist.all_reduce(rate)
    dist.destroy_process_group()
    return rate.item()


def env_rate(args):
    """One rank of a torchrun-style launch; returns the global images/s."""
    if args.device == "cuda":
        torch.cuda.set_device(0)  # the first GPU CUDA_VISIBLE_DEVICES leaves
    else:
        torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    model = make_model().to(args.device)
    ids = [0] if args.device == "cuda" else None
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    rate = torch.tensor([steps(model, args.warmup, args.steps, args.device)],
                        dtype=torch.float64, device=args.device)
    dist.all_reduce(rate)
    dist.destroy_process_group()
    return rate.item()


def rank_main(rank, world, args, queue):
    rate = ddp_rate(rank, world, args)
    if rank == 0:
        queue.put(rate)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rank", type=int, default=None,
                        help="be this one rank of --workers (started elsewhere: one per host)")
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=29655)
    parser.add_argument("--from-env", action="store_true",
                        help="rank and world from torchrun's environment (RANK, WORLD_SIZE, ...)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    args = parser.parse_args()
    if args.from_env:
        rate = env_rate(args)
        if int(os.environ.get("RANK", "0")) != 0:
            return
        print(json.dumps({"impl": "torch_ddp_" + args.backend, "device": args.device,
                          "workers": int(os.environ.get("WORLD_SIZE", "1")),
                          "images_per_s": round(rate, 2)}))
        return
    if args.rank is not None:
        rate = ddp_rate(args.rank, args.workers, args)
        if args.rank != 0:
            return
    elif args.workers == 1:
        torch.set_num_threads(1)
        rate = steps(make_model(), args.warmup, args.steps)
    else:
        ctx = mp.get_context("spawn")
        queue = ctx.SimpleQueue()
        procs = [ctx.Process(target=rank_main, args=(r, args.workers, args, queue))
                 for r in range(args.workers)]
        for p in procs:
            p.start()
        rate = queue.get()
        for p in procs:
            p.join()
    impl = "torch" if args.workers == 1 else "torch_ddp_gloo"
    print(json.dumps({"impl": impl, "workers": args.workers, "images_per_s": round(rate, 2)}))


if __name__ == "__main__":
    main()
