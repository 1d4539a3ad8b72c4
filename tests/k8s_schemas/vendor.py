"""Regenerates the Kubernetes JSON schemas tests/k8s_manifests_test.py validates against, from the
kubernetes-validate package (PyPI; it bundles the schemas of each Kubernetes release, made from
Kubernetes' OpenAPI documents). The test runs offline: it reads only the files written here.

  python3 -m venv /tmp/kv && /tmp/kv/bin/pip install kubernetes-validate==1.37.0
  /tmp/kv/bin/python tests/k8s_schemas/vendor.py /tmp/kv/lib/python3*/site-packages/kubernetes_validate

For each Kubernetes version in VERSIONS it writes kubernetes-<version>.json: the strict schema of
each kind in KINDS (no property a release does not know) and every definition those reach, with
descriptions removed, as one self-contained JSON Schema (draft 2020-12) document:
  {"$schema": ..., "kinds": {"apps/v1 Deployment": "<def name>", ...}, "$defs": {...}}
Add a kind here (and rerun) when deploy/kubernetes starts using one: the test fails on a resource
whose kind has no schema."""

import json
import os
import sys

VERSIONS = ["1.25.0", "1.37.0"]  # the oldest and newest kubernetes-validate 1.37.0 bundles
KINDS = [  # (apiVersion, kind): what deploy/kubernetes uses, and the other common ones
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "DaemonSet"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "PersistentVolumeClaim"),
    ("v1", "ServiceAccount"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
]
DEFS_PREFIX = "/api/_definitions.json#/$defs/"


def strip(node, in_properties=False):
    """`node` without "description" annotations and with references made local."""
    if isinstance(node, list):
        return [strip(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if not in_properties and key in ("description", "$id", "$schema"):
            continue
        if not in_properties and key == "$ref":
            if value.startswith(DEFS_PREFIX):
                value = "#/$defs/" + value[len(DEFS_PREFIX):]
            assert value.startswith("#/$defs/"), value
        out[key] = strip(value, in_properties=(key == "properties" and not in_properties))
    return out


def references(node, found):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                found.add(value[len("#/$defs/"):])
            references(value, found)
    elif isinstance(node, list):
        for item in node:
            references(item, found)


def main():
    package = sys.argv[1]
    out_dir = os.path.dirname(os.path.abspath(__file__))
    for version in VERSIONS:
        folder = os.path.join(package, "kubernetes-json-schema", f"v{version}-local-strict")
        with open(os.path.join(folder, "_definitions.json")) as f:
            all_defs = json.load(f)["$defs"]
        defs, kinds = {}, {}
        for api_version, kind in KINDS:
            # kubernetes-validate's file names: networking.k8s.io/v1 -> networking-v1.
            group, _, version_part = api_version.rpartition("/")
            group_version = f"{group.split('.')[0]}-{version_part}" if group else version_part
            path = os.path.join(folder, f"{kind.lower()}-{group_version}.json")
            with open(path) as f:
                name = f"kind.{api_version.replace('/', '.')}.{kind}"  # no "/": a JSON pointer token
                defs[name] = strip(json.load(f))
                kinds[f"{api_version} {kind}"] = name
        pending = set()
        references(defs, pending)
        while pending:
            name = pending.pop()
            if name in defs:
                continue
            defs[name] = strip(all_defs[name])
            references(defs[name], pending)
        bundle = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "comment": f"Kubernetes {version}, from kubernetes-validate (tests/k8s_schemas/vendor.py)",
            "kinds": kinds,
            "$defs": dict(sorted(defs.items())),
        }
        target = os.path.join(out_dir, f"kubernetes-{version.rsplit('.', 1)[0]}.json")
        with open(target, "w") as f:
            json.dump(bundle, f, indent=1)
            f.write("\n")
        print(f"{target}: {len(kinds)} kinds, {len(defs)} definitions")


if __name__ == "__main__":
    main()
