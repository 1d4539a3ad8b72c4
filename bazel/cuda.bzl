"""Helpers for targets that need CUDA/NCCL."""

load("@local_cuda//:defs.bzl", "CUDA_FOUND")

def cuda_compatible():
    """target_compatible_with for CUDA targets: skipped under --config=nocuda or without a toolkit."""
    if not CUDA_FOUND:
        return ["//bazel:incompatible"]
    return select({
        "//bazel:cuda_off": ["//bazel:incompatible"],
        "//conditions:default": [],
    })
