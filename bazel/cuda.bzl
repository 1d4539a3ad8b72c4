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

def _link_only_impl(ctx):
    return [CcInfo(linking_context = ctx.attr.dep[CcInfo].linking_context)]

link_only = rule(
    implementation = _link_only_impl,
    attrs = {"dep": attr.label(providers = [CcInfo])},
    doc = """`dep`'s libraries and link options without its headers or include paths, for the
    CUDA backends that :collective links in CUDA builds. A plain dependency would hand the
    toolkit's include path and thousands of its headers to every target that depends on
    :collective, changing their compile commands between the CUDA and the nocuda build, so that
    the test run (which builds both) compiled them twice. Code that includes CUDA headers depends
    on the CUDA targets themselves.""",
)
