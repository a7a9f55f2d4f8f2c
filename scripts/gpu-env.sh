# shellcheck shell=bash
# Sourced by scripts/gpu-check.sh and scripts/gpu-run.sh on a GPU machine:
# makes build-gpu/ usable there. Not a program of its own.
#
# 1. When .gpu-pack/colo-gpu.tar.xz (scripts/gpu-pack.sh) is newer than
#    build-gpu/, unpacks it: build-gpu/ and .devpkgs/ (tar with xz, or
#    Python's tarfile where tar cannot read xz).
# 2. Unpacks .devpkgs/*.deb with dpkg -x into .devpkgs/root and puts their
#    library folders on LD_LIBRARY_PATH (nothing is installed); finds CUDA's
#    own libraries (cudart, cuBLAS) where the loader does not know them
#    (gpu_find_libs, also for other carried programs).
# 3. CMake baked the absolute path of the tree where build-gpu/ was made into
#    the test list and the test programs (test data). When this tree sits
#    elsewhere, links that path to this tree if it is free, so every baked
#    path resolves; otherwise (or with COLO_GPU_NO_LINK=1) rewrites the test
#    lists to this tree (tests reading files through a baked path may then
#    fail: move the tree to the original path).
# Sets GPU_ROOT (this tree) and GPU_TESTDIR (build-gpu/ as ctest must see
# it); returns non-zero, with a message, when build-gpu/ cannot run here.

# gpu_find_libs PROGRAM: puts the folders of the shared libraries PROGRAM
# needs and the loader does not find (CUDA's own, which a machine may keep
# in a Python environment) on LD_LIBRARY_PATH; non-zero, naming them, when
# some stay missing.
gpu_find_libs() {
  local l hit blas
  [ -x "$1" ] || return 0
  for l in $(ldd "$1" | awk '/not found/ {print $1}'); do
    hit=$(find /usr/local /opt /usr/lib -name "$l" 2>/dev/null | head -1)
    [ -n "$hit" ] && LD_LIBRARY_PATH="$(dirname "$hit"):${LD_LIBRARY_PATH:-}" && export LD_LIBRARY_PATH
  done
  ! ldd "$1" | grep 'not found' >&2 || return 1
  # cuBLAS is opened at the first CUDA stream (dlopen), so ldd does not list
  # it: the same major version as the runtime, found the same way
  blas=$(ldd "$1" | awk '/libcudart\.so\./ {sub(/cudart/, "cublas", $1); print $1; exit}')
  [ -n "$blas" ] || return 0
  if ! /sbin/ldconfig -p 2>/dev/null | grep -q "$blas"; then
    hit=$(find /usr/local /opt /usr/lib -name "$blas" 2>/dev/null | head -1)
    if [ -z "$hit" ]; then
      echo "gpu-env: $blas not found (colo opens it at the first CUDA stream)" >&2
      return 1
    fi
    LD_LIBRARY_PATH="$(dirname "$hit"):${LD_LIBRARY_PATH:-}" && export LD_LIBRARY_PATH
  fi
}

gpu_env() {
  GPU_ROOT=$(pwd -P)
  local pack=.gpu-pack/colo-gpu.tar.xz
  if [ -f "$pack" ] && { [ ! -f build-gpu/colo-commit.txt ] || [ "$pack" -nt build-gpu/colo-commit.txt ]; }; then
    rm -rf build-gpu .devpkgs
    if ! tar -xJf "$pack" 2>/dev/null; then
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(".")' "$pack" ||
        { echo "gpu-env: cannot unpack $pack" >&2; return 1; }
    fi
    touch build-gpu/colo-commit.txt
    echo "gpu-env: unpacked $pack (commit $(cat build-gpu/colo-commit.txt))"
  fi
  [ -f build-gpu/CMakeCache.txt ] || { echo "gpu-env: no build-gpu/ (run scripts/gpu-pack.sh where colo builds)" >&2; return 1; }

  if ls .devpkgs/*.deb >/dev/null 2>&1; then
    rm -rf .devpkgs/root && mkdir -p .devpkgs/root
    local f
    for f in .devpkgs/*.deb; do
      dpkg -x "$f" .devpkgs/root || { echo "gpu-env: cannot unpack $f" >&2; return 1; }
    done
    local libdirs
    libdirs=$(find "$GPU_ROOT/.devpkgs/root" -name '*.so*' -printf '%h\n' | sort -u | tr '\n' ':')
    export LD_LIBRARY_PATH="${libdirs}${LD_LIBRARY_PATH:-}"
  fi
  if ! gpu_find_libs build-gpu/colo-server; then
    echo "gpu-env: shared libraries are missing (above); run scripts/gpu-pack.sh where colo builds" >&2
    return 1
  fi

  local orig
  orig=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' build-gpu/CMakeCache.txt)
  GPU_TESTDIR="$GPU_ROOT/build-gpu"
  if [ -n "$orig" ] && [ "$orig" != "$GPU_ROOT" ]; then
    if [ -e "$orig" ] && [ "$(cd "$orig" 2>/dev/null && pwd -P)" = "$GPU_ROOT" ]; then
      GPU_TESTDIR="$orig/build-gpu"
    elif [ -z "${COLO_GPU_NO_LINK:-}" ] && [ ! -e "$orig" ] && mkdir -p "$(dirname "$orig")" 2>/dev/null &&
      ln -s "$GPU_ROOT" "$orig" 2>/dev/null; then
      echo "gpu-env: linked $orig -> $GPU_ROOT (the build's original tree)"
      GPU_TESTDIR="$orig/build-gpu"
    else
      echo "gpu-env: rewriting test paths $orig -> $GPU_ROOT (tests reading files through baked paths may fail)"
      find build-gpu -name CTestTestfile.cmake -exec sed -i "s#$orig#$GPU_ROOT#g" {} +
    fi
  fi
  export GPU_ROOT GPU_TESTDIR
}
