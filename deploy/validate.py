#!/usr/bin/env python3
"""The checks behind deploy/validate.sh (run it through that script: it sets up the venv).

Every check prints lines `PASS|FAIL|SKIP <check>: <detail>` and the process exits 1 when any
FAIL was printed. Subcommands:

  k8s-crds FILE...        KEDA ScaledObject/TriggerAuthentication against a strict JSON schema
                          derived from the KEDA CRDs (cloudcoil-models-keda); RabbitmqCluster:
                          structure only (no schema on PyPI).
  k8s-semantics NAME=FILE...  cross-resource rules of the rendered overlays.
  compose FILE            Compose: official JSON schema (check-jsonschema's vendored copy, run
                          by validate.sh), compose-spec parse, and project rules.
  example-config FILE     deploy/savepoint.example.toml against the config structs of the Rust
                          sources: every field, no unknown one, built-in defaults, env names.
  observability           otel-collector, prometheus and grafana provisioning configs.
  dashboard               deploy/grafana/savepoint.json.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
FAILED = False


def report(status: str, check: str, detail: str = "") -> None:
    global FAILED
    if status == "FAIL":
        FAILED = True
    print(f"{status} {check}" + (f": {detail}" if detail else ""), flush=True)


def expect(ok: bool, check: str, detail_ok: str, detail_fail: str) -> bool:
    report("PASS" if ok else "FAIL", check, detail_ok if ok else detail_fail)
    return ok


def load_docs(path: str | Path) -> list[dict]:
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


# ------------------------------------------------------------------------ source facts
# The crates whose sources the binaries are built from (their src/ folders).
ENGINE_CRATES = ("core", "store", "broker", "runtime", "shared", "worker", "scheduler")


def known_env_names() -> set[str]:
    """Every SAVEPOINT_* name a savepoint binary reads (string literals in the Rust sources)."""
    names: set[str] = set()
    for crate in ENGINE_CRATES:
        for rs in (ROOT / crate / "src").rglob("*.rs"):
            names.update(re.findall(r'"(SAVEPOINT_[A-Z0-9_]+)"', rs.read_text()))
    return names


def rust_structs() -> dict[str, dict[str, dict]]:
    """The config structs (`[section]`s) of the Rust sources: struct -> field -> {type, skip, default}.

    Defaults come from `impl Default` bodies (simple literals and products of integers) or, for
    `#[derive(Default)]` structs, from the field type; None where the value is not a literal.
    """
    sources = [ROOT / "runtime/src/config.rs", ROOT / "runtime/src/security.rs", ROOT / "runtime/src/security/tls.rs"]
    structs: dict[str, dict[str, dict]] = {}
    derived: set[str] = set()
    for src in sources:
        text = src.read_text()
        for m in re.finditer(r"#\[derive\(([^)]*)\)\]\s*(?:#\[[^\]]*\]\s*)*pub struct (\w+) \{(.*?)\n\}", text, re.S):
            derives, name, body = m.groups()
            if "Deserialize" not in derives:
                continue
            if "Default" in derives:
                derived.add(name)
            fields: dict[str, dict] = {}
            for fm in re.finditer(r"((?:\s*(?:///[^\n]*|#\[[^\n]*\]))*)\s*pub (\w+): ([^,\n]+),", body):
                attrs, field, ty = fm.groups()
                fields[field] = {"type": ty.strip(), "skip": "serde(skip)" in attrs, "default": None}
            structs[name] = fields
        for m in re.finditer(r"impl Default for (\w+) \{.*?Self \{(.*?)\n        \}", text, re.S):
            name, body = m.groups()
            for field, value in re.findall(r"^\s*(\w+): (.+?),\s*$", body, re.M):
                if name not in structs or field not in structs[name]:
                    continue
                value = value.strip()
                if re.fullmatch(r"[\d_ *]+", value):
                    structs[name][field]["default"] = math.prod(int(x) for x in value.replace("_", "").split("*"))
                elif m2 := re.fullmatch(r'"([^"]*)"\.into\(\)', value):
                    structs[name][field]["default"] = m2.group(1)
                elif value == "String::new()":
                    structs[name][field]["default"] = ""
                elif value in ("true", "false"):
                    structs[name][field]["default"] = value == "true"
                elif re.fullmatch(r"[A-Z][A-Z0-9_]+", value):
                    for rs in (rs for c in ENGINE_CRATES for rs in (ROOT / c / "src").rglob("*.rs")):
                        if c := re.search(rf"pub const {value}: \w+ = ([\d_]+);", rs.read_text()):
                            structs[name][field]["default"] = int(c.group(1).replace("_", ""))
    zero = {"String": "", "bool": False}
    for name in derived:
        for f in structs[name].values():
            t = f["type"]
            f["default"] = zero.get(t, 0 if re.fullmatch(r"u\d+|usize|i\d+", t) else None)
    return structs


def exported_metrics() -> dict[str, str]:
    """Prometheus series names exposed by core/src/metrics.rs -> metric type."""
    src = (ROOT / "core/src/metrics.rs").read_text()
    prefix = re.search(r'Registry::with_prefix\("(\w+)"\)', src).group(1)
    field_types = {}
    struct = re.search(r"pub struct Metrics \{(.*?)\n\}", src, re.S).group(1)
    for field, ty in re.findall(r"pub (\w+): (.+),[ \t]*$", struct, re.M):
        kind = "counter" if "Counter" in ty else "histogram" if "Histogram" in ty else "gauge"
        field_types[field] = kind
    series: dict[str, str] = {}
    for name, field in re.findall(r'registry\.register\(\s*"(\w+)",\s*"[^"]*",\s*m\.(\w+)\.clone\(\)', src, re.S):
        kind = field_types[field]
        base = f"{prefix}_{name}"
        if kind == "counter":
            series[f"{base}_total"] = kind
        elif kind == "histogram":
            for suffix in ("_bucket", "_sum", "_count"):
                series[base + suffix] = kind
        else:
            series[base] = kind
    return series


# ------------------------------------------------------------------------ CRDs
def strict(schema: dict) -> dict:
    """additionalProperties: false on every object schema that lists its properties."""
    if isinstance(schema, dict):
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        for v in schema.values():
            strict(v)
    elif isinstance(schema, list):
        for v in schema:
            strict(v)
    return schema


def describe(error) -> str:
    """The most specific cause of a jsonschema error (anyOf branches unwrapped), with its path."""

    def leaves(e):
        if not e.context:
            return [e]
        return [leaf for c in e.context for leaf in leaves(c)]

    candidates = [e for e in leaves(error) if "is not of type 'null'" not in e.message] or [error]
    best = max(candidates, key=lambda e: len(e.absolute_path))
    return f"{'.'.join(map(str, best.absolute_path)) or '<root>'}: {best.message[:200]}"


def cmd_k8s_crds(files: list[str]) -> None:
    import jsonschema
    from cloudcoil.models.keda import v1alpha1 as keda  # generated from the KEDA CRDs

    schemas = {
        ("keda.sh/v1alpha1", kind): strict(getattr(keda, kind).model_json_schema(by_alias=True))
        for kind in ("ScaledObject", "TriggerAuthentication")
    }
    seen_rabbit = seen_redis_cluster = False
    for path in files:
        for doc in load_docs(path):
            key = (doc.get("apiVersion"), doc.get("kind"))
            name = f"{Path(path).stem}: {doc['kind']}/{doc['metadata']['name']}"
            if key in schemas:
                errors = sorted(
                    jsonschema.Draft202012Validator(schemas[key]).iter_errors(doc), key=lambda e: list(e.path)
                )
                expect(
                    not errors,
                    f"crd-schema {name}",
                    "valid (strict) against the KEDA v1alpha1 CRD model",
                    "; ".join(describe(e) for e in errors[:5]),
                )
            elif key == ("rabbitmq.com/v1beta1", "RabbitmqCluster"):
                seen_rabbit = True
                spec = doc.get("spec", {})
                problems = []
                if not isinstance(spec.get("replicas"), int) or spec["replicas"] < 3 or spec["replicas"] % 2 == 0:
                    problems.append("spec.replicas should be an odd number >= 3 (quorum queues)")
                allowed = {"replicas", "image", "imagePullSecrets", "service", "persistence", "resources",
                           "affinity", "tolerations", "rabbitmq", "tls", "override", "skipPostDeployChecks",
                           "terminationGracePeriodSeconds", "delayStartSeconds", "secretBackend", "autoEnableAllFeatureFlags"}
                problems += [f"unknown spec field {k}" for k in spec if k not in allowed]
                tls = spec.get("tls") or {}
                problems += [f"unknown spec.tls field {k}" for k in tls
                             if k not in {"secretName", "caSecretName", "disableNonTLSListeners"}]
                if tls.get("disableNonTLSListeners") and not tls.get("secretName"):
                    problems.append("spec.tls.disableNonTLSListeners without spec.tls.secretName")
                extra = (spec.get("rabbitmq") or {}).get("additionalConfig", "")
                if "default_queue_type = quorum" not in extra:
                    problems.append("additionalConfig lacks default_queue_type = quorum")
                expect(not problems, f"crd-structure {name}",
                       "replicas, known top-level spec fields, quorum default" + (", TLS from a Secret" if tls else ""),
                       "; ".join(problems))
            elif key == ("redis.redis.opstreelabs.in/v1beta2", "RedisCluster"):
                seen_redis_cluster = True
                spec = doc.get("spec", {})
                problems = []
                if not isinstance(spec.get("clusterSize"), int) or spec["clusterSize"] < 3:
                    problems.append("spec.clusterSize should be at least 3 masters")
                for role in ("redisLeader", "redisFollower"):
                    if (spec.get(role) or {}).get("replicas") != spec.get("clusterSize"):
                        problems.append(f"spec.{role}.replicas should equal clusterSize (one replica per master)")
                allowed = {"clusterSize", "clusterVersion", "persistenceEnabled", "kubernetesConfig", "redisLeader",
                           "redisFollower", "storage", "podSecurityContext", "redisExporter", "TLS", "acl",
                           "priorityClassName", "serviceAccountName", "sidecars", "initContainer", "env", "hostNetwork",
                           "port"}
                problems += [f"unknown spec field {k}" for k in spec if k not in allowed]
                if not spec.get("persistenceEnabled"):
                    problems.append("persistenceEnabled must be true (AOF on volumes)")
                if not (spec.get("kubernetesConfig") or {}).get("redisSecret"):
                    problems.append("kubernetesConfig.redisSecret must name the password Secret")
                tls = spec.get("TLS") or {}
                problems += [f"unknown spec.TLS field {k}" for k in tls if k not in {"ca", "cert", "key", "secret"}]
                if tls and not (tls.get("secret") or {}).get("secretName"):
                    problems.append("spec.TLS.secret.secretName must name the certificate Secret")
                expect(not problems, f"crd-structure {name}",
                       "3+ masters, a replica each, known fields, persistence, auth" + (", TLS from a Secret" if tls else ""),
                       "; ".join(problems))
    if seen_redis_cluster:
        report("SKIP", "crd-schema RedisCluster",
               "no PyPI package ships the Redis Operator CRD schema; only the structural checks above ran")
    if seen_rabbit:
        report("SKIP", "crd-schema RabbitmqCluster",
               "no PyPI package ships the RabbitMQ Cluster Operator CRD schema; only the structural checks above ran")


# ------------------------------------------------------------------------ k8s semantics
def containers_of(doc: dict) -> list[dict]:
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    return spec.get("containers", []) + spec.get("initContainers", [])


def pod_spec(doc: dict) -> dict:
    return doc.get("spec", {}).get("template", {}).get("spec", {})


def env_value(container: dict, name: str, configmap: dict) -> str | None:
    for e in container.get("env", []):
        if e["name"] == name and "value" in e:
            return e["value"]
    return configmap.get(name)


def effective_env(container: dict, configmap: dict) -> dict[str, str]:
    """SAVEPOINT_* settings a container starts with: the ConfigMap, overridden by its own env
    (values from a Secret show as "<secret>")."""
    env = dict(configmap)
    for e in container.get("env", []):
        env[e["name"]] = e.get("value", "<secret>" if "secretKeyRef" in e.get("valueFrom", {}) else "<ref>")
    return env


# Settings that name a file: a process whose file is missing stops at start.
FILE_SETTINGS = ("SAVEPOINT_CONFIG", "SAVEPOINT_API_TOKENS_FILE", "SAVEPOINT_PAYLOAD_KEYS_FILE",
                 "SAVEPOINT_REDIS_TLS_CA", "SAVEPOINT_REDIS_TLS_CERT", "SAVEPOINT_REDIS_TLS_KEY",
                 "SAVEPOINT_AMQP_TLS_CA", "SAVEPOINT_AMQP_TLS_CERT", "SAVEPOINT_AMQP_TLS_KEY")
# Settings every scheduler and worker must share: keys (one seals what the other opens) and TLS.
SHARED_SETTINGS = ("SAVEPOINT_PAYLOAD_KEYS", "SAVEPOINT_PAYLOAD_KEYS_FILE", "SAVEPOINT_REDIS_TLS_CA",
                   "SAVEPOINT_REDIS_TLS_CERT", "SAVEPOINT_REDIS_TLS_KEY", "SAVEPOINT_AMQP_TLS_CA",
                   "SAVEPOINT_AMQP_TLS_CERT", "SAVEPOINT_AMQP_TLS_KEY")


def file_source(dep: dict, container: dict, path: str) -> tuple[str, str] | None:
    """(volume name, Secret name or "") of the read-only mount that provides `path`, or None
    when no mount (or no projected key of a Secret with `items`) provides it."""
    vols = {v["name"]: v for v in pod_spec(dep).get("volumes", [])}
    for m in container.get("volumeMounts", []):
        root = m["mountPath"].rstrip("/") + "/"
        if not path.startswith(root):
            continue
        v = vols.get(m["name"], {})
        secret = v.get("secret")
        rel = path[len(root):]
        if secret and secret.get("items") and rel not in {i["path"] for i in secret["items"]}:
            return None
        return m["name"], (secret or {}).get("secretName", "")
    return None


def cmd_k8s_semantics(pairs: list[str]) -> None:
    env_names = known_env_names() | {"SAVEPOINT_CONFIG", "SAVEPOINT_API"}
    readme = (DEPLOY / "k8s/README.md").read_text()
    for pair in pairs:
        overlay, path = pair.split("=", 1)
        docs = load_docs(path)
        by_kind: dict[str, list[dict]] = {}
        for d in docs:
            by_kind.setdefault(d["kind"], []).append(d)
        get = lambda kind, name: next((d for d in by_kind.get(kind, []) if d["metadata"]["name"] == name), None)  # noqa: E731
        tag = f"k8s[{overlay}]"
        cms = [d for d in by_kind.get("ConfigMap", []) if d["metadata"]["name"].startswith("savepoint-config")]
        if not expect(len(cms) == 1, f"{tag} configmap", "one savepoint-config ConfigMap", f"found {len(cms)}"):
            continue
        cfg = cms[0].get("data", {})
        sched, worker = get("Deployment", "savepoint-scheduler"), get("Deployment", "savepoint-worker")
        if not expect(bool(sched and worker), f"{tag} deployments", "scheduler and worker present", "missing"):
            continue

        # Environment variable names and secret references.
        unknown, bad_refs = set(), []
        for name in cfg:
            if name.startswith("SAVEPOINT_") and name not in env_names:
                unknown.add(name)
        for dep in (sched, worker):
            for c in containers_of(dep):
                for e in c.get("env", []):
                    if e["name"].startswith("SAVEPOINT_") and e["name"] not in env_names:
                        unknown.add(e["name"])
                    ref = e.get("valueFrom", {}).get("secretKeyRef")
                    if ref and (ref["name"], ref["key"]) not in {("savepoint-credentials", "amqp-url"),
                                                                 ("savepoint-credentials", "redis-url")}:
                        bad_refs.append(f"{e['name']} -> {ref['name']}/{ref['key']}")
        expect(not unknown, f"{tag} env names", "every SAVEPOINT_* variable is read by the binaries",
               f"unknown to the Rust sources: {sorted(unknown)}")
        expect(not bad_refs, f"{tag} secret refs", "AMQP/Redis URLs from savepoint-credentials (amqp-url, redis-url)",
               ", ".join(bad_refs))
        secrets = by_kind.get("Secret", [])
        if overlay == "dev":
            s = next((x for x in secrets if x["metadata"]["name"] == "savepoint-credentials"), None)
            keys = set((s or {}).get("data", {})) | set((s or {}).get("stringData", {}))
            expect(keys >= {"amqp-url", "redis-url"}, f"{tag} dev secret", "generated with amqp-url and redis-url",
                   f"keys {sorted(keys)}")
        else:
            expect(not secrets, f"{tag} no secret values", "renders no Secret (references only)",
                   f"renders {[x['metadata']['name'] for x in secrets]}")

        # Every Secret referenced (env, volumes, KEDA, operators) is documented, so the platform
        # operator knows to create it (deploy/k8s/README.md names each in backticks).
        referenced: set[str] = set()
        for d in by_kind.get("Deployment", []) + by_kind.get("StatefulSet", []):
            for c in containers_of(d):
                referenced |= {e["valueFrom"]["secretKeyRef"]["name"] for e in c.get("env", [])
                               if "secretKeyRef" in e.get("valueFrom", {})}
                referenced |= {f["secretRef"]["name"] for f in c.get("envFrom", []) if "secretRef" in f}
            referenced |= {v["secret"]["secretName"] for v in pod_spec(d).get("volumes", []) if "secret" in v}
        for ta in by_kind.get("TriggerAuthentication", []):
            referenced |= {r["name"] for r in ta["spec"].get("secretTargetRef", [])}
        for rc in by_kind.get("RabbitmqCluster", []):
            tls = rc["spec"].get("tls") or {}
            referenced |= {tls[k] for k in ("secretName", "caSecretName") if tls.get(k)}
        for rc in by_kind.get("RedisCluster", []):
            spec = rc["spec"]
            referenced |= {x for x in ((spec.get("kubernetesConfig") or {}).get("redisSecret", {}).get("name"),
                                       ((spec.get("TLS") or {}).get("secret") or {}).get("secretName")) if x}
        undocumented = sorted(n for n in referenced if f"`{n}`" not in readme)
        expect(not undocumented, f"{tag} secrets documented",
               f"{len(referenced)} referenced Secrets named in deploy/k8s/README.md: {sorted(referenced)}",
               f"not in deploy/k8s/README.md: {undocumented}")

        # Secret files: read-only mounts, 0440 at most, readable through fsGroup 65532, and every
        # file setting of a container served by one of its mounts (a missing file stops it).
        problems = []
        envs = {}
        for dep in (sched, worker):
            dn, ps = dep["metadata"]["name"], pod_spec(dep)
            c = containers_of(dep)[0]
            envs[dn] = effective_env(c, cfg)
            secret_vols = {v["name"]: v["secret"] for v in ps.get("volumes", []) if "secret" in v}
            for name, sv in secret_vols.items():
                modes = [sv.get("defaultMode", 0o644)] + [i["mode"] for i in sv.get("items", []) if "mode" in i]
                if any(m & ~0o440 for m in modes):
                    problems.append(f"{dn}: volume {name} mode {oct(max(modes))} (want 0440 or less)")
                for cc in containers_of(dep):
                    for m in cc.get("volumeMounts", []):
                        if m["name"] == name and m.get("readOnly") is not True:
                            problems.append(f"{dn}/{cc['name']}: mount of {name} not readOnly")
            if secret_vols and (ps.get("securityContext") or {}).get("fsGroup") != 65532:
                problems.append(f"{dn}: Secret volumes without securityContext.fsGroup 65532 (uid 65532 could not read 0440 files)")
            for var in FILE_SETTINGS:
                path = envs[dn].get(var, "")
                if path and file_source(dep, c, path) is None:
                    problems.append(f"{dn}: {var}={path} is not provided by a mount of this container")
        nvols = sum(1 for d in (sched, worker) for v in pod_spec(d).get("volumes", []) if "secret" in v)
        nfiles = sum(1 for e in envs.values() for var in FILE_SETTINGS if e.get(var))
        expect(not problems, f"{tag} secret files",
               f"{nvols} Secret volumes (read-only, mode <= 0440, fsGroup 65532), {nfiles} file settings "
               "each served by a mount of its own container", "; ".join(problems))

        # Scheduler and workers agree on payload keys and TLS (same values, same Secrets).
        sn, wn = sched["metadata"]["name"], worker["metadata"]["name"]
        def shared(dn: str, dep: dict) -> dict:
            out = {}
            for var in SHARED_SETTINGS:
                val = envs[dn].get(var, "")
                src = file_source(dep, containers_of(dep)[0], val) if val and var != "SAVEPOINT_PAYLOAD_KEYS" else None
                out[var] = (val, src[1] if src else None)
            return out
        a, b = shared(sn, sched), shared(wn, worker)
        diff = [f"{v}: scheduler {a[v]} / worker {b[v]}" for v in SHARED_SETTINGS if a[v] != b[v]]
        on = sorted(v for v in SHARED_SETTINGS if a[v][0])
        expect(not diff, f"{tag} shared security settings",
               f"scheduler and workers read the same {on}" if on else "neither sets payload keys or TLS files",
               "; ".join(diff))

        # The API: a scheduler bound beyond loopback needs tokens, or (dev only) an explicit
        # SAVEPOINT_ALLOW_OPEN_BIND; production uses tokens and never allows an open API.
        if overlay != "base":
            se = envs[sn]
            addr = se.get("SAVEPOINT_HTTP_ADDR", "127.0.0.1:7070")
            loopback = addr.startswith(("127.", "[::1]", "localhost"))
            tokens = bool(se.get("SAVEPOINT_API_TOKENS") or se.get("SAVEPOINT_API_TOKENS_FILE"))
            open_bind = se.get("SAVEPOINT_ALLOW_OPEN_BIND", "false").strip().lower() == "true"
            if overlay == "prod":
                ok = tokens and not open_bind
                want = "API tokens configured, SAVEPOINT_ALLOW_OPEN_BIND not set"
            else:
                ok = loopback or tokens or open_bind
                want = "tokens or SAVEPOINT_ALLOW_OPEN_BIND=true for a non-loopback bind"
            worker_tokens = [v for v in ("SAVEPOINT_API_TOKENS_FILE", "SAVEPOINT_API_TOKENS") if envs[wn].get(v)]
            expect(ok and not worker_tokens, f"{tag} api access",
                   f"{addr}: " + ("tokens" if tokens else "open (allowed explicitly)" if open_bind else "loopback")
                   + "; workers get no API tokens",
                   f"{addr}: tokens {tokens}, allow_open_bind {open_bind} (want {want}); worker token settings {worker_tokens}")

        # Autoscaling: exactly one autoscaler per Deployment in an overlay, none fixed replicas.
        targets: dict[str, list[str]] = {}
        for h in by_kind.get("HorizontalPodAutoscaler", []):
            targets.setdefault(h["spec"]["scaleTargetRef"]["name"], []).append(f"HPA/{h['metadata']['name']}")
        for so in by_kind.get("ScaledObject", []):
            targets.setdefault(so["spec"]["scaleTargetRef"]["name"], []).append(f"ScaledObject/{so['metadata']['name']}")
        clash = {k: v for k, v in targets.items() if len(v) > 1}
        expect(not clash, f"{tag} one autoscaler", "no Deployment has both an HPA and a ScaledObject", str(clash))
        if overlay != "base":
            expect(len(targets.get("savepoint-worker", [])) == 1, f"{tag} worker autoscaled",
                   f"by {targets.get('savepoint-worker')}", f"want exactly one, found {targets.get('savepoint-worker', [])}")
            expect("replicas" not in worker["spec"], f"{tag} worker replicas unset",
                   "the autoscaler owns the count", "spec.replicas set: kubectl apply would reset the fleet")
        ns = cfg.get('SAVEPOINT_NAMESPACE', 'sp')
        for so in by_kind.get("ScaledObject", []):
            # A fleet scales on (one of) the task queues it consumes: SAVEPOINT_WORKER_QUEUES
            # of the target Deployment's container, else the deployment's SAVEPOINT_QUEUE.
            target = get("Deployment", so["spec"]["scaleTargetRef"]["name"]) or {}
            env = {e["name"]: e.get("value") for c in target.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
                   for e in c.get("env", [])}
            served = [q.strip() for q in (env.get("SAVEPOINT_WORKER_QUEUES") or "").split(",") if q.strip()]
            queues = [f"{ns}.q.{q}" for q in (served or [cfg.get('SAVEPOINT_QUEUE', 'default')])]
            for t in so["spec"]["triggers"]:
                if t["type"] == "rabbitmq":
                    expect(t["metadata"].get("queueName") in queues, f"{tag} keda queue {so['metadata']['name']}",
                           f"scales on {t['metadata'].get('queueName')}", f"queueName {t['metadata'].get('queueName')} not in {queues}")
                    auth = get("TriggerAuthentication", t.get("authenticationRef", {}).get("name", ""))
                    refs = [(r["parameter"], r["name"], r["key"]) for r in (auth or {}).get("spec", {}).get("secretTargetRef", [])]
                    expect(("host", "savepoint-credentials", "amqp-url") in refs, f"{tag} keda auth",
                           "host from savepoint-credentials/amqp-url", f"secretTargetRef {refs}")
                    if cfg.get("SAVEPOINT_AMQP_TLS_CA"):
                        # The amqp-url is amqps:// here: KEDA needs tls=enable and the same CA.
                        spec = (auth or {}).get("spec", {})
                        params = {r["parameter"]: r for r in spec.get("secretTargetRef", []) + spec.get("configMapTargetRef", [])}
                        tls_on = False
                        if "tls" in params:
                            cm = get("ConfigMap", params["tls"]["name"])
                            tls_on = cm is None or (cm.get("data") or {}).get(params["tls"]["key"]) == "enable"
                        ca = params.get("ca", {})
                        ca_ok = any(v.get("secret", {}).get("secretName") == ca.get("name") for v in pod_spec(worker).get("volumes", []))
                        expect(tls_on and ca_ok, f"{tag} keda tls",
                               f"tls=enable, ca from {ca.get('name')}/{ca.get('key')} (the CA the workers trust)",
                               f"TriggerAuthentication parameters {sorted(params)}: want tls=enable and ca from the workers' CA Secret")

        # Shutdown budget: grace + 5 s consumer drain must end before SIGKILL.
        wc = containers_of(worker)[0]
        grace_ms = int(env_value(wc, "SAVEPOINT_SHUTDOWN_GRACE_MS", cfg) or 10000)
        tgp = pod_spec(worker).get("terminationGracePeriodSeconds", 30)
        expect(grace_ms / 1000 + 5 < tgp, f"{tag} worker shutdown budget",
               f"grace {grace_ms / 1000:g} s + drain 5 s < terminationGracePeriodSeconds {tgp}",
               f"grace {grace_ms / 1000:g} s + drain 5 s >= terminationGracePeriodSeconds {tgp}")

        # Listeners and probes.
        for dep, var, port in ((sched, "SAVEPOINT_HTTP_ADDR", 7070), (worker, "SAVEPOINT_WORKER_HTTP_ADDR", 7071)):
            c = containers_of(dep)[0]
            addr = env_value(c, var, cfg)
            ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
            probe = lambda p: (c.get(p, {}).get("httpGet", {}).get("path"), ports.get(c.get(p, {}).get("httpGet", {}).get("port"), c.get(p, {}).get("httpGet", {}).get("port")))  # noqa: E731
            problems = []
            if addr != f"0.0.0.0:{port}":
                problems.append(f"{var}={addr!r} (probes need 0.0.0.0:{port})")
            if probe("readinessProbe") != ("/readyz", port):
                problems.append(f"readiness {probe('readinessProbe')}")
            if probe("livenessProbe") != ("/healthz", port):
                problems.append(f"liveness {probe('livenessProbe')}")
            expect(not problems, f"{tag} {dep['metadata']['name']} probes",
                   f"{var}=0.0.0.0:{port}, /readyz and /healthz on {port}", "; ".join(problems))

        # Pod security of the savepoint pods.
        for dep in (sched, worker):
            ps, problems = pod_spec(dep), []
            if ps.get("automountServiceAccountToken") is not False:
                problems.append("automountServiceAccountToken not false")
            sa = get("ServiceAccount", ps.get("serviceAccountName", "default"))
            if not sa or sa.get("automountServiceAccountToken") is not False:
                problems.append("ServiceAccount missing or automounts its token")
            psc = ps.get("securityContext", {})
            for c in containers_of(dep):
                sc = c.get("securityContext", {})
                want = {
                    "runAsNonRoot": sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True,
                    "runAsUser 65532": sc.get("runAsUser", psc.get("runAsUser")) == 65532,
                    "readOnlyRootFilesystem": sc.get("readOnlyRootFilesystem") is True,
                    "allowPrivilegeEscalation false": sc.get("allowPrivilegeEscalation") is False,
                    "drop ALL": sc.get("capabilities", {}).get("drop") == ["ALL"],
                    "seccomp RuntimeDefault": (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type") == "RuntimeDefault",
                    "resources": bool(c.get("resources", {}).get("requests")) and bool(c.get("resources", {}).get("limits")),
                }
                problems += [f"{c['name']}: {k}" for k, ok in want.items() if not ok]
            if not ps.get("topologySpreadConstraints") and not ps.get("affinity", {}).get("podAntiAffinity"):
                problems.append("no topology spread / anti-affinity")
            expect(not problems, f"{tag} {dep['metadata']['name']} pod security",
                   "non-root 65532, read-only rootfs, no escalation, caps dropped, seccomp, resources, no SA token, spread",
                   "; ".join(problems))
        labels = worker["spec"]["template"]["metadata"]["labels"]
        expect(labels.get("app") == "savepoint-worker", f"{tag} chaos selector",
               "worker pods carry app=savepoint-worker (kill-workers.sh --k8s default)", f"labels {labels}")
        sd = sched["spec"]
        expect(sd.get("replicas") == 2 and sd["strategy"]["rollingUpdate"]["maxUnavailable"] == 0,
               f"{tag} scheduler rollout", "2 replicas, maxUnavailable 0", f"replicas {sd.get('replicas')}, strategy {sd.get('strategy')}")

        # Selectors of Services, PDBs and NetworkPolicies select the pods they are meant for.
        templates = [(d, d["spec"]["template"]["metadata"].get("labels", {}))
                     for k in ("Deployment", "StatefulSet") for d in by_kind.get(k, [])]
        def selected(sel: dict) -> list[str]:
            return [d["metadata"]["name"] for d, lab in templates if all(lab.get(k) == v for k, v in sel.items())]
        problems = []
        for s in by_kind.get("Service", []):
            sel = dict(s["spec"].get("selector", {}))
            sel.pop("statefulset.kubernetes.io/pod-name", None)
            if sel and not selected(sel):
                problems.append(f"Service/{s['metadata']['name']} selects nothing")
        for p in by_kind.get("PodDisruptionBudget", []):
            if not selected(p["spec"]["selector"]["matchLabels"]):
                problems.append(f"PDB/{p['metadata']['name']} selects nothing")
        for n in by_kind.get("NetworkPolicy", []):
            if not selected(n["spec"]["podSelector"].get("matchLabels", {})):
                problems.append(f"NetworkPolicy/{n['metadata']['name']} selects nothing")
        expect(not problems, f"{tag} selectors", "every Service, PDB and NetworkPolicy selects pods", "; ".join(problems))

        # NetworkPolicy ports.
        for np_name, ingress_port in (("savepoint-scheduler", 7070), ("savepoint-worker", 7071)):
            np_ = get("NetworkPolicy", np_name)
            if np_ is None:
                report("FAIL", f"{tag} networkpolicy {np_name}", "missing")
                continue
            ing = {p["port"] for r in np_["spec"].get("ingress", []) for p in r.get("ports", [])}
            egr = {p["port"] for r in np_["spec"].get("egress", []) for p in r.get("ports", [])}
            amqp_port = 5671 if cfg.get("SAVEPOINT_AMQP_TLS_CA") else 5672   # amqps when TLS is on
            need = {53, amqp_port, 6379, 4317, 4318}
            expect(ing == {ingress_port} and egr >= need, f"{tag} networkpolicy {np_name}",
                   f"ingress {sorted(ing)}, egress {sorted(egr)}",
                   f"ingress {sorted(ing)} (want [{ingress_port}]), egress {sorted(egr)} (need {sorted(need)})")

        # Pod Security admission: namespaces enforcing "restricted" must only run pods that pass.
        for ns in by_kind.get("Namespace", []):
            if ns["metadata"].get("labels", {}).get("pod-security.kubernetes.io/enforce") != "restricted":
                continue
            problems = []
            for d, _ in templates:
                ps = pod_spec(d)
                psc = ps.get("securityContext", {})
                for c in containers_of(d):
                    sc = c.get("securityContext", {})
                    if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
                        problems.append(f"{d['metadata']['name']}/{c['name']}: runAsNonRoot")
                    if sc.get("allowPrivilegeEscalation") is not False:
                        problems.append(f"{d['metadata']['name']}/{c['name']}: allowPrivilegeEscalation")
                    if sc.get("capabilities", {}).get("drop") != ["ALL"]:
                        problems.append(f"{d['metadata']['name']}/{c['name']}: capabilities.drop ALL")
                    if (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
                        problems.append(f"{d['metadata']['name']}/{c['name']}: seccompProfile")
            expect(not problems, f"{tag} pod security admission", f"every pod passes 'restricted' ({ns['metadata']['name']})",
                   "; ".join(problems))


# ------------------------------------------------------------------------ compose
def cmd_compose(path: str) -> None:
    text = Path(path).read_text()
    data = yaml.safe_load(text)  # resolves YAML anchors and merge keys like Compose does
    try:
        from compose_spec import PyCompose

        PyCompose.from_json(json.dumps(data))
        report("PASS", "compose compose-spec parse", "parsed by the compose_spec Rust library (anchors/merge keys resolved first)")
    except ValueError as e:
        report("FAIL", "compose compose-spec parse", str(e)[:300])
    services = data["services"]
    env_names = known_env_names()
    w = services.get("worker", {})
    workers = w.get("deploy", {}).get("replicas", 1) if w else 0
    workers += sum(1 for n in services if re.fullmatch(r"worker-?\d+", n))
    expect(workers == 3, "compose workers", "three worker replicas", f"{workers} workers")
    problems = []
    for name, svc in services.items():
        env = svc.get("environment", {}) or {}
        if isinstance(env, list):
            env = dict(e.split("=", 1) for e in env)
        for k in env:
            if k.startswith("SAVEPOINT_") and k not in env_names:
                problems.append(f"{name}: unknown {k}")
        if name in ("scheduler", "worker"):
            if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") != "http://otel-collector:4318" or not env.get("OTEL_SERVICE_NAME"):
                problems.append(f"{name}: OTEL_EXPORTER_OTLP_ENDPOINT/OTEL_SERVICE_NAME")
            deps = svc.get("depends_on", {})
            if not all(deps.get(b, {}).get("condition") == "service_healthy" for b in ("rabbitmq", "redis")):
                problems.append(f"{name}: depends_on rabbitmq/redis must wait for service_healthy")
            if svc.get("build", {}).get("target") != name:
                problems.append(f"{name}: build.target should be {name}")
        if name == "scheduler":
            # Without tokens the scheduler binds loopback only unless SAVEPOINT_ALLOW_OPEN_BIND;
            # an open API is published on the host's loopback, never on every interface.
            addr = env.get("SAVEPOINT_HTTP_ADDR", "127.0.0.1:7070")
            tokens = env.get("SAVEPOINT_API_TOKENS") or env.get("SAVEPOINT_API_TOKENS_FILE")
            if not tokens and not addr.startswith("127.") and str(env.get("SAVEPOINT_ALLOW_OPEN_BIND")).lower() != "true":
                problems.append(f"scheduler: binds {addr} without tokens and without SAVEPOINT_ALLOW_OPEN_BIND=true (refused at start)")
            if not tokens:
                for port in svc.get("ports", []) or []:
                    published = port if isinstance(port, str) else f"{port.get('host_ip', '')}:{port.get('published')}:{port.get('target')}"
                    if not str(published).startswith("127.0.0.1:"):
                        problems.append(f"scheduler: open API published as {published!r} (want 127.0.0.1:…)")
        elif env.get("SAVEPOINT_ALLOW_OPEN_BIND") or env.get("SAVEPOINT_API_TOKENS") or env.get("SAVEPOINT_API_TOKENS_FILE"):
            problems.append(f"{name}: API settings on a process that serves no API")
        for dep in (svc.get("depends_on") or {}):
            if dep in services and services[dep].get("profiles") and not svc.get("profiles"):
                problems.append(f"{name}: depends on {dep}, which only runs in profile {services[dep]['profiles']}")
        for v in svc.get("volumes", []) or []:
            src = v.split(":", 1)[0] if isinstance(v, str) else v.get("source", "")
            if src.startswith("."):
                if not (Path(path).parent / src).exists():
                    problems.append(f"{name}: mounted file {src} does not exist")
    if "--appendonly" not in services["redis"].get("command", []) or "everysec" not in services["redis"].get("command", []):
        problems.append("redis: AOF everysec not configured")
    obs = {n for n, s in services.items() if "observability" in (s.get("profiles") or [])}
    if obs != {"otel-collector", "jaeger", "prometheus", "grafana"}:
        problems.append(f"observability profile has {sorted(obs)}")
    expect(not problems, "compose project rules",
           "env names known, OTLP env, health-gated depends_on, mounts exist, AOF, observability profile, "
           "open API allowed explicitly and published on 127.0.0.1 only",
           "; ".join(problems))


# ------------------------------------------------------------------------ example config
def cmd_example_config(path: str) -> None:
    """The example TOML parses, has every field of every section with its built-in default, no
    unknown field (the binaries deny them), and names every SAVEPOINT_* variable apply_env reads."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        report("SKIP", "example config", "tomllib needs Python >= 3.11")
        return
    text = Path(path).read_text()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        report("FAIL", "example config parse", str(e))
        return
    report("PASS", "example config parse", f"{path} is valid TOML")
    structs = rust_structs()
    problems: list[str] = []
    # Fields that may stay commented out: inline API tokens need real digests.
    optional = {("SecuritySection", "api_tokens")}

    def walk(table: dict, struct: str, where: str) -> None:
        fields = structs[struct]
        for key, value in table.items():
            f = fields.get(key)
            if f is None or f["skip"]:
                problems.append(f"{where}{key}: not a field of {struct} (unknown fields are errors)")
            elif f["type"] in structs:
                if not isinstance(value, dict):
                    problems.append(f"{where}{key}: should be a [section]")
                else:
                    walk(value, f["type"], f"{where}{key}.")
            elif f["default"] is not None and value != f["default"]:
                problems.append(f"{where}{key} = {value!r}, built-in default {f['default']!r}")
        for key, f in fields.items():
            if key not in table and not f["skip"] and (struct, key) not in optional:
                problems.append(f"{where}{key}: missing")

    walk(data, "Config", "")
    for t in (data.get("security") or {}).get("api_tokens", []):
        if set(t) != {"name", "role", "sha256"} or t.get("role") not in ("read", "operate", "admin") \
                or not re.fullmatch(r"(sha256:)?[0-9a-fA-F]{64}", str(t.get("sha256"))):
            problems.append(f"security.api_tokens entry {t}: needs name, role (read|operate|admin), sha256 (64 hex)")
    apply_env = re.search(r"pub fn apply_env\(.*?\n    \}\n", (ROOT / "runtime/src/config.rs").read_text(), re.S).group(0)
    read = set(re.findall(r'"(SAVEPOINT_[A-Z0-9_]+)"', apply_env))
    named = set(re.findall(r"\bSAVEPOINT_[A-Z0-9_]+\b", text))
    problems += [f"env {v} (read by apply_env) not mentioned" for v in sorted(read - named)]
    unknown = named - known_env_names() - {"SAVEPOINT_CONFIG"}
    problems += [f"env {v} mentioned but read by no binary" for v in sorted(unknown)]
    expect(not problems, "example config fields",
           f"every field of Config and its sections, built-in defaults, no unknown field, all {len(read)} "
           "variables of apply_env named", "; ".join(problems[:12]))


# ------------------------------------------------------------------------ observability
def cmd_observability() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    col = yaml.safe_load((DEPLOY / "observability/otel-collector.yaml").read_text())
    problems = []
    protos = col.get("receivers", {}).get("otlp", {}).get("protocols", {})
    if set(protos) != {"grpc", "http"}:
        problems.append(f"otlp receiver protocols {sorted(protos)}")
    for pname, p in col.get("service", {}).get("pipelines", {}).items():
        for section in ("receivers", "processors", "exporters"):
            for comp in p.get(section, []):
                if comp not in (col.get(section) or {}):
                    problems.append(f"pipeline {pname} uses undefined {section[:-1]} {comp}")
    traces = col.get("service", {}).get("pipelines", {}).get("traces", {})
    jaeger = [e for e in traces.get("exporters", []) if e.split("/")[0] == "otlp"]
    if not jaeger or col["exporters"][jaeger[0]].get("endpoint", "").split(":")[0] not in compose:
        problems.append("traces are not exported over OTLP to a compose service")
    if set(col.get("service", {}).get("pipelines", {})) != {"traces"}:
        problems.append("pipelines other than traces")
    expect(not problems, "otel-collector config", "OTLP grpc+http in, traces -> OTLP -> jaeger (structure; otelcol is not on PyPI)",
           "; ".join(problems))

    prom = yaml.safe_load((DEPLOY / "observability/prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in prom.get("scrape_configs", [])}
    problems = []
    st = [t for j in jobs.values() for sc in j.get("static_configs", []) for t in sc.get("targets", [])]
    if "scheduler:7070" not in st:
        problems.append("scheduler:7070 not scraped")
    dns = [(n, sd.get("port")) for j in jobs.values() for sd in j.get("dns_sd_configs", []) for n in sd.get("names", [])]
    if ("worker", 7071) not in dns and "worker:7071" not in st:
        problems.append("workers' :7071 not scraped")
    if any(j.get("metrics_path", "/metrics") != "/metrics" for j in jobs.values()):
        problems.append("metrics_path")
    if compose["worker"]["environment"].get("SAVEPOINT_WORKER_HTTP_ADDR") != "0.0.0.0:7071":
        problems.append("compose workers do not listen on 0.0.0.0:7071")
    expect(not problems, "prometheus config", "scheduler:7070 and every worker replica :7071 (structure; promtool is not on PyPI)",
           "; ".join(problems))

    ds_files = sorted((DEPLOY / "grafana/provisioning/datasources").glob("*.yaml"))
    db_files = sorted((DEPLOY / "grafana/provisioning/dashboards").glob("*.yaml"))
    problems = []
    uids = [d.get("uid") for f in ds_files for d in yaml.safe_load(f.read_text()).get("datasources", [])
            if d.get("type") == "prometheus" and d.get("url") == "http://prometheus:9090"]
    if len(uids) != 1:
        problems.append(f"want one Prometheus datasource at http://prometheus:9090, found {uids}")
    mounts = [v for v in compose["grafana"].get("volumes", [])]
    paths = [p["options"]["path"] for f in db_files for p in yaml.safe_load(f.read_text()).get("providers", [])]
    if not any(m.startswith("./grafana/savepoint.json:") and any(m.split(":")[1].startswith(p.rstrip("/") + "/") for p in paths)
               for m in mounts):
        problems.append(f"savepoint.json is not mounted under a provider path {paths}")
    expect(not problems, "grafana provisioning", f"datasource uid {uids[0] if uids else '?'}, dashboards from {paths}",
           "; ".join(problems))


# ------------------------------------------------------------------------ dashboard
def cmd_dashboard() -> None:
    path = DEPLOY / "grafana/savepoint.json"
    try:
        dash = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        report("FAIL", "dashboard json", str(e))
        return
    ds_uid = next(d["uid"] for f in (DEPLOY / "grafana/provisioning/datasources").glob("*.yaml")
                  for d in yaml.safe_load(f.read_text())["datasources"] if d["type"] == "prometheus")
    series = exported_metrics()
    problems, ids, used = [], set(), set()
    if not 36 <= dash.get("schemaVersion", 0) <= 41:
        problems.append(f"schemaVersion {dash.get('schemaVersion')}")
    if not dash.get("uid") or not dash.get("title"):
        problems.append("uid/title")
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    for want in ("Throughput", "Latency", "Backlog", "Effects in doubt", "Blocked runs", "Errors"):
        if want not in rows:
            problems.append(f"row {want!r} missing")
    cells = set()
    for p in dash["panels"]:
        if p["id"] in ids:
            problems.append(f"duplicate panel id {p['id']}")
        ids.add(p["id"])
        g = p["gridPos"]
        if g["x"] + g["w"] > 24:
            problems.append(f"panel {p['title']!r} wider than the grid")
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    problems.append(f"panel {p['title']!r} overlaps another")
                    break
                cells.add((x, y))
        if p["type"] == "row":
            continue
        if p.get("datasource", {}).get("uid") != ds_uid:
            problems.append(f"panel {p['title']!r} datasource {p.get('datasource')}")
        for t in p.get("targets", []):
            if t.get("datasource", {}).get("uid") != ds_uid:
                problems.append(f"panel {p['title']!r} target datasource")
            for m in re.findall(r"\b(savepoint_[a-z_]+)\b", t["expr"]):
                used.add(m)
                if m not in series:
                    problems.append(f"panel {p['title']!r}: {m} is not exported by core/src/metrics.rs")
            if t["expr"].count("(") != t["expr"].count(")"):
                problems.append(f"panel {p['title']!r}: unbalanced parentheses")
    for v in dash.get("templating", {}).get("list", []):
        if v.get("datasource", {}).get("uid") != ds_uid:
            problems.append(f"variable {v['name']} datasource")
    families = {re.sub(r"_(bucket|sum|count)$", "", s) for s in series}
    unused = sorted(f for f in families if not any(u == f or u.startswith(f + "_") for u in used))
    if unused:
        problems.append(f"metrics without a panel: {unused}")
    expect(not problems, "dashboard",
           f"{len(ids)} panels, rows {rows}, datasource uid {ds_uid}, all {len(families)} metric families from metrics.rs used",
           "; ".join(problems[:10]))


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    cmd, args = sys.argv[1], sys.argv[2:]
    {
        "k8s-crds": lambda: cmd_k8s_crds(args),
        "k8s-semantics": lambda: cmd_k8s_semantics(args),
        "compose": lambda: cmd_compose(args[0]),
        "example-config": lambda: cmd_example_config(args[0]),
        "observability": cmd_observability,
        "dashboard": cmd_dashboard,
    }[cmd]()
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
