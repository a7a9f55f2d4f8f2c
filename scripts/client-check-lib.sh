# Shared by scripts/openai-check.sh and scripts/anthropic-check.sh: build
# colo-server and colo-mkmodel when missing, a pinned client in a virtualenv,
# the model to check (check_prepare), and colo-server started on a free port
# (its port in $port, its pid in $server_pid) and stopped. Sourced; expects
# BUILD, and `set -euo pipefail`.

# check_build: colo-server and colo-mkmodel in $BUILD.
check_build() { colo_build_missing colo-server colo-mkmodel; }

# check_venv NAME MODULE PACKAGE VERSION VENV: the package at that version
# in the virtualenv (created when missing); non-zero when it cannot be installed.
# Under a lock on VENV.lock: the checks of a model and of the synthetic model
# run side by side under ctest -j and share one virtualenv.
check_venv() {
  local name=$1 module=$2 pkg=$3 ver=$4 venv=$5
  mkdir -p "$(dirname "$venv")"
  (
    flock 9
    if ! "$venv/bin/python" -c "import $module, sys; sys.exit($module.__version__ != '$ver')" 2>/dev/null; then
      echo "$name: installing $pkg==$ver into $venv" >&2
      { python3 -m venv "$venv" && "$venv/bin/python" -m pip install -q --disable-pip-version-check "$pkg==$ver"; } >&2
    fi
  ) 9>"$venv.lock"
}

server_pid=
check_tmp=

# check_cleanup: stops a server still running and removes $check_tmp (the EXIT trap).
check_cleanup() {
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  [ -z "$check_tmp" ] || rm -rf "$check_tmp"
}

# check_start NAME CONFIG KEY_VAR KEY: colo-server on CONFIG with KEY in
# the environment variable KEY_VAR, until /health/ready answers; sets $port.
check_start() {
  local name=$1 config=$2 var=$3 key=$4 dir
  dir=$(dirname "$config")
  env "$var=$key" "$BUILD/colo-server" --config "$config" --port-file "$dir/port" >"$dir/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 300); do
    if [ -s "$dir/port" ] && curl -sf "http://127.0.0.1:$(cat "$dir/port")/health/ready" >/dev/null 2>&1; then
      break
    fi
    kill -0 "$server_pid" 2>/dev/null || { cat "$dir/server.log" >&2; exit 1; }
    sleep 0.1
  done
  [ -s "$dir/port" ] || { echo "$name: colo-server did not start" >&2; cat "$dir/server.log" >&2; exit 1; }
  port=$(cat "$dir/port")
}

# check_stop NAME CONFIG: SIGTERM; non-zero (with the log's end) when it did not exit cleanly.
check_stop() {
  local name=$1 dir rc=0
  dir=$(dirname "$2")
  kill -TERM "$server_pid"
  if ! wait "$server_pid"; then
    echo "$name: colo-server did not exit cleanly on SIGTERM" >&2
    tail -20 "$dir/server.log" >&2
    rc=1
  fi
  server_pid=
  return $rc
}

# check_prepare WHO PACKAGE VERSION ARG: the usage (ARG "" or --smollm2, else
# exit 2), colo-server and colo-mkmodel built, PACKAGE==VERSION in $COLO_VENV
# (exit 77 when it cannot be installed), a scratch folder $tmp removed at
# exit, and the model in $model, named $name: SmolLM2 from the model cache
# with --smollm2 (exit 77 when it is not there), else a synthetic one.
# Sets $smollm2, $py and $cache too.
check_prepare() {
  local who=$1 pkg=$2 ver=$3
  smollm2=0
  case "${4:-}" in
  --smollm2) smollm2=1 ;;
  "") ;;
  *) echo "usage: scripts/$who.sh [--smollm2]" >&2; exit 2 ;;
  esac
  check_build
  py="$COLO_VENV/bin/python"
  if ! check_venv "$who" "$pkg" "$pkg" "$ver" "$COLO_VENV"; then
    echo "$who: cannot install the $pkg client (no PyPI?): skipped" >&2
    exit 77
  fi
  cache=$COLO_MODELS
  tmp=$(mktemp -d)
  check_tmp=$tmp
  trap check_cleanup EXIT
  if [ "$smollm2" = 1 ]; then
    model="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
    [ -r "$model" ] || { echo "$who: no $model (scripts/fetch-models.sh): skipped" >&2; exit 77; }
    name=smollm2
  else
    model="$tmp/tiny.gguf"
    "$BUILD/colo-mkmodel" --out "$model" --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn 128 \
      --vocab 512 --ctx 2048 --seed 7 >/dev/null
    name=tiny
  fi
}
