#!/usr/bin/env python3
"""Static fractions against elastic memory (docs/BENCHMARKS.md).

Four synthetic models share one colo-server. Each is guaranteed a quarter
of the memory budget, which holds its weights, activations and SEQS_FIT
full-length sequences of KV cache. The models burst in turn: BURST
concurrent generations to one model while the others are idle, so the
summed peak KV need (4 x BURST sequences) is far past the budget.

  static:  memory_fraction 0.25 (the ceiling is the guarantee)
  elastic: memory_fraction 0.25, memory_max_fraction 1.0 (borrow idle memory)

For each burst: requests served (200), rejected (anything else), p50/p99
latency, the mean number of sequences in the running batch while the
burst runs (sampled every 20 ms from /v1/models/NAME: kv_cache.
running_sequences, which leaves out those waiting for KV space) and the
preemptions. The two sides alternate, REPEAT times each; the tables
quote medians over the repeats. Uses only the standard library.

usage: scripts/bench-elastic.py [--build build] [--repeat 3] [--burst 16]
       [--max-tokens 200] [--seqs-fit 4] [--out FILE.json] [--device cpu|cuda]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

MODELS = ["m0", "m1", "m2", "m3"]
DEVICE = "cpu"  # --device


def server_line(budget, listen=""):
    """The server: line: the device and its budget (cpu_memory_bytes or gpu_memory_bytes)."""
    mem = "cpu_memory_bytes" if DEVICE == "cpu" else "gpu_memory_bytes"
    return f"server: {{ {listen}device: {DEVICE}, {mem}: {budget} }}"


def mkmodel(build, path, seed, ctx):
    subprocess.run([os.path.join(build, "colo-mkmodel"), "--out", path, "--layers", "4", "--dim", "256",
                    "--heads", "4", "--kv-heads", "4", "--ffn", "512", "--vocab", "512", "--ctx", str(ctx),
                    "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)


def need_of(build, d, path, ctx):
    """Bytes a model needs (weights, activations, one full sequence) and one sequence's KV, from --check-config."""
    cfg = os.path.join(d, "check.yaml")
    with open(cfg, "w") as f:
        f.write(server_line("1GiB") + "\nmodels:\n"
                f"  - {{ name: x, kind: llama, path: {path}, memory_fraction: 0.000001, max_seq_len: {ctx} }}\n")
    out = subprocess.run([os.path.join(build, "colo-server"), "--config", cfg, "--check-config"],
                         capture_output=True, text=True).stderr
    import re
    m = re.search(r"needs (\d+) bytes", out)
    k = re.search(r"-token sequence (\d+)\)", out)
    if not m or not k:
        sys.exit("unexpected --check-config output:\n" + out)
    return int(m.group(1)), int(k.group(1))


def config(d, paths, budget, ctx, elastic, port):
    lines = [server_line(budget, f'listen: "127.0.0.1:{port}", '),
             "scheduler: { policy: spatial }", "models:"]
    for name, p in zip(MODELS, paths):
        extra = ", memory_max_fraction: 1.0" if elastic else ""
        lines.append(f"  - {{ name: {name}, kind: llama, path: {p}, memory_fraction: 0.2499{extra}, "
                     f"max_seq_len: {ctx}, batching: {{ max_batch_size: 32, queue_timeout_ms: 60000 }} }}")
    path = os.path.join(d, "elastic.yaml" if elastic else "static.yaml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def http(url, body=None, timeout=120):
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                 method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, None


def burst(base, model, n, max_tokens):
    lat, status = [0.0] * n, [0] * n
    samples = []
    pre = [None, None]
    stop = threading.Event()

    def one(i):
        t0 = time.monotonic()
        st, _ = http(f"{base}/v1/models/{model}/infer",
                     {"prompt": f"burst {i}:", "max_tokens": max_tokens, "temperature": 0})
        lat[i], status[i] = time.monotonic() - t0, st

    def poll():
        while not stop.is_set():
            st, j = http(f"{base}/v1/models/{model}")
            if st == 200:
                kv = j.get("kv_cache", {})
                samples.append(kv.get("running_sequences", 0))  # in the batch, not waiting for KV space
                pre[0] = kv.get("preemptions", 0) if pre[0] is None else pre[0]
                pre[1] = kv.get("preemptions", 0)
            time.sleep(0.02)

    p = threading.Thread(target=poll)
    p.start()
    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.monotonic() - t0
    stop.set()
    p.join()
    ok = sorted(l for l, s in zip(lat, status) if s == 200)
    q = lambda f: ok[min(len(ok) - 1, int(f * len(ok)))] if ok else float("nan")
    busy = [x for x in samples if x > 0]
    return {"served": len(ok), "rejected": n - len(ok), "p50_s": q(0.5), "p99_s": q(0.99), "wall_s": wall,
            "mean_running": statistics.mean(busy) if busy else 0.0,
            "preemptions": (pre[1] or 0) - (pre[0] or 0)}


def run_side(build, cfg, port, args):
    log = open(cfg + ".log", "w")
    srv = subprocess.Popen([os.path.join(build, "colo-server"), "--config", cfg], stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if http(base + "/health/ready")[0] == 200:
                    break
            except Exception:
                pass
            time.sleep(0.1)
        else:
            sys.exit("colo-server did not become ready; see " + cfg + ".log")
        res = {}
        for m in MODELS:
            res[m] = burst(base, m, args.burst, args.max_tokens)
            time.sleep(0.3)
        return res
    finally:
        srv.terminate()
        srv.wait()
        log.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--burst", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--seqs-fit", type=float, default=4.0, help="full-length sequences a guarantee holds")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--port", type=int, default=18977)
    ap.add_argument("--out")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: the budget is gpu_memory_bytes, the arenas CUDA virtual memory")
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device
    d = tempfile.mkdtemp(prefix="colo-bench-elastic-")
    paths = [os.path.join(d, f"{m}.gguf") for m in MODELS]
    for i, p in enumerate(paths):
        mkmodel(args.build, p, 200 + 7 * i, args.ctx)
    need, kv = need_of(args.build, d, paths[0], args.ctx)
    budget = int(4 * (need + args.seqs_fit * kv) / 0.9996)
    print(f"per model: need {need} bytes with one {args.ctx}-token sequence of {kv} bytes; budget {budget} bytes "
          f"(each guarantee ~{args.seqs_fit:g} full sequences of KV); burst {args.burst} x {args.max_tokens} tokens")
    runs = {"static": [], "elastic": []}
    for r in range(args.repeat):
        for side in (["static", "elastic"] if r % 2 == 0 else ["elastic", "static"]):
            cfg = config(d, paths, budget, args.ctx, side == "elastic", args.port)
            res = run_side(args.build, cfg, args.port, args)
            runs[side].append(res)
            print(f"run {r} {side}: " + ", ".join(
                f"{m}: {v['served']}/{args.burst} ok, batch {v['mean_running']:.1f}, p99 {v['p99_s']:.2f}s"
                for m, v in res.items()), flush=True)
    med = lambda side, m, k: statistics.median(x[m][k] for x in runs[side])
    print(f"\nmedians over {args.repeat} runs of each side (alternating)")
    print("| model | side | served | rejected | mean sequences in batch | preemptions | p50 s | p99 s | burst wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for m in MODELS:
        for side in ("static", "elastic"):
            print(f"| {m} | {side} | {med(side, m, 'served'):g} | {med(side, m, 'rejected'):g} | "
                  f"{med(side, m, 'mean_running'):.1f} | {med(side, m, 'preemptions'):g} | {med(side, m, 'p50_s'):.2f} | {med(side, m, 'p99_s'):.2f} | "
                  f"{med(side, m, 'wall_s'):.2f} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"need": need, "kv": kv, "budget": budget, "args": vars(args), "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
