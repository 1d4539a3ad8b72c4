"""Finds the CUDA toolkit (with NCCL) at build time, without downloading anything.

Creates the repository @local_cuda with:
  //:cuda      cc_library over the toolkit's headers, cudart and NCCL (empty when not found)
  defs.bzl     CUDA_FOUND = True/False
The toolkit is looked up at $TROUPE_CUDA_PATH, then /usr/local/cuda. Targets that need it use
cuda_compatible() from //bazel:cuda.bzl so they are skipped, not broken, on machines without it.
"""

def _cuda_configure_impl(ctx):
    path = ctx.os.environ.get("TROUPE_CUDA_PATH", "/usr/local/cuda")
    found = (ctx.path(path + "/include/cuda_runtime.h").exists and
             ctx.path(path + "/include/nccl.h").exists)
    if found:
        ctx.symlink(path + "/include", "include")
        ctx.symlink(path + "/lib64", "lib64")
        build = """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "cuda",
    hdrs = glob(["include/**"]),
    includes = ["include"],
    linkopts = ["-L{path}/lib64", "-Wl,-rpath,{path}/lib64", "-lnccl", "-lcudart"],
)
""".format(path = path)
    else:
        build = """
package(default_visibility = ["//visibility:public"])
cc_library(name = "cuda")
"""
    ctx.file("BUILD", build)
    ctx.file("WORKSPACE", "")
    ctx.file("defs.bzl", "CUDA_FOUND = %s\nCUDA_PATH = %r\n" % (found, path))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["TROUPE_CUDA_PATH"],
    local = True,
)
