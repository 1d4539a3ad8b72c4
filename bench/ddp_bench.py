#!/usr/bin/env python3
"""PyTorch's side of the training-throughput benchmark: the same ResNet18 (1x28x28 input, 10
classes), Adam 1e-3, batch 128 per process, one thread per process, fixed random batches; as one
plain process (--workers 1) or as DDP over gloo with N processes started like torchrun would
(MASTER_ADDR/PORT, RANK, WORLD_SIZE; Debian's torchrun itself is broken). Prints a JSON line with
the global images/s."""
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


def steps(model, warmup, count):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    torch.manual_seed(0)
    x = torch.randn(128, 1, 28, 28)
    y = torch.randint(0, 10, (128,))
    loss_fn = torch.nn.CrossEntropyLoss()
    for i in range(warmup + count):
        if i == warmup:
            start = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    return count * 128 / (time.perf_counter() - start)


def rank_main(rank, world, args, queue):
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29655", RANK=str(rank),
                      WORLD_SIZE=str(world))
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(make_model())
    rate = torch.tensor([steps(model, args.warmup, args.steps)], dtype=torch.float64)
    dist.all_reduce(rate)
    if rank == 0:
        queue.put(rate.item())
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    if args.workers == 1:
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
