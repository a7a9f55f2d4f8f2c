#!/usr/bin/env python3
"""Time to first token of one long prompt through colo-server, with the
model's default 8-bit activations and with exact_activations: true, and
through llama.cpp's llama-server when --llama-server names one. A benchmark:
it prints and asserts nothing.

    scripts/bench-ttft.py --model MODEL.gguf [--words 1000] [--repeats 5]
        [--build build-rel] [--threads 2] [--llama-server PATH]

Each server is started once, on the same file and thread count, and warmed
with one request. Then REPEATS rounds send one streamed /v1/completions
request (max_tokens 2, temperature 0) to each server in turn, the order
reversed every other round. Every prompt starts with a word of its own
(round and server), so that no server's prefix cache answers part of it.
TTFT is the time from sending the request to the first streamed event.
Prints each server's runs, median, and prompt tokens, and the load average.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, what, timeout=300):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"bench-ttft: {what} exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"bench-ttft: {what} was not ready within {timeout} s")


def start_colo(args, tmp, exact):
    port = free_port()
    cfg = os.path.join(tmp, f"colo-{int(exact)}.yaml")
    with open(cfg, "w") as f:
        f.write(f"""server: {{ listen: "127.0.0.1:{port}", device: cpu, threads: {args.threads} }}
models:
  - name: m
    kind: llama
    path: "{os.path.abspath(args.model)}"
    memory_fraction: 0.5
    max_seq_len: 2048
    exact_activations: {str(exact).lower()}
""")
    log = open(os.path.join(tmp, f"colo-{int(exact)}.log"), "w")
    p = subprocess.Popen([os.path.join(args.build, "colo-server"), "--config", cfg], stdout=log, stderr=log)
    wait_ready(f"http://127.0.0.1:{port}/health/ready", p, "colo-server")
    return p, f"http://127.0.0.1:{port}", "m"


def start_llama(args, tmp):
    port = free_port()
    log = open(os.path.join(tmp, "llama.log"), "w")
    p = subprocess.Popen([args.llama_server, "-m", args.model, "-t", str(args.threads), "-c", "2048", "-np", "1",
                          "--host", "127.0.0.1", "--port", str(port)], stdout=log, stderr=log)
    wait_ready(f"http://127.0.0.1:{port}/health", p, "llama-server")
    return p, f"http://127.0.0.1:{port}", os.path.basename(args.model)


def ttft(url, model, prompt):
    """(seconds to the first streamed event, prompt tokens or None)"""
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 2, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first, tokens = None, None
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            if first is None:
                first = time.perf_counter() - t0
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            usage = json.loads(data).get("usage") or {}
            tokens = usage.get("prompt_tokens", tokens)
    if first is None:
        sys.exit(f"bench-ttft: {url} streamed no event")
    return first, tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--words", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--build", default="build-rel")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-server", default=os.environ.get("LLAMA_SERVER"))
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-ttft-")
    servers = []
    try:
        servers.append(("colo", *start_colo(args, tmp, False)))
        servers.append(("colo exact", *start_colo(args, tmp, True)))
        if args.llama_server:
            servers.append(("llama.cpp", *start_llama(args, tmp)))
        body = " the" * args.words
        for name, _, url, model in servers:
            ttft(url, model, "Warm" + body)
        runs = {name: [] for name, *_ in servers}
        tokens = {}
        for rnd in range(args.repeats):
            order = servers if rnd % 2 == 0 else servers[::-1]
            for i, (name, _, url, model) in enumerate(order):
                t, n = ttft(url, model, f"R{rnd}S{i}:" + body)
                runs[name].append(t * 1000)
                tokens[name] = n
        print(f"model: {args.model}; prompt of {args.words} words; {args.threads} threads; {args.repeats} rounds, "
              f"alternating (medians)")
        base = statistics.median(runs["colo"])
        for name, *_ in servers:
            med = statistics.median(runs[name])
            print(f"  {name:11s} TTFT ms {med:8.1f}  ({base / med:.2f} of colo's speed)  prompt tokens {tokens[name]}"
                  f"  runs {' '.join('%.0f' % v for v in runs[name])}")
        print(f"  load average: {' '.join(open('/proc/loadavg').read().split()[:3])}")
    finally:
        for _, p, *_ in servers:
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
