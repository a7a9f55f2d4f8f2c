#!/usr/bin/env python3
"""Lints, renders and validates colo's Helm chart offline.

For each values file (the chart's defaults, values-cpu.yaml, values-gpu.yaml
and ci/*-values.yaml):
  1. `helm lint --strict` (Helm 4 through helm-python-sdk, no helm binary);
  2. `helm template`: every rendered manifest validated against the
     Kubernetes API's OpenAPI schemas (kubernetes-validate, offline, strict:
     unknown fields are errors) for the oldest Kubernetes version the chart
     supports and the newest the validator knows; custom resources
     (ServiceMonitor, PodMonitor, ScaledObject) are named and skipped, their
     schemas are not part of Kubernetes;
  3. what the deployment must have: probes on /health/live and
     /health/ready, a startup probe covering model loading, the preStop
     drain and a grace period covering drain delay and the longest request,
     non-root with a read-only root filesystem and no capabilities,
     nvidia.com/gpu and GPU placement only where asked, the Service, PDB
     and HPA where asked;
  4. with --colo-server, the rendered config.yaml checked by
     `colo-server --check-config` where the model weights are in the cache
     (device cuda is checked as cpu on a machine without a GPU).

Exit status: 0 all good, 1 a check failed, 77 when helm-python-sdk or
kubernetes-validate is not installed (a skip). Where they are missing from
this Python but present in the environment scripts/install-deps.sh makes
(${XDG_CACHE_HOME:-~/.cache}/colo/k8s-venv, or $COLO_K8S_VENV), the script
runs itself again with that environment's Python.

  scripts/k8s-validate.py [--chart deploy/helm/colo] [--kube-version 1.34.0 ...]
                          [--colo-server build/colo-server] [--out DIR]
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

SKIP = 77
CUSTOM_KINDS = {"ServiceMonitor", "PodMonitor", "ScaledObject"}
MIN_KUBE = "1.30.0"  # Chart.yaml's kubeVersion: native preStop sleep


def k8s_venv_python():
    venv = os.environ.get("COLO_K8S_VENV")
    if not venv:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        venv = os.path.join(cache, "colo", "k8s-venv")
    return os.path.join(venv, "bin", "python3")


try:
    import yaml
    import helm_python as helm
    import kubernetes_validate
except ImportError as e:
    py = k8s_venv_python()
    # Not the interpreter's real path: a venv's python3 links to the system's,
    # so only sys.prefix tells whether this is already the venv.
    venv = os.path.dirname(os.path.dirname(py))
    if os.access(py, os.X_OK) and os.path.realpath(sys.prefix) != os.path.realpath(venv) and \
            not os.environ.get("COLO_K8S_REEXEC"):
        os.environ["COLO_K8S_REEXEC"] = "1"
        os.execv(py, [py] + sys.argv)
    print(f"k8s-validate: SKIP: {e.name} is not installed "
          "(pip install helm-python-sdk kubernetes-validate, or scripts/install-deps.sh)")
    sys.exit(SKIP)


class Checks:
    def __init__(self):
        self.failed = []
        self.n = 0

    def __call__(self, cond, what):
        self.n += 1
        if not cond:
            self.failed.append(what)
            print(f"    FAILED: {what}")
        return cond


def str_block(dumper, s):
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)


yaml.SafeDumper.add_representer(str, str_block)


def load_values(path):
    if not path:
        return None
    with open(path) as f:
        return yaml.safe_load(f) or {}


def rendered_docs(manifests):
    """[(template, object)] of the non-empty rendered documents, NOTES.txt left out."""
    docs = []
    for tpl, text in sorted(manifests.items()):
        if tpl.endswith("NOTES.txt"):
            continue
        for d in yaml.safe_load_all(text):
            if d:
                docs.append((tpl, d))
    return docs


def one(docs, kind):
    found = [d for _, d in docs if d.get("kind") == kind]
    return found[0] if len(found) == 1 else None


def check_deployment(check, docs, values):
    dep = one(docs, "Deployment")
    if not check(dep is not None, "exactly one Deployment"):
        return
    pod = dep["spec"]["template"]["spec"]
    c = next((c for c in pod["containers"] if c["name"] == "colo-server"), None)
    if not check(c is not None, "a colo-server container"):
        return
    sp, lp, rp = c.get("startupProbe", {}), c.get("livenessProbe", {}), c.get("readinessProbe", {})
    check(lp.get("httpGet", {}).get("path") == "/health/live", "livenessProbe on /health/live")
    check(rp.get("httpGet", {}).get("path") == "/health/ready", "readinessProbe on /health/ready")
    check(sp.get("httpGet", {}).get("path") == "/health/live", "startupProbe on /health/live")
    startup_s = sp.get("periodSeconds", 10) * sp.get("failureThreshold", 3)
    check(startup_s >= values["probes"]["startup"]["maxSeconds"],
          f"startupProbe allows {startup_s} s >= probes.startup.maxSeconds for model loading")
    drain = values["drain"]
    pre = c.get("lifecycle", {}).get("preStop", {})
    if drain["preStopSleepSeconds"] > 0:
        check(pre.get("sleep", {}).get("seconds") == drain["preStopSleepSeconds"], "preStop sleep drain")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    need = drain["preStopSleepSeconds"] + drain["delaySeconds"] + drain["maxRequestSeconds"]
    check(grace > need, f"terminationGracePeriodSeconds {grace} > preStop + drain delay + longest request ({need})")
    cm = one(docs, "ConfigMap")
    if check(cm is not None, "one ConfigMap"):
        cfg = yaml.safe_load(cm["data"]["config.yaml"])
        srv = cfg["server"]
        check(srv.get("drain_delay_ms") == drain["delaySeconds"] * 1000, "server.drain_delay_ms from drain.delaySeconds")
        check(srv.get("shutdown_timeout_ms") == drain["maxRequestSeconds"] * 1000,
              "server.shutdown_timeout_ms from drain.maxRequestSeconds")
        check(srv.get("listen", "").startswith("0.0.0.0:"), "colo-server listens on all addresses")
        check(bool(cfg.get("models")), "models in config.yaml")
    psc, csc = pod.get("securityContext", {}), c.get("securityContext", {})
    check(psc.get("runAsNonRoot") is True and psc.get("runAsUser", 0) != 0, "pod runs as non-root")
    check(csc.get("readOnlyRootFilesystem") is True, "read-only root filesystem")
    check(csc.get("allowPrivilegeEscalation") is False, "no privilege escalation")
    check(csc.get("capabilities", {}).get("drop") == ["ALL"], "every capability dropped")
    limits = c.get("resources", {}).get("limits", {})
    gpu = values["gpu"]
    if gpu["enabled"]:
        check(str(limits.get(gpu["resourceName"])) == str(gpu["count"]), f"limits {gpu['resourceName']}: {gpu['count']}")
        for k, v in gpu["nodeSelector"].items():
            check(pod.get("nodeSelector", {}).get(k) == v, f"GPU nodeSelector {k}")
        check(all(t in pod.get("tolerations", []) for t in gpu["tolerations"]), "GPU tolerations")
    else:
        everything = yaml.safe_dump([d for _, d in docs])
        check("nvidia.com/gpu:" not in everything.replace("nvidia.com/gpu.present", ""),
              "no nvidia.com/gpu resource in the CPU variant")
    mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
    check("weights" in mounts and "config" in mounts, "weights and config mounted")
    svc = one(docs, "Service")
    check(svc is not None and svc["spec"]["ports"][0]["targetPort"] == "http", "a Service to the http port")
    multi = values["replicaCount"] > 1 or (values["autoscaling"]["enabled"] and values["autoscaling"]["maxReplicas"] > 1)
    if values["podDisruptionBudget"]["enabled"] and multi:
        check(one(docs, "PodDisruptionBudget") is not None, "a PodDisruptionBudget")
    if values["autoscaling"]["enabled"] and not values["autoscaling"]["keda"]["enabled"]:
        hpa = one(docs, "HorizontalPodAutoscaler")
        check(hpa is not None and hpa["apiVersion"] == "autoscaling/v2", "an autoscaling/v2 HPA")
        check("replicas" not in dep["spec"], "no fixed replicas under the HPA")


def merged_values(chart_defaults, override):
    """The chart's defaults with override applied (Helm's coalescing, for the checks)."""
    def merge(a, b):
        if isinstance(a, dict) and isinstance(b, dict):
            out = dict(a)
            for k, v in b.items():
                out[k] = merge(a.get(k), v) if k in a else v
            return out
        return b
    return merge(chart_defaults, override or {})


def check_config(check, docs, colo_server, tmp, name):
    """colo-server --check-config on the rendered config, where the weights are cached."""
    cm = one(docs, "ConfigMap")
    cfg = yaml.safe_load(cm["data"]["config.yaml"])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    missing = [m["source"]["file"] for m in cfg["models"] if "source" in m and
               not os.path.exists(os.path.join(cache, "colo", "models", m["source"]["file"]))]
    if missing:
        print(f"    --check-config skipped: weights not in the cache ({', '.join(missing)}; scripts/fetch-models.sh)")
        return
    if cfg["server"].get("device") == "cuda" and subprocess.run(["sh", "-c", "nvidia-smi -L >/dev/null 2>&1"]).returncode:
        # no GPU here: the fractions are checked against an 80 GiB budget on the CPU
        cfg["server"]["device"] = "cpu"
        cfg["server"]["cpu_memory_bytes"] = "80GiB"
        print("    (no GPU: device cuda checked as cpu with an 80 GiB budget)")
    path = os.path.join(tmp, f"{name}.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    r = subprocess.run([colo_server, "--config", path, "--check-config"], capture_output=True, text=True)
    check(r.returncode == 0, f"colo-server --check-config accepts the rendered config: {r.stdout.strip()} "
                             f"{r.stderr.strip()}")
    if r.returncode == 0:
        print(f"    colo-server --check-config: {r.stdout.strip()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--chart", default=os.path.join(root, "deploy", "helm", "colo"))
    ap.add_argument("--kube-version", action="append",
                    help=f"Kubernetes version(s) to validate against (default {MIN_KUBE} and the newest known)")
    ap.add_argument("--colo-server", help="check the rendered config.yaml with this colo-server --check-config")
    ap.add_argument("--out", help="write the rendered manifests here")
    args = ap.parse_args()

    versions = args.kube_version or [MIN_KUBE, kubernetes_validate.latest_version()]
    chart = helm.Chart.load(args.chart)
    defaults = chart.values
    files = [None] + sorted(glob.glob(os.path.join(args.chart, "values-*.yaml"))) + \
        sorted(glob.glob(os.path.join(args.chart, "ci", "*-values.yaml")))
    check = Checks()
    validated = skipped_custom = 0
    print(f"k8s-validate: chart {chart.name} {chart.version} (Helm SDK {helm.helm_sdk_version()}), "
          f"Kubernetes {', '.join(versions)}")
    with tempfile.TemporaryDirectory() as tmp:
        for vf in files:
            name = os.path.relpath(vf, args.chart) if vf else "values.yaml (defaults)"
            print(f"== {name}")
            override = load_values(vf)
            lint = helm.lint(args.chart, override, strict=True, kube_version="v" + versions[-1])
            bad = [m for m in lint.get("messages", []) if m.get("severity", 0) >= 2] + \
                [{"error": e} for e in lint.get("errors") or []]
            for m in bad:
                print(f"    lint: {m.get('path', '')}: {m['error']}")
            check(not bad, f"{name}: helm lint --strict")
            manifests = chart.render(override, name="colo", namespace="colo", is_install=True)
            docs = rendered_docs(manifests)
            if args.out:
                d = os.path.join(args.out, os.path.basename(vf or "values.yaml").removesuffix(".yaml"))
                os.makedirs(d, exist_ok=True)
                with open(os.path.join(d, "manifests.yaml"), "w") as f:
                    yaml.safe_dump_all([o for _, o in docs], f, sort_keys=False)
            kinds = []
            for tpl, obj in docs:
                kinds.append(obj.get("kind", "?"))
                if obj.get("kind") in CUSTOM_KINDS:
                    skipped_custom += 1
                    continue
                for v in versions:
                    try:
                        kubernetes_validate.validate(obj, v, strict=True)
                        validated += 1
                    except kubernetes_validate.ValidationError as e:
                        check(False, f"{name}: {tpl} ({obj.get('kind')}) against Kubernetes {v}: "
                                     f"{'.'.join(str(p) for p in e.path)}: {e.message}")
                    except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as e:
                        check(False, f"{name}: {tpl} ({obj.get('kind')}): no schema for Kubernetes {v}: {e}")
            print(f"    rendered: {', '.join(kinds)}")
            check_deployment(check, docs, merged_values(defaults, override))
            if args.colo_server:
                check_config(check, docs, args.colo_server, tmp, os.path.basename(vf or "values").removesuffix(".yaml"))
    print(f"k8s-validate: {len(files)} values files, {validated} manifest validations, "
          f"{skipped_custom} custom resources not validated (CRDs), {check.n} checks, {len(check.failed)} failed")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
