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

def if_cuda(if_true, if_false = []):
    """`if_true` in builds with CUDA (toolkit found, not --config=nocuda), else `if_false`."""
    if not CUDA_FOUND:
        return if_false
    return select({
        "//bazel:cuda_off": if_false,
        "//conditions:default": if_true,
    })
