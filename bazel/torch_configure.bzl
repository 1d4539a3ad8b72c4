"""Finds LibTorch at build time, without downloading anything.

Creates the repository @local_torch with //:torch, a cc_library over LibTorch's headers and
libraries. Default: Debian's libtorch-dev (CPU; headers under /usr/include, libraries on the
default path). With $TROUPE_LIBTORCH_DIR set to an unpacked LibTorch distribution (e.g. a CUDA
build from pytorch.org: include/, lib/), that one is used instead, with an rpath to its lib/.
"""

def _torch_configure_impl(ctx):
    custom = ctx.os.environ.get("TROUPE_LIBTORCH_DIR", "")
    if custom:
        ctx.symlink(custom + "/include", "include")
        build = """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "torch",
    hdrs = glob(["include/**/*.h"]),
    includes = ["include", "include/torch/csrc/api/include"],
    linkopts = ["-L{path}/lib", "-Wl,-rpath,{path}/lib", "-Wl,--no-as-needed",
                "-ltorch", "-ltorch_cpu", "-lc10"] +
               (["-ltorch_cuda", "-lc10_cuda"] if {cuda} else []) + ["-Wl,--as-needed"],
)
""".format(path = custom, cuda = ctx.path(custom + "/lib/libtorch_cuda.so").exists)
    else:
        ctx.symlink("/usr/include/torch/csrc/api/include", "api_include")
        build = """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "torch",
    hdrs = glob(["api_include/torch/**/*.h"]),
    includes = ["api_include"],
    linkopts = ["-ltorch", "-ltorch_cpu", "-lc10"],
)
"""
    ctx.file("BUILD", build)
    ctx.file("WORKSPACE", "")

torch_configure = repository_rule(
    implementation = _torch_configure_impl,
    environ = ["TROUPE_LIBTORCH_DIR"],
    local = True,
)
