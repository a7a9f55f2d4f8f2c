#!/usr/bin/env bash
# Installs the offline Kubernetes packages that scripts/k8s-validate.py uses
# (Helm 4 through helm-python-sdk, no helm binary; kubernetes-validate with
# the Kubernetes API schemas) from PyPI into their own virtual environment,
# ${XDG_CACHE_HOME:-$HOME/.cache}/colo/k8s-venv (or $COLO_K8S_VENV).
# Idempotent: nothing is fetched when both import. About 110 MB to download.
# pip's output goes to k8s-deps.log in that folder (its end is printed on
# failure). Exit 0 when both are usable, 1 otherwise.
set -euo pipefail

HELM_SDK=helm-python-sdk==0.2.2
KUBE_VALIDATE=kubernetes-validate==1.37.0

if [ -n "${COLO_K8S_VENV:-}" ]; then
  venv=$COLO_K8S_VENV
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
  venv=$XDG_CACHE_HOME/colo/k8s-venv
else
  venv=${HOME:?k8s-deps: neither XDG_CACHE_HOME nor HOME is set}/.cache/colo/k8s-venv
fi
if "$venv/bin/python3" -c 'import helm_python, kubernetes_validate, yaml' 2>/dev/null; then
  echo "k8s-deps: present in $venv"
  exit 0
fi
mkdir -p "$venv"
log=$venv/k8s-deps.log
echo "k8s-deps: installing $HELM_SDK $KUBE_VALIDATE into $venv (log: $log)"
if ! { python3 -m venv "$venv" &&
       "$venv/bin/python3" -m pip install --disable-pip-version-check --no-input -q "$HELM_SDK" "$KUBE_VALIDATE"; } \
       >"$log" 2>&1; then
  echo "k8s-deps: failed; the end of $log:" >&2
  tail -n 20 "$log" >&2
  exit 1
fi
echo "k8s-deps: done"
