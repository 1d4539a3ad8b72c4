#!/usr/bin/env python3
"""The peers' side of bench/elastic_bench.py: the workload of examples/resnet18_fashion_mnist
(ResNet18 with a 1-channel conv1 and 10 classes, as torchvision builds it; FashionMNIST from
Debian's dataset-fashion-mnist, normalised as the example does; each rank's shard of a seeded
shuffle, as troupe::train::DistributedSampler and torch's DistributedSampler cut it; Adam; one
thread per worker), run by torchrun or by Ray Train, each the way its documentation runs a fault
tolerant job:

  torchrun (a worker script; torchrun restarts every worker after a failure, and the script
  resumes from its own checkpoint, written every --checkpoint-every steps; --redirects and --tee
  as bench/elastic_bench.py explains):
    torchrun --nnodes=1 --nproc_per_node=4 --max_restarts=100 --rdzv_backend=c10d \\
        --rdzv_endpoint=localhost:29400 --rdzv_id=run1 --redirects=4:3 --tee=4:3 \\
        bench/elastic_peer_train.py torchrun --checkpoint-dir=/tmp/ckpt --events=/tmp/ev [...]

  Ray Train (this process is the driver: ray.init, then TorchTrainer with a FailureConfig; the
  workers report a checkpoint every --checkpoint-every steps with ray.train.report and resume
  from ray.train.get_checkpoint() after Ray Train restarts the worker group):
    ~/.cache/troupe-bench-venv/bin/python bench/elastic_peer_train.py ray \\
        --storage-path=/tmp/ray_results --events=/tmp/ev [...]

Both write the events file of examples/fashion_mnist (see fashion_mnist.h): every rank appends
"worker t= rank= world= pid= gen=" when it starts, rank 0 "step t= step= samples= world= gen="
per committed optimizer step and "eval t= step= accuracy= gen=" after the evaluation on the test
set; gen names one run of the train function (a restart runs it again).
Needs torch only (no torchvision, no numpy), so the Ray virtualenv can use Debian's torch (bench/
setup_peers.sh exposes it there).
"""
import argparse
import gzip
import os
import struct
import sys
import tempfile
import time

MEAN, STD = 0.28604, 0.32025  # examples/fashion_mnist/fashion_mnist.h


def event(path, kind, **fields):
    """Appends "<kind> t=<unix time> k=v ..." to `path` in one O_APPEND write (lines of several
    processes never interleave)."""
    if not path:
        return
    line = "%s t=%.6f %s\n" % (kind, time.time(), " ".join("%s=%s" % kv for kv in fields.items()))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def load_split(data_dir, prefix):
    """The IDX files `<prefix>-images-idx3-ubyte.gz` / `-labels-idx1-ubyte.gz`: (uint8 images
    [N, 1, 28, 28], int64 labels [N])."""
    import torch
    images_path = os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz")
    labels_path = os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz")
    with gzip.open(images_path) as f:
        images = f.read()
    with gzip.open(labels_path) as f:
        labels = f.read()
    magic, n, rows, cols = struct.unpack(">IIII", images[:16])
    if magic != 2051 or rows != 28 or cols != 28 or len(images) != 16 + n * 784:
        raise SystemExit("%s: not a 28x28 IDX image file" % images_path)
    if struct.unpack(">II", labels[:8]) != (2049, n) or len(labels) != 8 + n:
        raise SystemExit("%s: does not match %s" % (labels_path, images_path))
    x = torch.frombuffer(bytearray(images[16:]), dtype=torch.uint8).view(n, 1, 28, 28)
    y = torch.frombuffer(bytearray(labels[8:]), dtype=torch.uint8).to(torch.int64)
    return x, y


def normalise(images):
    return (images.float() / 255 - MEAN) / STD


def make_model():
    """torchvision.models.resnet18(num_classes=10) with conv1 = Conv2d(1, 64, 7, 2, 3, no bias),
    written out (same modules, same initialisation) so that only torch is needed."""
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, inplanes, planes, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = None
            if stride != 1 or inplanes != planes:
                self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                                nn.BatchNorm2d(planes))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + identity)

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            layers, inplanes = [], 64
            for i, planes in enumerate((64, 128, 256, 512)):
                stride = 1 if i == 0 else 2
                layers.append(nn.Sequential(BasicBlock(inplanes, planes, stride),
                                            BasicBlock(planes, planes, 1)))
                inplanes = planes
            self.layer1, self.layer2, self.layer3, self.layer4 = layers
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(512, 10)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(self.avgpool(x).flatten(1))

    return ResNet18()


def shard(n, rank, world, seed, epoch):
    """This rank's indices of epoch `epoch`: torch's DistributedSampler (a permutation seeded
    with seed + epoch, padded to a multiple of world by wrapping, every world-th from rank)."""
    import torch
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    order = torch.randperm(n, generator=g)
    per_rank = (n + world - 1) // world
    order = torch.cat([order, order[:per_rank * world - n]])
    return order[rank::world]


def train(cfg, rank, world, wrap, load_state, save_state):
    """The train loop both launchers run. wrap(model) -> the DDP model; load_state() -> the
    checkpointed state or None; save_state(state) checkpoints it (every rank calls it; rank 0's
    state is the one kept)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    torch.set_num_threads(1)
    torch.manual_seed(cfg["seed"])
    x, y = load_split(cfg["data_dir"], "train")
    test_x, test_y = load_split(cfg["data_dir"], "t10k")
    if cfg["test_limit"] > 0:
        test_x, test_y = test_x[:cfg["test_limit"]], test_y[:cfg["test_limit"]]
    module = make_model()
    model = wrap(module)
    optimizer = torch.optim.Adam(module.parameters(), lr=cfg["lr"])
    start_epoch = start_batch = step = samples = 0
    state = load_state()
    if state is not None:
        module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch, start_batch = state["epoch"], state["batch"]
        step, samples = state["step"], state["samples"]
    gen = "%d-%d" % (os.getpid(), int(time.time() * 1000))
    event(cfg["events"], "worker", rank=rank, world=world, pid=os.getpid(), gen=gen)

    def state_now(epoch, batch):
        return {"model": module.state_dict(), "optimizer": optimizer.state_dict(),
                "epoch": epoch, "batch": batch, "step": step, "samples": samples}

    batch_size, every = cfg["batch_size"], cfg["checkpoint_every"]
    for epoch in range(start_epoch, cfg["epochs"]):
        mine = shard(len(x), rank, world, cfg["seed"], epoch)
        batches = [mine[i:i + batch_size] for i in range(0, len(mine), batch_size)]
        if cfg["limit_batches"] > 0:
            batches = batches[:cfg["limit_batches"]]
        model.train()
        for b in range(start_batch if epoch == start_epoch else 0, len(batches)):
            index = batches[b]
            loss = F.cross_entropy(model(normalise(x[index])), y[index])
            optimizer.zero_grad()
            loss.backward()  # DDP all-reduces the gradients here
            optimizer.step()
            step += 1  # committed: every rank has the averaged gradients and has stepped
            samples += len(index) * world
            if rank == 0:
                event(cfg["events"], "step", step=step, samples=samples, world=world, gen=gen)
            if every > 0 and step % every == 0 and b + 1 < len(batches):
                save_state(state_now(epoch, b + 1))
        # Test: each rank takes every world-th 1000 images; the sums are all-reduced.
        module.eval()
        sums = torch.zeros(2, dtype=torch.float64)
        with torch.no_grad():
            for begin in range(rank * 1000, len(test_x), world * 1000):
                logits = module(normalise(test_x[begin:begin + 1000]))
                sums[0] += (logits.argmax(1) == test_y[begin:begin + 1000]).sum().item()
                sums[1] += len(logits)
        dist.all_reduce(sums)
        if rank == 0:
            event(cfg["events"], "eval", step=step, accuracy="%.6f" % (sums[0] / sums[1]).item(),
                  gen=gen)
        save_state(state_now(epoch + 1, 0))


# --- torchrun ---

def torchrun_main(cfg, checkpoint_dir):
    """One worker under torchrun: rank and world from its environment, gloo, DDP; the checkpoint
    is one file that rank 0 replaces atomically and every rank reads at start."""
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    path = os.path.join(checkpoint_dir, "latest.pt")

    def load_state():
        return torch.load(path) if os.path.exists(path) else None

    def save_state(state):
        if rank == 0:
            tmp = path + ".tmp"
            torch.save(state, tmp)
            os.replace(tmp, path)

    train(cfg, rank, world, torch.nn.parallel.DistributedDataParallel, load_state, save_state)
    dist.destroy_process_group()


# --- Ray Train ---

def ray_train_func(cfg):
    """The train function of TorchTrainer: Ray Train has set up torch.distributed (gloo); the
    checkpoint goes through ray.train.report / ray.train.get_checkpoint."""
    import torch
    import ray.train
    import ray.train.torch
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()

    def load_state():
        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            return None
        with checkpoint.as_directory() as directory:
            return torch.load(os.path.join(directory, "state.pt"))

    def save_state(state):
        with tempfile.TemporaryDirectory() as directory:
            checkpoint = None
            if rank == 0:
                torch.save(state, os.path.join(directory, "state.pt"))
                checkpoint = ray.train.Checkpoint.from_directory(directory)
            ray.train.report({"step": state["step"], "epoch": state["epoch"]},
                             checkpoint=checkpoint)

    train(cfg, rank, world, ray.train.torch.prepare_model, load_state, save_state)


def ray_main(cfg, args):
    import ray
    import ray.train
    from ray.train.torch import TorchTrainer
    ray.init(num_cpus=args.workers, _temp_dir=args.ray_temp_dir)
    trainer = TorchTrainer(
        ray_train_func, train_loop_config=cfg,
        scaling_config=ray.train.ScalingConfig(num_workers=args.workers, use_gpu=False),
        run_config=ray.train.RunConfig(
            name=args.name, storage_path=args.storage_path,
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=2),
            failure_config=ray.train.FailureConfig(max_failures=args.max_failures)))
    result = trainer.fit()
    print("done: %s" % (result.metrics,))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("launcher", choices=["torchrun", "ray"])
    parser.add_argument("--events", default="", help="the events file (see above)")
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--batch-size", type=int, default=16, help="per worker")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--limit-batches", type=int, default=0,
                        help="batches per epoch per worker (0: all)")
    parser.add_argument("--checkpoint-every", type=int, default=20,
                        help="steps between checkpoints within an epoch (0: at its end only)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test-limit", type=int, default=0,
                        help="test images to evaluate on (0: all 10,000)")
    parser.add_argument("--checkpoint-dir", help="torchrun: where the checkpoint file goes")
    parser.add_argument("--workers", type=int, default=4, help="ray: TorchTrainer's num_workers")
    parser.add_argument("--max-failures", type=int, default=100,
                        help="ray: FailureConfig(max_failures)")
    parser.add_argument("--storage-path", help="ray: RunConfig(storage_path)")
    parser.add_argument("--name", default="elastic", help="ray: RunConfig(name)")
    parser.add_argument("--ray-temp-dir", default=None, help="ray: ray.init(_temp_dir)")
    args = parser.parse_args()
    if args.checkpoint_every < 0:
        parser.error("--checkpoint-every must be 0 or more")
    cfg = {"events": os.path.abspath(args.events) if args.events else "",
           "data_dir": args.data_dir, "batch_size": args.batch_size, "lr": args.lr,
           "epochs": args.epochs, "limit_batches": args.limit_batches,
           "checkpoint_every": args.checkpoint_every, "seed": args.seed,
           "test_limit": args.test_limit}
    if args.launcher == "torchrun":
        if not args.checkpoint_dir:
            parser.error("torchrun needs --checkpoint-dir")
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        torchrun_main(cfg, args.checkpoint_dir)
    else:
        if not args.storage_path:
            parser.error("ray needs --storage-path")
        ray_main(cfg, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
