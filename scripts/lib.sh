# Sourced by colo's scripts: the paths they share, computed in one place.
#   COLO_CACHE   ${XDG_CACHE_HOME:-$HOME/.cache}/colo: virtualenvs and downloads
#   COLO_MODELS  $COLO_CACHE/models: the model cache (scripts/fetch-models.sh
#                fills it; a model's source: in the config reads it, as
#                colo-server's colo_config_model_cache does)
#   BUILD        the build folder: $BUILD when set, else build
# Exits 2 when neither XDG_CACHE_HOME nor HOME is set.
# colo_build_missing PROGRAM...: builds the programs in $BUILD when one is
# missing (configuring $BUILD, Release, when it never was).
# colo_wait_health URL PID LOG: waits up to 5 minutes for URL to answer
# 2xx; fails, naming LOG, when the process PID exits first or it never does.
# colo_link_real_models DIR: links SmolLM2 (smollm2.gguf) and Gemma 3
# (gemma3.gguf) from the model cache into DIR; exits 2 when one is missing.
# colo_stop_server: stops the server whose pid is in $server (if any) and
# empties it; scripts that start one set `trap colo_stop_server EXIT`.
if [ -n "${XDG_CACHE_HOME:-}" ]; then
  COLO_CACHE=$XDG_CACHE_HOME/colo
elif [ -n "${HOME:-}" ]; then
  COLO_CACHE=$HOME/.cache/colo
else
  echo "$(basename "$0"): neither XDG_CACHE_HOME nor HOME is set" >&2
  exit 2
fi
COLO_MODELS=$COLO_CACHE/models
BUILD=${BUILD:-build}

colo_build_missing() {
  local p
  for p in "$@"; do
    if [ ! -x "$BUILD/$p" ]; then
      [ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
      cmake --build "$BUILD" -j"$(nproc 2>/dev/null || echo 2)" --target "$@" >/dev/null
      break
    fi
  done
}

colo_wait_health() { # URL PID LOG
  local _
  for _ in $(seq 1 600); do
    curl -fs "$1" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || { echo "$(basename "$0"): the server exited; see $3" >&2; return 1; }
    sleep 0.5
  done
  echo "$(basename "$0"): no answer from $1; see $3" >&2
  return 1
}

server=
colo_stop_server() {
  if [ -n "$server" ]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    server=
  fi
}

colo_link_real_models() { # DIR
  local f src
  for f in SmolLM2-135M-Instruct.Q4_1.gguf:smollm2 gemma-3-270m-q4_k_m.gguf:gemma3; do
    src="$COLO_MODELS/${f%%:*}"
    [ -r "$src" ] || { echo "$(basename "$0"): no $src (run scripts/fetch-models.sh)" >&2; exit 2; }
    ln -sf "$src" "$1/${f##*:}.gguf"
  done
}
