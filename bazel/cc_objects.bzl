"""Linking a cc_library's own objects without its dependencies' (for the SDK's libraries)."""

def _own_objects_impl(ctx):
    infos = []
    for dep in ctx.attr.deps:
        own = [
            linker_input
            for linker_input in dep[CcInfo].linking_context.linker_inputs.to_list()
            if linker_input.owner == dep.label
        ]
        if not own:
            fail("%s links nothing of its own" % dep.label)
        infos.append(CcInfo(linking_context = cc_common.create_linking_context(
            linker_inputs = depset(own),
        )))
    return [cc_common.merge_cc_infos(cc_infos = infos)]

own_objects = rule(
    implementation = _own_objects_impl,
    attrs = {"deps": attr.label_list(providers = [CcInfo])},
    doc = """The objects (archives) of `deps` themselves: neither their headers nor the libraries
    they depend on. //sdk:libtroupe_train.so links the train library's objects so, against
    libtroupe.so for the runtime, instead of compiling the same sources a second time.""",
)
