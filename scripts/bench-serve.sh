#!/usr/bin/env bash
# Benchmarks through colo-server, driven by colo-loadtest (docs/BENCHMARKS.md).
#
#   scripts/bench-serve.sh colocation   two copies of one model (priority high and
#                                       low) co-located under each scheduler policy:
#                                       high-priority p99 concurrent/solo, best-effort
#                                       throughput retention, STP; a policy written
#                                       priority:F runs priority with
#                                       best_effort_min_share F; separate+P runs
#                                       colo-loadtest --baseline separate (one server
#                                       per model, then one colo-server under P) and
#                                       gives a row for each; ROUNDS=N repeats the
#                                       list, reversed every other round (alternating)
#   scripts/bench-serve.sh streams      one model: aggregate decode tok/s with 1 and
#                                       with 32 concurrent streams
#   scripts/bench-serve.sh overhead     the server's cost: the same work (one prompt, MAX_TOKENS
#                                       greedy tokens, C sequences at a time) through
#                                       colo-generate --batch C and through colo-server
#                                       under colo-loadtest at C connections, alternating
#                                       ROUNDS times per C in OVERHEAD_CONC; tokens/s
#                                       (prefill included) and the median ratio; the
#                                       server's pool counters (/metrics) are kept in OUT
#   scripts/bench-serve.sh profile      where the CPU's time goes (docs/SCHEDULING.md): one
#                                       model alone at BE_CONC connections, then hi (HI_CONC)
#                                       and be (BE_CONC) in one colo-server under POLICY, then
#                                       as two colo-servers; for each, from /metrics over the
#                                       measured DURATION: tokens/s, the pool workers' time
#                                       (busy, ready, barrier, starved), lock waits, chunks per
#                                       op, steps by kind, the executors' phases, and CPU time
#                                       per token of the process and of its event loop
#   scripts/bench-serve.sh deadline     two models with an SLA at 120% of the load that
#                                       fits it (Poisson arrivals): goodput under fair
#                                       (on_overload: serve) against deadline
#                                       (on_overload: reject), ROUNDS alternating
#
# Environment:
#   MODEL=FILE.gguf        the model (default: SmolLM2 from the model cache)
#   HI_MODEL=, BE_MODEL=   colocation: hi's and be's own models (default MODEL each), e.g. a
#                          small latency-critical model beside a large batch one
#   BUILD=build            the build folder with colo-server and colo-loadtest
#   DEVICE=auto|cpu|cuda   (default auto)
#   POLICIES="timeslice spatial priority partition"   (e.g. "fair priority priority:0.2 deadline")
#   ROUNDS=1               colocation: times through POLICIES
#   HI_SLA="ttft_ms: 1000, tpot_ms: 100"   colocation, policy deadline: hi's sla
#   CONC=4 MAX_TOKENS=32 DURATION=15 WARMUP=3     colocation load per model
#   HI_CONC=$CONC BE_CONC=$CONC                   colocation: each model's own connections
#   STREAMS=32 STREAM_TOKENS=64                   streams scenario
#   MEM_FRACTION=0.2       each model's memory_fraction
#   EXACT=false            colocation, streams, deadline: the models' exact_activations
#   SLA="ttft_ms: 1000, tpot_ms: 150, p99_ms: 4000"   deadline: both models' sla
#   FIT_CONC=2             deadline: closed-loop connections per model whose rate (under fair)
#                          is taken as the load that fits; RATE=R skips that and sets it
#   OVERLOAD=1.2           deadline: offered load over the load that fits
#   OVERHEAD_CONC="1 8" PROMPT="Once upon a time" THREADS=$(nproc)   overhead scenario
#   MAX_BATCH=16           overhead: the server's max_batch_size
#   POLICY=fair            profile: the one server's policy
#   OUT=bench-serve-out    where JSON/HTML reports go
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-colocation}
. scripts/lib.sh
DEVICE=${DEVICE:-auto}
POLICIES=${POLICIES:-timeslice spatial priority partition}
CONC=${CONC:-4}
HI_CONC=${HI_CONC:-$CONC}
BE_CONC=${BE_CONC:-$CONC}
MAX_TOKENS=${MAX_TOKENS:-32}
DURATION=${DURATION:-15}
WARMUP=${WARMUP:-3}
STREAMS=${STREAMS:-32}
STREAM_TOKENS=${STREAM_TOKENS:-64}
MEM_FRACTION=${MEM_FRACTION:-0.2}
EXACT=${EXACT:-false}
OUT=${OUT:-bench-serve-out}
ROUNDS=${ROUNDS:-1}
HI_SLA=${HI_SLA:-ttft_ms: 1000, tpot_ms: 100}
if [ -z "${MODEL:-}" ]; then
  MODEL="$COLO_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"
fi
HI_MODEL=${HI_MODEL:-$MODEL}
BE_MODEL=${BE_MODEL:-$MODEL}
for m in "$MODEL" "$HI_MODEL" "$BE_MODEL"; do
  [ -r "$m" ] || { echo "bench-serve: no model at $m (scripts/fetch-models.sh, or MODEL=...)" >&2; exit 2; }
done
for p in colo-server colo-loadtest; do
  [ -x "$BUILD/$p" ] || { echo "bench-serve: $BUILD/$p is not built" >&2; exit 2; }
done
mkdir -p "$OUT"
tmp=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# http_ok URL: whether GET URL answers 2xx (curl, or Python where there is no curl)
http_ok() {
  if command -v curl >/dev/null; then
    curl -sf "$1" >/dev/null 2>&1
  else
    python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$1" >/dev/null 2>&1
  fi
}

# start_server CONFIG: starts colo-server, waits until ready; sets $port
# table FILE: a TSV file in aligned columns (column(1) is not on every machine)
table() {
  if command -v column >/dev/null; then column -t -s $'\t' "$1"; else cat "$1"; fi
}

start_server() {
  rm -f "$tmp/port"
  "$BUILD/colo-server" --config "$1" --port-file "$tmp/port" >"$tmp/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 600); do
    if [ -s "$tmp/port" ]; then
      port=$(cat "$tmp/port")
      if http_ok "http://127.0.0.1:$port/health/ready"; then return 0; fi
    fi
    kill -0 "$server_pid" 2>/dev/null || { cat "$tmp/server.log" >&2; return 1; }
    sleep 0.1
  done
  cat "$tmp/server.log" >&2
  return 1
}

stop_server() {
  kill -TERM "$server_pid"
  wait "$server_pid" || { echo "bench-serve: colo-server exited non-zero" >&2; return 1; }
  server_pid=
}

model_yaml() { # name priority [extra lines] [path]
  cat <<EOF
  - name: $1
    kind: llama
    path: "${4:-$MODEL}"
    memory_fraction: $MEM_FRACTION
    priority: $2
    exact_activations: $EXACT
${3:-}
    max_seq_len: 1024
    batching: { max_batch_size: 32, max_queue: 1024, max_batch_prefill_tokens: 256 }
EOF
}

case "$mode" in
colocation)
  summary="$OUT/colocation.tsv"
  printf 'policy\tround\tload1\thi_p99_solo_ms\thi_p99_conc_ms\thi_p99_ratio\tbe_tok_s_solo\tbe_tok_s_conc\tbe_retention\tstp\tbe_p99_ratio\thi_retention\n' >"$summary"
  order=$POLICIES
  for round in $(seq 1 "$ROUNDS"); do
  [ "$round" -gt 1 ] && order=$(echo "$order" | tr ' ' '\n' | tac | tr '\n' ' ')
  for policy in $order; do
    colo_policy=${policy#separate+}
    [ "$colo_policy" = separate ] && colo_policy=priority
    sched="policy: ${colo_policy%%:*}"
    case "$colo_policy" in *:*) sched="$sched, best_effort_min_share: ${colo_policy#*:}" ;; esac
    cfg="$tmp/$colo_policy.yaml"
    load1=$(cut -d' ' -f1 /proc/loadavg)
    {
      echo "server: { listen: \"127.0.0.1:0\", device: $DEVICE }"
      echo "scheduler: { $sched }"
      echo "models:"
      # under deadline, hi's SLA gives its requests deadlines (be has none: it goes after)
      if [ "${colo_policy%%:*}" = deadline ]; then hi_extra="    sla: { $HI_SLA }"; else hi_extra=""; fi
      model_yaml hi high "$hi_extra" "$HI_MODEL"
      model_yaml be low "" "$BE_MODEL"
    } >"$cfg"
    json="$OUT/colocation-$policy-$round.json"
    load=(--model hi --model be --kind hi=generative --kind be=generative
      --concurrency "hi=$HI_CONC" --concurrency "be=$BE_CONC"
      --max-tokens "$MAX_TOKENS" --duration "$DURATION" --warmup "$WARMUP" --json "$json" --quiet)
    case "$policy" in
    separate*)
      echo "== separate processes, then one colo-server ($colo_policy), round $round" >&2
      "$BUILD/colo-loadtest" --baseline separate --config "$cfg" --server "$BUILD/colo-server" "${load[@]}" || true
      ;;
    *)
      if ! start_server "$cfg"; then
        echo "bench-serve: $policy: colo-server did not start (see above)" >&2
        printf '%s\t%s\t%s\tunsupported\n' "$policy" "$round" "$load1" >>"$summary"
        server_pid=
        continue
      fi
      echo "== $policy, round $round ($(grep -o 'device [^,]*' "$tmp/server.log" | head -1))" >&2
      "$BUILD/colo-loadtest" --url "http://127.0.0.1:$port" --scenario individual-vs-concurrent "${load[@]}" || true
      stop_server
      ;;
    esac
    python3 - "$json" "$colo_policy" "$round" "$load1" "$policy" >>"$summary" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ph = {(m["phase"], m["model"]): m for p in d["phases"] for m in p["models"]}
def g(phase, model, key, sub=None):
    m = ph.get((phase, model))
    v = m and m.get(key)
    return v.get(sub) if sub and v else v
f = lambda x: "%.1f" % x if x is not None else "-"
r = lambda a, b: "%.2f" % (a / b) if a and b else "-"
def row(name, pre, cmp):
    hs, hc = g(pre + "individual", "hi", "latency_ms", "p99"), g(pre + "concurrent", "hi", "latency_ms", "p99")
    bs, bc = g(pre + "individual", "be", "tokens_per_s"), g(pre + "concurrent", "be", "tokens_per_s")
    c = d.get(cmp) or {}
    # the other way round too: be's latency impact, hi's throughput kept
    bps, bpc = g(pre + "individual", "be", "latency_ms", "p99"), g(pre + "concurrent", "be", "latency_ms", "p99")
    hts, htc = g(pre + "individual", "hi", "tokens_per_s"), g(pre + "concurrent", "hi", "tokens_per_s")
    print("\t".join([name, sys.argv[3], sys.argv[4], f(hs), f(hc), r(hc, hs), f(bs), f(bc), r(bc, bs),
                     "%.2f" % c["stp"] if c.get("stp") else "-", r(bpc, bps), r(htc, hts)]))
if sys.argv[5].startswith("separate"):
    row("separate", "separate-", "baseline_separate")
    if "+" in sys.argv[5]:
        row(sys.argv[2], "", "comparison")
else:
    row(sys.argv[2], "", "comparison")
PY
  done
  done
  table "$summary"
  # medians over the rounds, per policy
  python3 - "$summary" <<'PY'
import csv, statistics, sys
rows = [r for r in csv.DictReader(open(sys.argv[1]), delimiter="\t") if r.get("hi_p99_ratio") not in (None, "-")]
print("\nmedians over rounds:\npolicy          rounds  hi_p99_ratio  be_retention  stp   be_p99_ratio  hi_retention")
for pol in dict.fromkeys(r["policy"] for r in rows):
    rs = [r for r in rows if r["policy"] == pol]
    def med(k):
        v = [float(r[k]) for r in rs if r.get(k) not in (None, "-", "")]
        return statistics.median(v) if v else float("nan")
    print("%-15s %-7d %-13.2f %-13.2f %-5.2f %-13.2f %.2f" % (pol, len(rs), med("hi_p99_ratio"), med("be_retention"),
                                                            med("stp"), med("be_p99_ratio"), med("hi_retention")))
PY
  ;;
streams)
  cfg="$tmp/streams.yaml"
  {
    echo "server: { listen: \"127.0.0.1:0\", device: $DEVICE }"
    echo "scheduler: { policy: spatial }"
    echo "models:"
    model_yaml m normal
  } >"$cfg"
  start_server "$cfg"
  for c in 1 "$STREAMS"; do
    "$BUILD/colo-loadtest" --url "http://127.0.0.1:$port" --model m --kind m=generative --concurrency "$c" \
      --max-tokens "$STREAM_TOKENS" --duration "$DURATION" --warmup "$WARMUP" --json "$OUT/streams-$c.json" \
      --quiet || true
  done
  stop_server
  python3 - "$OUT/streams-1.json" "$OUT/streams-$STREAMS.json" "$STREAMS" <<'PY'
import json, sys
def tps(f):
    m = json.load(open(f))["phases"][0]["models"][0]
    return m["tokens_per_s"], m["latency_ms"]["p50"], m["ok"]
a, b = tps(sys.argv[1]), tps(sys.argv[2])
print("streams  tok/s    p50_ms   ok")
print("1        %-8.1f %-8.1f %d" % a)
print("%-8s %-8.1f %-8.1f %d" % (sys.argv[3], *b))
print("aggregate decode speed-up: %.2fx" % (b[0] / a[0]))
PY
  ;;
deadline)
  SLA=${SLA:-ttft_ms: 1000, tpot_ms: 150, p99_ms: 4000}
  FIT_CONC=${FIT_CONC:-2}
  OVERLOAD=${OVERLOAD:-1.2}
  ttft=$(echo "$SLA" | grep -o 'ttft_ms: *[0-9.]*' | grep -o '[0-9.]*$')
  tpot=$(echo "$SLA" | grep -o 'tpot_ms: *[0-9.]*' | grep -o '[0-9.]*$')
  e2e=$(echo "$SLA" | grep -o 'p99_ms: *[0-9.]*' | grep -o '[0-9.]*$')
  deadline_cfg() { # policy on_overload
    echo "server: { listen: \"127.0.0.1:0\", device: $DEVICE }"
    echo "scheduler: { policy: $1 }"
    echo "models:"
    for m in a b; do
      model_yaml "$m" normal "    sla: { $SLA }
    on_overload: $2"
    done
  }
  # the load that fits: closed loop, FIT_CONC connections per model, under fair
  if [ -z "${RATE:-}" ]; then
    deadline_cfg fair serve >"$tmp/fit.yaml"
    start_server "$tmp/fit.yaml"
    "$BUILD/colo-loadtest" --url "http://127.0.0.1:$port" --model a --model b --kind a=generative \
      --kind b=generative --concurrency "$FIT_CONC" --max-tokens "$MAX_TOKENS" --stream --duration "$DURATION" \
      --warmup "$WARMUP" --goodput "ttft:$ttft tpot:$tpot e2e:$e2e" --json "$OUT/deadline-fit.json" --quiet || true
    stop_server
    RATE=$(python3 - "$OUT/deadline-fit.json" "$OVERLOAD" "$FIT_CONC" <<'PY'
import json, sys
ms = json.load(open(sys.argv[1]))["phases"][-1]["models"]
fit = min(m["throughput_rps"] for m in ms)
att = min(m.get("attainment_pct") or 0 for m in ms)
print("%.3f" % (fit * float(sys.argv[2])))
print("fit: %.3f requests/s per model at %s connections each, attainment %.0f%%; offered x%s" %
      (fit, sys.argv[3], att, sys.argv[2]), file=sys.stderr)
PY
)
  fi
  echo "== offered load: $RATE requests/s per model (Poisson)" >&2
  summary="$OUT/deadline.tsv"
  printf 'policy\tround\tload1\trate_per_model\tgood_rps_a\tgood_rps_b\tgood_rps\tserver_goodput_rps\trefused\tok\n' >"$summary"
  order="fair deadline"
  for round in $(seq 1 "$ROUNDS"); do
  [ "$round" -gt 1 ] && order=$(echo "$order" | tr ' ' '\n' | tac | tr '\n' ' ')
  for policy in $order; do
    ov=serve
    [ "$policy" = deadline ] && ov=reject
    deadline_cfg "$policy" "$ov" >"$tmp/$policy.yaml"
    load1=$(cut -d' ' -f1 /proc/loadavg)
    start_server "$tmp/$policy.yaml"
    echo "== $policy, round $round" >&2
    "$BUILD/colo-loadtest" --url "http://127.0.0.1:$port" --model a --model b --kind a=generative \
      --kind b=generative --rate "$RATE" --poisson --max-tokens "$MAX_TOKENS" --stream --duration "$DURATION" \
      --warmup "$WARMUP" --goodput "ttft:$ttft tpot:$tpot e2e:$e2e" \
      --json "$OUT/deadline-$policy-$round.json" --quiet || true
    curl -sf "http://127.0.0.1:$port/metrics" >"$OUT/deadline-$policy-$round.metrics" || true
    stop_server
    python3 - "$OUT/deadline-$policy-$round.json" "$OUT/deadline-$policy-$round.metrics" "$policy" "$round" \
      "$load1" "$RATE" "$DURATION" "$WARMUP" >>"$summary" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
ms = {m["model"]: m for m in d["phases"][-1]["models"]}
good = {k: (m.get("good") or 0) / m["window_s"] for k, m in ms.items()}
text = open(sys.argv[2]).read()
sg = sum(float(v) for v in re.findall(r'^colo_model_goodput_requests_total\{[^}]*\} (\S+)', text, re.M))
refused = sum(float(v) for v in re.findall(r'^colo_model_requests_total\{[^}]*status="429"\} (\S+)', text, re.M))
ok = sum(m["ok"] for m in ms.values())
span = float(sys.argv[7]) + float(sys.argv[8])  # the server counts warm-up requests too
print("\t".join([sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], "%.3f" % good.get("a", 0),
                 "%.3f" % good.get("b", 0), "%.3f" % sum(good.values()), "%.3f" % (sg / span),
                 "%d" % refused, "%d" % ok]))
PY
  done
  done
  table "$summary"
  python3 - "$summary" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
med = {p: statistics.median(float(r["good_rps"]) for r in rows if r["policy"] == p) for p in ("fair", "deadline")}
print("\nmedian goodput (requests/s meeting every SLO, client side): fair %.3f, deadline %.3f: %.2fx" %
      (med["fair"], med["deadline"], med["deadline"] / med["fair"] if med["fair"] else float("inf")))
PY
  ;;
overhead)
  OVERHEAD_CONC=${OVERHEAD_CONC:-1 8}
  PROMPT=${PROMPT:-Once upon a time}
  THREADS=${THREADS:-$(nproc)}
  MAX_BATCH=${MAX_BATCH:-16}
  [ -x "$BUILD/colo-generate" ] || { echo "bench-serve: $BUILD/colo-generate is not built" >&2; exit 2; }
  # greedy, as colo-generate's --temperature 0: the same work on both sides
  python3 -c 'import json, sys; print(json.dumps({"body": {"prompt": sys.argv[1], "temperature": 0,
                                                            "max_tokens": int(sys.argv[2])}}))' \
    "$PROMPT" "$MAX_TOKENS" >"$tmp/prompts.jsonl"
  cfg="$tmp/overhead.yaml"
  {
    echo "server: { listen: \"127.0.0.1:0\", device: $DEVICE, threads: $THREADS }"
    echo "models:"
    echo "  - name: m"
    echo "    kind: llama"
    echo "    path: \"$MODEL\""
    echo "    memory_fraction: $MEM_FRACTION"
    echo "    max_seq_len: 1024"
    echo "    batching: { max_batch_size: $MAX_BATCH, max_queue: 1024 }"
  } >"$cfg"
  summary="$OUT/overhead.tsv"
  printf 'conc\tround\tside\tload1\ttok_s\n' >"$summary"
  engine() { # conc: tokens/s of colo-generate, prefill included
    "$BUILD/colo-generate" --model "$MODEL" --prompt "$PROMPT" --temperature 0 --max-tokens "$MAX_TOKENS" \
      --batch "$1" --threads "$THREADS" --device "$DEVICE" 2>&1 >/dev/null |
      python3 -c '
import re, sys
t = sys.stdin.read()
p = re.search(r"prefill (\d+) tokens x (\d+) in ([0-9.]+) s", t)
d = re.search(r"decode (\d+) tokens in ([0-9.]+) s", t)
if not p or not d:
    sys.exit("bench-serve: no statistics from colo-generate: " + t[-300:])
b = int(p.group(2))
print("%.1f" % ((int(d.group(1)) + b) / (float(p.group(3)) + float(d.group(2)))))'
  }
  server() { # conc round: tokens/s through colo-server
    start_server "$cfg"
    "$BUILD/colo-loadtest" --url "http://127.0.0.1:$port" --model m --kind m=generative --concurrency "$1" \
      --prompts "$tmp/prompts.jsonl" --max-tokens "$MAX_TOKENS" --duration "$DURATION" --warmup "$WARMUP" \
      --json "$OUT/overhead-server-$1-$2.json" --quiet >/dev/null || true
    curl -sf "http://127.0.0.1:$port/metrics" >"$OUT/overhead-server-$1-$2.metrics" || true
    stop_server
    python3 -c 'import json, sys; print("%.1f" % json.load(open(sys.argv[1]))["phases"][0]["models"][0]["tokens_per_s"])' \
      "$OUT/overhead-server-$1-$2.json"
  }
  for c in $OVERHEAD_CONC; do
    sides="engine server"
    for round in $(seq 1 "$ROUNDS"); do
      for side in $sides; do
        load1=$(cut -d' ' -f1 /proc/loadavg)
        if [ "$side" = engine ]; then
          # as many runs as fill about DURATION seconds, one figure each; their median
          n=$(( DURATION / 2 > 1 ? DURATION / 2 : 1 ))
          tps=$(for _ in $(seq 1 "$n"); do engine "$c"; done | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
        else
          tps=$(server "$c" "$round")
        fi
        printf '%s\t%s\t%s\t%s\t%s\n' "$c" "$round" "$side" "$load1" "$tps" >>"$summary"
        echo "conc $c round $round $side: $tps tokens/s (load $load1)" >&2
      done
      sides=$(echo "$sides" | tr ' ' '\n' | tac | tr '\n' ' ')
    done
  done
  table "$summary"
  python3 - "$summary" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
print("\nconc  engine_tok_s  server_tok_s  server/engine")
for c in dict.fromkeys(r["conc"] for r in rows):
    med = {s: statistics.median(float(r["tok_s"]) for r in rows if r["conc"] == c and r["side"] == s)
           for s in ("engine", "server")}
    print("%-5s %-13.1f %-13.1f %.2fx" % (c, med["engine"], med["server"], med["server"] / med["engine"]))
PY
  ;;
profile)
  POLICY=${POLICY:-fair}
  python3 -c 'import json, sys; print(json.dumps({"body": {"prompt": "Once upon a time", "temperature": 0,
                                                            "max_tokens": int(sys.argv[1])}}))' \
    "$MAX_TOKENS" >"$tmp/prompts.jsonl"
  one_model() { # name priority
    echo "  - name: $1"
    echo "    kind: llama"
    echo "    path: \"$MODEL\""
    echo "    memory_fraction: $MEM_FRACTION"
    echo "    priority: $2"
    echo "    max_seq_len: 1024"
    echo "    batching: { max_batch_size: 16, max_queue: 1024 }"
  }
  profile_cfg() { # file models...: a server of the named models (hi high, be low)
    local f=$1
    shift
    {
      echo "server: { listen: \"127.0.0.1:0\", device: $DEVICE }"
      echo "scheduler: { policy: $POLICY }"
      echo "models:"
      for m in "$@"; do
        [ "$m" = hi ] && one_model hi high || one_model "$m" low
      done
    } >"$f"
  }
  # serve CONFIG TAG: starts a server, records its port and pid under TAG
  serve() {
    rm -f "$tmp/$2.port"
    "$BUILD/colo-server" --config "$1" --port-file "$tmp/$2.port" >"$tmp/$2.log" 2>&1 &
    echo $! >"$tmp/$2.pid"
    for _ in $(seq 1 600); do
      [ -s "$tmp/$2.port" ] && http_ok "http://127.0.0.1:$(cat "$tmp/$2.port")/health/ready" && return 0
      sleep 0.1
    done
    cat "$tmp/$2.log" >&2
    return 1
  }
  scrape() { curl -sf "http://127.0.0.1:$(cat "$tmp/$1.port")/metrics" >"$OUT/profile-$1-$2.metrics"; }
  # run SETUP "TAG:MODEL:CONC ...": warm-up, scrape, measured load, scrape, per server tag
  run() {
    local setup=$1 loads=$2 pids=() l tag model conc
    for l in $loads; do
      IFS=: read -r tag model conc <<<"$l"
      "$BUILD/colo-loadtest" --url "http://127.0.0.1:$(cat "$tmp/$tag.port")" --model "$model" \
        --kind "$model=generative" --concurrency "$conc" --prompts "$tmp/prompts.jsonl" --duration "$WARMUP" \
        --quiet >/dev/null 2>&1 &
      pids+=($!)
    done
    wait "${pids[@]}"
    pids=()
    for tag in $(for l in $loads; do echo "${l%%:*}"; done | sort -u); do scrape "$tag" 0; done
    for l in $loads; do
      IFS=: read -r tag model conc <<<"$l"
      "$BUILD/colo-loadtest" --url "http://127.0.0.1:$(cat "$tmp/$tag.port")" --model "$model" \
        --kind "$model=generative" --concurrency "$conc" --prompts "$tmp/prompts.jsonl" --duration "$DURATION" \
        --json "$OUT/profile-$setup-$model.json" --quiet >/dev/null 2>&1 &
      pids+=($!)
    done
    wait "${pids[@]}"
    for tag in $(for l in $loads; do echo "${l%%:*}"; done | sort -u); do scrape "$tag" 1; done
  }
  stop_tags() { for t in "$@"; do kill -TERM "$(cat "$tmp/$t.pid")"; wait "$(cat "$tmp/$t.pid")" 2>/dev/null || true; done; }
  profile_cfg "$tmp/alone.yaml" be
  serve "$tmp/alone.yaml" alone
  run alone "alone:be:$BE_CONC"
  stop_tags alone
  profile_cfg "$tmp/one.yaml" hi be
  serve "$tmp/one.yaml" one
  run one "one:hi:$HI_CONC one:be:$BE_CONC"
  stop_tags one
  profile_cfg "$tmp/sep-hi.yaml" hi
  profile_cfg "$tmp/sep-be.yaml" be
  serve "$tmp/sep-hi.yaml" sephi
  serve "$tmp/sep-be.yaml" sepbe
  run separate "sephi:hi:$HI_CONC sepbe:be:$BE_CONC"
  stop_tags sephi sepbe
  python3 - "$OUT" "$DURATION" <<'PY'
import json, re, sys
out, dur = sys.argv[1], float(sys.argv[2])
def load(f):
    d = {}
    for l in open(f):
        m = re.match(r'([a-z_]+)(\{[^}]*\})? (\S+)$', l.strip())
        if m and not l.startswith('#'):
            d[m.group(1) + (m.group(2) or '')] = float(m.group(3))
    return d
def delta(tag):
    a, b = load("%s/profile-%s-0.metrics" % (out, tag)), load("%s/profile-%s-1.metrics" % (out, tag))
    return {k: b[k] - a.get(k, 0) for k in b}
def tps(setup, model):
    try:
        return json.load(open("%s/profile-%s-%s.json" % (out, setup, model)))["phases"][0]["models"][0]["tokens_per_s"]
    except (OSError, KeyError, IndexError):
        return 0.0
def total(ds, pat):
    return sum(v for d in ds for k, v in d.items() if re.fullmatch(pat, k))
setups = [("alone (be)", "alone", ["alone"], ["be"]), ("one server", "one", ["one"], ["hi", "be"]),
          ("separate servers", "separate", ["sephi", "sepbe"], ["hi", "be"])]
print("setup             tok/s (per model)        busy  ready barrier starved  lock_waits/s  chunks/op  "
      "steps d/p/m        host ms/step  cpu ms/token  loop us/token")
for name, setup, tags, models in setups:
    ds = [delta(t) for t in tags]
    st = {s: total(ds, r'colo_device_worker_seconds_total\{device="cpu",state="%s"\}' % s)
          for s in ("busy", "ready", "barrier", "starved")}
    allw = sum(st.values()) or 1
    steps = [total(ds, r'colo_model_steps_total\{model="[^"]*",step="%s"\}' % k) for k in ("decode", "prefill", "mixed")]
    host = sum(total(ds, r'colo_model_step_phase_seconds_total\{model="[^"]*",phase="%s"\}' % p)
               for p in ("plan", "queue", "sample"))
    gen = total(ds, r'colo_model_generated_tokens_total\{model="[^"]*"\}') or 1
    ops = total(ds, r'colo_device_pool_ops_total\{device="cpu"\}') or 1
    rates = [tps(setup, m) for m in models]
    print("%-17s %-24s %5.1f %5.1f %7.1f %7.1f  %12.0f  %9.2f  %-18s %12.2f  %12.2f  %13.1f" % (
        name, " + ".join("%.1f" % r for r in rates), *(100 * st[s] / allw for s in ("busy", "ready", "barrier", "starved")),
        total(ds, r'colo_device_pool_lock_waits_total\{device="cpu"\}') / dur,
        total(ds, r'colo_device_pool_chunks_total\{device="cpu"\}') / ops, "/".join("%d" % x for x in steps),
        1e3 * host / (sum(steps) or 1), 1e3 * total(ds, r'process_cpu_seconds_total') / gen,
        1e6 * total(ds, r'colo_server_loop_cpu_seconds_total') / gen))
PY
  ;;
*)
  echo "usage: scripts/bench-serve.sh colocation|streams|deadline|overhead|profile" >&2
  exit 2
  ;;
esac
