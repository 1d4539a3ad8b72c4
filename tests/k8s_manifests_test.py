"""Checks deploy/kubernetes: base and every overlay render with `kubectl kustomize`, every
resource validates against Kubernetes' JSON schemas (strict: no unknown field) of the oldest and
newest release kubernetes-validate 1.37.0 bundles, kept in tests/k8s_schemas (made by its
vendor.py; nothing is read from the network), and the manifests fit Troupe and each other:

- every flag in a troupe container's args is one `troupe start --help` lists (the real binary);
- HTTP probe paths are routes the head's HTTP server serves (src/http/http_server.cc), probe and
  Service target ports are ports the selected containers declare;
- every $(VAR) in args is an env entry of the container; resourceFieldRefs name the container;
- Deployment selectors match their pod labels; containers have CPU and memory requests and
  limits, readiness and liveness probes; troupe containers stop with a preStop `troupe stop`
  whose --grace-period-s fits in terminationGracePeriodSeconds;
- every Secret key referenced (env or volume) is one docs/deploy.md tells how to create; a
  --ca-cert/--ca-key file is a key of a Secret volume the container mounts; a mounted private key
  (*.key) is not readable by other users, and only a head (--head) mounts one;
- overlays/gpu: the worker's nvidia.com/gpu limit equals the GPUs it offers (NUM_GPUS);
  overlays/redis: the head's TROUPE_REDIS_ADDRESS is a Service of the overlay, with its port.
A broken copy of the base (a Service pointing at a port no container has) must be refused, so the
checks themselves are known to fail when they should; so must a Deployment with a field no
Kubernetes release knows (the schemas' check). No kubectl, no schema file, a kind without a
schema or a run that validated nothing fails the test.

Usage: k8s_manifests_test.py REPO_ROOT TROUPE_BINARY SCHEMA_DIR (see k8s_manifests_test.sh)."""

import copy
import os
import re
import shutil
import subprocess
import sys

import yaml

ROOT, TROUPE, SCHEMAS = sys.argv[1], sys.argv[2], sys.argv[3]
KUSTOMIZATIONS = ["base", "overlays/gpu", "overlays/redis"]
failures = []


def fail(where, message):
    failures.append(f"{where}: {message}")


def render(name):
    path = os.path.join(ROOT, "deploy/kubernetes", name)
    out = subprocess.run(["kubectl", "kustomize", path], capture_output=True, text=True)
    if out.returncode != 0:
        fail(name, f"kubectl kustomize failed: {out.stderr.strip()}")
        return []
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def pod_templates(resources):
    for r in resources:
        if r["kind"] in ("Deployment", "StatefulSet"):
            yield r, r["spec"]["template"]


def start_flags():
    out = subprocess.run([TROUPE, "start", "--help"], capture_output=True, text=True)
    return set(re.findall(r"^\s+(--[a-z0-9-]+)", out.stdout, re.M))


def http_routes():
    with open(os.path.join(ROOT, "src/http/http_server.cc")) as f:
        return set(re.findall(r'router\.Add\(\s*"GET",\s*"([^"]+)"', f.read()))


def documented_secret_keys():
    with open(os.path.join(ROOT, "docs/deploy.md")) as f:
        text = f.read()
    keys = set()
    for name, rest in re.findall(r"kubectl create secret generic (\S+)((?:\s*\\?\s*--from-\S+)+)", text):
        for key in re.findall(r"--from-(?:literal|file)=([A-Za-z0-9_.-]+)=", rest):
            keys.add((name, key))
    return keys


def check_container(where, container, template_spec, flags, routes, secret_keys):
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    env = {e["name"]: e for e in container.get("env", [])}
    is_troupe = container["image"].split("/")[-1].split(":")[0] == "troupe"
    # Resources.
    for kind in ("requests", "limits"):
        for resource in ("cpu", "memory"):
            if resource not in container.get("resources", {}).get(kind, {}):
                fail(where, f"no {kind}.{resource}")
    # Probes.
    for probe_name in ("readinessProbe", "livenessProbe"):
        probe = container.get(probe_name)
        if not probe:
            fail(where, f"no {probe_name}")
            continue
        for kind in ("httpGet", "tcpSocket"):
            if kind in probe:
                port = probe[kind]["port"]
                if port not in ports and port not in ports.values():
                    fail(where, f"{probe_name} port {port} is not a container port {ports}")
        if "httpGet" in probe and is_troupe and probe["httpGet"]["path"] not in routes:
            fail(where, f"{probe_name} path {probe['httpGet']['path']} is not served {routes}")
        if "exec" in probe and is_troupe:
            command = probe["exec"]["command"]
            if command[0] != "troupe" or command[1] not in ("status",):
                fail(where, f"{probe_name} runs {command}")
    # $(VAR) references and resourceFieldRefs.
    for arg in container.get("args", []) + container.get("command", []):
        for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", arg):
            if var not in env:
                fail(where, f"{arg} names $({var}), which is not in the container's env")
    for e in env.values():
        ref = e.get("valueFrom", {}).get("resourceFieldRef")
        if ref and ref.get("containerName") != container["name"]:
            fail(where, f"env {e['name']}: resourceFieldRef names {ref.get('containerName')}")
        secret = e.get("valueFrom", {}).get("secretKeyRef")
        if secret and (secret["name"], secret["key"]) not in secret_keys:
            fail(where, f"env {e['name']}: Secret {secret['name']} key {secret['key']} is not one "
                        f"docs/deploy.md creates {sorted(secret_keys)}")
    if not is_troupe:
        return
    # Flags: only what `troupe start` offers.
    args = container.get("args", [])
    if not args or args[0] != "start":
        fail(where, f"a troupe container should run `troupe start`, runs {args}")
    for arg in args[1:]:
        flag = arg.split("=", 1)[0]
        if flag not in flags:
            fail(where, f"`troupe start` has no flag {flag}")
    # Graceful stop.
    pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    if pre_stop[:2] != ["troupe", "stop"]:
        fail(where, f"preStop is {pre_stop}, not `troupe stop`")
    grace = [int(a.split("=")[1]) for a in pre_stop if a.startswith("--grace-period-s=")]
    period = template_spec.get("terminationGracePeriodSeconds", 30)
    if grace and grace[0] >= period:
        fail(where, f"troupe stop --grace-period-s={grace[0]} does not fit in "
                    f"terminationGracePeriodSeconds={period}")
    if container.get("imagePullPolicy") == "Always":
        fail(where, "imagePullPolicy Always: a locally loaded image would never be used")


def secret_files(where, container, template_spec, secret_keys):
    """{mounted path: (Secret key, file mode)} of the container's Secret volumes."""
    volumes = {v["name"]: v["secret"] for v in template_spec.get("volumes", []) if "secret" in v}
    files = {}
    for mount in container.get("volumeMounts", []):
        secret = volumes.get(mount["name"])
        if secret is None:
            continue
        name = secret["secretName"]
        documented = sorted(k for n, k in secret_keys if n == name)
        if not documented:
            fail(where, f"Secret volume {name} is not one docs/deploy.md creates")
        items = secret.get("items") or [{"key": k, "path": k} for k in documented]
        for item in items:
            if (name, item["key"]) not in secret_keys:
                fail(where, f"Secret {name} key {item['key']} is not one docs/deploy.md creates")
            mode = item.get("mode", secret.get("defaultMode", 0o644))
            files[f"{mount['mountPath'].rstrip('/')}/{item['path']}"] = (item["key"], mode)
    return files


def check_tls_files(where, container, template_spec, secret_keys):
    files = secret_files(where, container, template_spec, secret_keys)
    args = container.get("args", [])
    for arg in args:
        flag, _, path = arg.partition("=")
        if flag in ("--ca-cert", "--ca-key") and path not in files:
            fail(where, f"{flag}={path} is no file of a Secret volume it mounts {sorted(files)}")
    for path, (key, mode) in files.items():
        if key.endswith(".key"):
            if mode & 0o007:
                fail(where, f"{path} (a private key) has mode {mode:o}: readable by other users")
            if "--head" not in args:
                fail(where, f"{path}: only the head may hold a private key of a Secret")


def check(name, resources, flags, routes, secret_keys):
    for r, template in pod_templates(resources):
        where = f"{name}: {r['kind']}/{r['metadata']['name']}"
        labels = template["metadata"].get("labels", {})
        for k, v in r["spec"]["selector"]["matchLabels"].items():
            if labels.get(k) != v:
                fail(where, f"selector {k}={v} does not match the pod labels {labels}")
        for container in template["spec"]["containers"]:
            check_container(f"{where}/{container['name']}", container, template["spec"], flags,
                            routes, secret_keys)
            check_tls_files(f"{where}/{container['name']}", container, template["spec"],
                            secret_keys)
    # Services: the selector picks pods, and every targetPort is one of their ports.
    for svc in (r for r in resources if r["kind"] == "Service"):
        where = f"{name}: Service/{svc['metadata']['name']}"
        selected = [t for _, t in pod_templates(resources)
                    if all(t["metadata"].get("labels", {}).get(k) == v
                           for k, v in svc["spec"]["selector"].items())]
        if not selected:
            fail(where, f"selector {svc['spec']['selector']} matches no pod template")
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            for t in selected:
                declared = [(p.get("name"), p["containerPort"])
                            for c in t["spec"]["containers"] for p in c.get("ports", [])]
                if not any(target in pair for pair in declared):
                    fail(where, f"targetPort {target} is no container port of the pods {declared}")


def env_of(resources, deployment, container_name):
    for r, t in pod_templates(resources):
        if r["metadata"]["name"] == deployment:
            for c in t["spec"]["containers"]:
                if c["name"] == container_name:
                    return c, {e["name"]: e for e in c.get("env", [])}
    raise KeyError(f"{deployment}/{container_name}")


def check_gpu(resources):
    worker, env = env_of(resources, "troupe-worker", "worker")
    gpus = worker["resources"].get("limits", {}).get("nvidia.com/gpu")
    if gpus is None:
        fail("overlays/gpu", "the worker asks for no nvidia.com/gpu")
    elif str(gpus) != env.get("NUM_GPUS", {}).get("value"):
        fail("overlays/gpu", f"nvidia.com/gpu {gpus} but NUM_GPUS {env.get('NUM_GPUS')}")
    if "--num-gpus=$(NUM_GPUS)" not in worker["args"]:
        fail("overlays/gpu", "the worker does not pass --num-gpus=$(NUM_GPUS)")


def check_redis(resources):
    _, env = env_of(resources, "troupe-head", "head")
    address = env.get("TROUPE_REDIS_ADDRESS", {}).get("value", "")
    host, _, port = address.partition(":")
    services = {r["metadata"]["name"]: r for r in resources if r["kind"] == "Service"}
    if host not in services or int(port or 0) not in [p["port"] for p in services[host]["spec"]["ports"]]:
        fail("overlays/redis", f"TROUPE_REDIS_ADDRESS={address!r} is not a Service port of the overlay")
    if "TROUPE_REDIS_PASSWORD" not in env:
        fail("overlays/redis", "the head gets no TROUPE_REDIS_PASSWORD")


def load_schemas():
    """[(Kubernetes version, {"apiVersion Kind": validator})] from tests/k8s_schemas (vendored:
    see vendor.py there). No schema file, or one without kinds, is a failure of the test."""
    import json

    import jsonschema

    folder = SCHEMAS
    names = sorted(n for n in (os.listdir(folder) if os.path.isdir(folder) else [])
                   if re.fullmatch(r"kubernetes-[0-9.]+\.json", n))
    schemas = []
    for n in names:
        with open(os.path.join(folder, n)) as f:
            bundle = json.load(f)
        validators = {}
        for kind, definition in bundle.get("kinds", {}).items():
            schema = {"$schema": bundle["$schema"], "$defs": bundle["$defs"],
                      "$ref": f"#/$defs/{definition}"}
            validators[kind] = jsonschema.Draft202012Validator(schema)
        if not validators:
            fail(n, "a schema file without kinds")
        schemas.append((n[len("kubernetes-"):-len(".json")], validators))
    if not schemas:
        fail("tests/k8s_schemas", f"no kubernetes-<version>.json schema in {folder}")
    return schemas


def validate_schemas(name, resources, schemas):
    """Validates every resource against each version's schema; returns how many validations ran.
    A resource of a kind with no vendored schema fails (add it to tests/k8s_schemas/vendor.py)."""
    validated = 0
    for version, validators in schemas:
        for r in resources:
            where = f"{name}: {r.get('kind')}/{r.get('metadata', {}).get('name')}"
            validator = validators.get(f"{r.get('apiVersion')} {r.get('kind')}")
            if validator is None:
                fail(where, f"no schema for {r.get('apiVersion')} {r.get('kind')} (Kubernetes "
                            f"{version}): add the kind to tests/k8s_schemas/vendor.py and rerun it")
                continue
            for e in sorted(validator.iter_errors(r), key=lambda e: list(e.path)):
                fail(where, f"schema (Kubernetes {version}): {e.message} at {list(e.path)}")
            validated += 1
    print(f"{name}: {len(resources)} resources checked against the schemas of Kubernetes "
          f"{', '.join(v for v, _ in schemas)} (strict)")
    return validated


def main():
    if shutil.which("kubectl") is None:
        print("FAIL: kubectl is not installed (it renders the kustomizations): nothing was checked")
        return 1
    schemas = load_schemas()
    flags, routes, secret_keys = start_flags(), http_routes(), documented_secret_keys()
    if "--token" not in flags or "/api/version" not in routes or not secret_keys:
        print(f"cannot read what to check against: flags {sorted(flags)}, routes {routes}, "
              f"secrets {secret_keys}")
        return 1
    rendered, validated = {}, 0
    for name in KUSTOMIZATIONS:
        rendered[name] = render(name)
        print(f"{name}: " + ", ".join(f"{r['kind']}/{r['metadata']['name']}" for r in rendered[name]))
        if not rendered[name]:
            fail(name, "renders no resource")
        check(name, rendered[name], flags, routes, secret_keys)
        validated += validate_schemas(name, rendered[name], schemas)
    if validated == 0:
        fail("schemas", "no resource was validated against a Kubernetes schema")
    if rendered.get("overlays/gpu"):
        check_gpu(rendered["overlays/gpu"])
    if rendered.get("overlays/redis"):
        check_redis(rendered["overlays/redis"])

    # The checks can fail: a Service pointing at a port no container declares is refused.
    real_failures = list(failures)
    broken = copy.deepcopy(rendered["base"])
    for r in broken:
        if r["kind"] == "Service":
            r["spec"]["ports"][0]["targetPort"] = "no-such-port"
    check("broken base", broken, flags, routes, secret_keys)
    if len(failures) == len(real_failures):
        real_failures.append("a Service with a wrong targetPort was not refused")
    # ... and a worker given the CA key (the whole Secret troupe-ca) is refused.
    failures[:] = list(real_failures)
    broken = copy.deepcopy(rendered["base"])
    for r, template in pod_templates(broken):
        if r["metadata"]["name"] == "troupe-worker":
            for volume in template["spec"]["volumes"]:
                volume.get("secret", {}).pop("items", None)
    check("broken base", broken, flags, routes, secret_keys)
    if not any("only the head may hold" in f for f in failures[len(real_failures):]):
        real_failures.append("a worker mounting the CA key was not refused")
    # ... and a Deployment with a field no Kubernetes knows fails the schemas.
    failures[:] = list(real_failures)
    broken = copy.deepcopy(rendered["base"])
    deployments = [r for r in broken if r["kind"] == "Deployment"]
    if deployments:
        deployments[0]["spec"]["template"]["spec"]["containers"][0]["no_such_field"] = 1
        validate_schemas("broken base", deployments[:1], schemas)
    if not any("no_such_field" in f for f in failures[len(real_failures):]):
        real_failures.append("a Deployment with an unknown field passed the schemas")
    failures[:] = real_failures

    for f in failures:
        print("FAIL:", f)
    print("OK" if not failures else f"{len(failures)} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
