#!/usr/bin/env bash
# Proves that colo's runtime image serves: its root filesystem, mounted
# read-only with a tmpfs on /tmp as the Helm chart runs it, entered with
# chroot as the unprivileged user 65532; colo-server there must find every
# library it links (ldd), load a synthetic model, answer GET /health/ready
# 200 and one generation over loopback, and exit 0 on SIGTERM.
#
# Where the root filesystem comes from:
#   --image IMAGE   an image built from the Containerfile (scripts/k8s-image.sh),
#                   mounted with buildah (no container runtime needed)
#   (default)       the same runtime root filesystem made without container
#                   tools: debootstrap (Debian 12 minbase, from Debian's mirror)
#                   plus the runtime-base stage's packages and user, and colo's
#                   programs from a CPU build (build-rootfs/build); kept in
#                   build-rootfs/runtime and reused
#   --import-base   only make the debootstrap base (build-rootfs/base) and
#                   import it into buildah/podman as localhost/colo-bookworm-base,
#                   a BASE_IMAGE for the Containerfile where no registry is reachable
#
# Needs root (chroot, mounts), debootstrap for the default, curl.
# Exit status: 0 it served, 1 it did not, 2 usage, 77 what it needs is missing.
#
#   scripts/rootfs-check.sh [--image IMAGE | --import-base] [--port N]
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD

image="" import_base=0 port=18080
while [ $# -gt 0 ]; do
  case "$1" in
    --image) image=${2:?}; shift 2 ;;
    --import-base) import_base=1; shift ;;
    --port) port=${2:?}; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "rootfs-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

need() { command -v "$1" >/dev/null || { echo "rootfs-check: SKIP: $1 is not installed ($2)" >&2; exit 77; }; }
[ "$(id -u)" -eq 0 ] || { echo "rootfs-check: SKIP: needs root (chroot and mounts)" >&2; exit 77; }
need curl "apt-get install curl"

mirror=http://deb.debian.org/debian
# The runtime-base stage's packages (Containerfile).
runtime_pkgs=libevent-2.1-7,libevent-pthreads-2.1-7,libjansson4,libyaml-0-2,libopenblas0-pthread

debootstrap_into() { # DIR [--include=...]
  local dir=$1
  shift
  need debootstrap "apt-get install debootstrap"
  mkdir -p "$(dirname "$dir")"
  echo "rootfs-check: debootstrap bookworm into $dir (log: $dir.log)"
  if ! debootstrap --variant=minbase "$@" bookworm "$dir.tmp" "$mirror" >"$dir.log" 2>&1; then
    echo "rootfs-check: debootstrap failed; the end of $dir.log:" >&2
    tail -n 20 "$dir.log" >&2
    exit 1
  fi
  mv "$dir.tmp" "$dir"
}

if [ "$import_base" = 1 ]; then
  base=build-rootfs/base
  [ -d "$base" ] || debootstrap_into "$top/$base"
  tool=$(command -v buildah || command -v podman || true)
  [ -n "$tool" ] || { echo "rootfs-check: SKIP: neither buildah nor podman is installed" >&2; exit 77; }
  tar -C "$base" -c . | "$tool" import - localhost/colo-bookworm-base:latest >/dev/null
  echo "rootfs-check: imported $base as localhost/colo-bookworm-base:latest"
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/colo-rootfs-XXXXXX")
ro=$work/root
mkdir -p "$ro"
mounted=() container="" pid=""
cleanup() {
  [ -z "$pid" ] || kill -9 "$pid" 2>/dev/null || true
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" || true; done
  if [ -n "$container" ]; then buildah umount "$container" >/dev/null || true; buildah rm "$container" >/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

if [ -n "$image" ]; then
  need buildah "apt-get install buildah"
  container=$(buildah from --pull-never "$image")
  src=$(buildah mount "$container")
  echo "rootfs-check: image $image mounted at $src"
else
  src=$top/build-rootfs/runtime
  if [ ! -d "$src" ]; then
    debootstrap_into "$src" --include="$runtime_pkgs"
    # the runtime-base stage's user and folders
    chroot "$src" groupadd --gid 65532 colo
    chroot "$src" useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin colo
    install -d -o 65532 -g 65532 "$src/var/cache/colo/models" "$src/etc/colo"
    rm -rf "$src"/var/cache/apt/archives/*.deb "$src"/var/lib/apt/lists/*
  fi
  # colo's programs from a CPU build, as the build-cpu stage makes them
  bdir=build-rootfs/build
  echo "rootfs-check: building colo (CPU) in $bdir (log: $bdir/build.log)"
  mkdir -p "$bdir"
  if ! { cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DCOLO_CUDA=OFF &&
         cmake --build "$bdir" -j"$(nproc)" --target colo-server colo-loadtest colo-generate colo-mkmodel; } \
         >"$bdir/build.log" 2>&1; then
    echo "rootfs-check: the build failed; the end of $bdir/build.log:" >&2
    tail -n 20 "$bdir/build.log" >&2
    exit 1
  fi
  install -m 0755 "$bdir"/colo-server "$bdir"/colo-loadtest "$bdir"/colo-generate "$bdir"/colo-mkmodel "$src/usr/local/bin/"
  echo "rootfs-check: root filesystem $src ($(du -sh "$src" | cut -f1))"
fi

# As the chart runs it: the root read-only, /tmp a tmpfs, the config and the
# weights on their own mounts (here tmpfs folders filled before the check).
mount --bind "$src" "$ro" && mounted+=("$ro")
mount -o remount,ro,bind "$ro"
for d in tmp etc/colo var/cache/colo; do
  mount -t tmpfs -o mode=0755,uid=65532,gid=65532 tmpfs "$ro/$d" && mounted+=("$ro/$d")
done
mount -t proc proc "$ro/proc" && mounted+=("$ro/proc")
if touch "$ro/usr/local/bin/.w" 2>/dev/null; then
  echo "rootfs-check: the root is not read-only" >&2
  exit 1
fi

echo "== ldd colo-server (inside)"
if chroot "$ro" /usr/bin/ldd /usr/local/bin/colo-server | tee "$work/ldd.txt" | grep -q "not found"; then
  cat "$work/ldd.txt" >&2
  echo "rootfs-check: FAILED: a library of colo-server is missing" >&2
  exit 1
fi
echo "   $(wc -l <"$work/ldd.txt") libraries, all found"

install -d -o 65532 -g 65532 "$ro/var/cache/colo/models"
chroot --userspec=65532:65532 "$ro" /usr/local/bin/colo-mkmodel --out /var/cache/colo/models/m.gguf --layers 2 \
  --dim 64 --heads 4 --kv-heads 2 --ffn 128 --vocab 512 --ctx 256 >/dev/null
cat >"$ro/etc/colo/config.yaml" <<EOF
server: { listen: "127.0.0.1:$port", device: cpu, threads: 1, cpu_memory_bytes: 256MiB, drain_delay_ms: 500 }
models:
  - { name: m, kind: llama, path: /var/cache/colo/models/m.gguf, memory_fraction: 0.5 }
EOF

echo "== colo-server inside, as 65532:65532, root read-only"
env -i PATH=/usr/local/bin:/usr/bin:/bin XDG_CACHE_HOME=/var/cache XDG_STATE_HOME=/tmp \
  "$(command -v chroot)" --userspec=65532:65532 "$ro" /usr/local/bin/colo-server --config /etc/colo/config.yaml \
  >"$work/server.log" 2>&1 &
pid=$!
status=""
for _ in $(seq 1 300); do
  status=$(curl -s -o "$work/ready.json" -w '%{http_code}' "http://127.0.0.1:$port/health/ready" || true)
  [ "$status" = 200 ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ "$status" != 200 ]; then
  cat "$work/server.log" >&2
  echo "rootfs-check: FAILED: /health/ready answered '${status:-nothing}'" >&2
  exit 1
fi
echo "   GET /health/ready -> $status $(cat "$work/ready.json")"
gen=$(curl -s -w ' %{http_code}' -X POST "http://127.0.0.1:$port/v1/models/m/infer" \
  -d '{"prompt":"hello","max_tokens":8,"seed":1}')
case "$gen" in
  *' 200') echo "   POST /v1/models/m/infer -> 200 ($(echo "$gen" | grep -o '"completion_tokens":[0-9]*'))" ;;
  *) cat "$work/server.log" >&2; echo "rootfs-check: FAILED: generation answered $gen" >&2; exit 1 ;;
esac
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=""
echo "   SIGTERM -> exit $rc"
[ "$rc" -eq 0 ] || { cat "$work/server.log" >&2; exit 1; }
echo "rootfs-check: passed (${image:-debootstrap root filesystem build-rootfs/runtime})"
