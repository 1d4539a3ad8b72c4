"""troupe_proto_library: protoc + grpc_cpp_plugin from Debian, run by a genrule."""

def troupe_proto_library(name, srcs, deps = [], visibility = None):
    """C++ message and gRPC service code for `srcs` (proto/*.proto), as a cc_library."""
    stems = [s[:-len(".proto")] for s in srcs]
    outs = []
    for stem in stems:
        outs += [stem + ".pb.h", stem + ".pb.cc", stem + ".grpc.pb.h", stem + ".grpc.pb.cc"]
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = ("/usr/bin/protoc -I. --cpp_out=$(GENDIR) --grpc_out=$(GENDIR) " +
               "--plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin " +
               " ".join(["$(location %s)" % s for s in srcs])),
    )
    native.filegroup(name = name + "_srcs", srcs = srcs, visibility = visibility)
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["//third_party:grpc"],
        visibility = visibility,
    )
