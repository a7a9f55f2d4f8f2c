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
#
# A new user's first contact (--first-contact): a clean Debian 12 root
# (debootstrap minbase from Debian's mirror, plus git and ca-certificates;
# the base kept in build-rootfs/clean-base and copied fresh for each run)
# with this repository's HEAD cloned into /root/colo, where the README's
# commands run as root in a chroot, with only Debian's mirror and PyPI to
# download from: scripts/run.sh, timed until GET /health/ready answers 200
# on port 8080 (which must be free), then scripts/readme-check.py (every
# README example against the servers it describes), and with --with-tests
# scripts/test.sh, timed too (COLO_TEST_QUICK=1 passes on: the normal
# build only). Its lines and times are what
# docs/BENCHMARKS.md records ("First contact"); the logs stay in
# build-rootfs/first-contact/.
#
# Needs root (chroot, mounts), debootstrap for the default, curl.
# Exit status: 0 it served, 1 it did not, 2 usage, 77 what it needs is missing.
#
#   scripts/rootfs-check.sh [--image IMAGE | --import-base] [--port N]
#   scripts/rootfs-check.sh --first-contact [--with-tests]
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD

image="" import_base=0 port=18080 first_contact=0 with_tests=0
while [ $# -gt 0 ]; do
  case "$1" in
    --image) image=${2:?}; shift 2 ;;
    --import-base) import_base=1; shift ;;
    --first-contact) first_contact=1; shift ;;
    --with-tests) with_tests=1; shift ;;
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

# first_contact: see the header. Runs in a subshell of its own, its mounts
# undone by its trap.
first_contact() {
  local base=$top/build-rootfs/clean-base out=$top/build-rootfs/first-contact root t0 t ready_s status
  local head; head=$(git -C "$top" rev-parse HEAD)
  [ -d "$base" ] || debootstrap_into "$base" --include=git,ca-certificates
  if curl -s -o /dev/null --max-time 2 http://127.0.0.1:8080/; then
    echo "rootfs-check: port 8080 is in use here; the README's server needs it" >&2
    exit 1
  fi
  root=$out/root
  if [ -d "$out" ]; then
    for m in dev/pts dev sys proc; do umount "$root/$m" 2>/dev/null || true; done
    rm -rf "$out"
  fi
  mkdir -p "$out"
  cp -a "$base" "$root"
  # The root uses this machine's network, so it trusts what this machine
  # trusts: the certificate authorities added here (a TLS proxy's) are added
  # inside, where ca-certificates keeps them through later installs.
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null 2>&1
  fi
  git init -q "$root/root/colo"
  git -C "$root/root/colo" fetch -q "$top" "$head"
  git -C "$root/root/colo" checkout -q FETCH_HEAD
  echo "rootfs-check: clean Debian 12 root in $root ($(du -sh "$root" | cut -f1)), colo $(git -C "$top" rev-parse --short HEAD) in /root/colo"
  mounted=()
  mount -t proc proc "$root/proc" && mounted+=("$root/proc")
  mount -t sysfs sys "$root/sys" && mounted+=("$root/sys")
  mount --bind /dev "$root/dev" && mounted+=("$root/dev")
  mount --bind /dev/pts "$root/dev/pts" && mounted+=("$root/dev/pts")
  trap 'kill -TERM -- -$pid 2>/dev/null || true; sleep 1;
        for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" || true; done' EXIT
  inside() { # CMD...: as a new user's shell would run it, in /root/colo
    env -i HOME=/root LANG=C.UTF-8 TERM=dumb PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      ${COLO_TEST_QUICK:+COLO_TEST_QUICK=$COLO_TEST_QUICK} \
      chroot "$root" bash -c 'cd /root/colo && exec "$@"' bash "$@"
  }

  echo "== scripts/run.sh (log: $out/run.log)"
  t0=$SECONDS
  setsid bash -c "$(declare -f inside); root=$root; inside scripts/run.sh" >"$out/run.log" 2>&1 &
  pid=$!
  status=""
  while kill -0 "$pid" 2>/dev/null; do
    status=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 http://127.0.0.1:8080/health/ready || true)
    [ "$status" = 200 ] && break
    sleep 0.5
  done
  ready_s=$((SECONDS - t0))
  sed 's/^/   /' "$out/run.log" | grep -v ' INFO  request ' | head -n 40
  if [ "$status" != 200 ]; then
    echo "rootfs-check: FAILED: scripts/run.sh did not serve (/health/ready: '${status:-nothing}')" >&2
    exit 1
  fi
  echo "rootfs-check: scripts/run.sh served after ${ready_s} s on $(nproc) cores"
  echo "== the README's first example (inside)"
  inside bash -c "$(sed -n '/^<!-- readme-check: config\/default.yaml -->$/,/^```$/p' README.md | sed -n '/^curl/,/^```$/p' | sed '$d')" \
    | tee "$out/first-request.json" | sed 's/^/   /'
  echo
  kill -TERM -- -"$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  echo "== scripts/readme-check.py (inside; log: $out/readme-check.log)"
  t=$SECONDS
  # the embeddings' section serves config/colocated.yaml: MiniLM too
  if ! { inside scripts/fetch-models.sh --config config/colocated.yaml &&
         inside python3 scripts/readme-check.py; } >"$out/readme-check.log" 2>&1; then
    tail -n 30 "$out/readme-check.log" >&2
    echo "rootfs-check: FAILED: the README's examples" >&2
    exit 1
  fi
  echo "   $(tail -n 1 "$out/readme-check.log") ($((SECONDS - t)) s)"
  if [ "$with_tests" = 1 ]; then
    echo "== scripts/test.sh (inside; log: $out/test.log)"
    t=$SECONDS
    local rc=0
    inside scripts/test.sh >"$out/test.log" 2>&1 || rc=$?
    grep -E '^(test|install-deps|fetch-models|k8s-deps):|^built |^== |Skipped|\*\*\*' "$out/test.log" | sed 's/^/   /' | tail -n 60
    echo "rootfs-check: scripts/test.sh exited $rc after $((SECONDS - t)) s: $(tail -n 1 "$out/test.log")"
    [ $rc -eq 0 ] || exit 1
  fi
  echo "rootfs-check: first contact passed"
}

if [ "$first_contact" = 1 ]; then
  (first_contact)
  exit $?
fi

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
