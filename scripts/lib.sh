# Sourced by colo's scripts: the paths they share, computed in one place.
#   COLO_CACHE   ${XDG_CACHE_HOME:-$HOME/.cache}/colo: virtualenvs and downloads
#   COLO_MODELS  $COLO_CACHE/models: the model cache (scripts/fetch-models.sh
#                fills it; a model's source: in the config reads it, as
#                colo-server's colo_config_model_cache does)
#   BUILD        the build folder: $BUILD when set, else build
# Exits 2 when neither XDG_CACHE_HOME nor HOME is set.
# colo_build_missing PROGRAM...: builds the programs in $BUILD when one is
# missing (configuring $BUILD, Release, when it never was).
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
