#!/usr/bin/env python3
"""Clients that never read their streams, against the event loop's latency.

Starts colo-server (CPU) with SmolLM2-135M from the model cache, opens
CLIENTS connections with a small receive buffer, each sending one streamed
request of n: 16 choices with 20 top logprobs (by default to
/v1/models/smollm2/infer; --route completions or chat for the OpenAI
routes), and never reads them. Meanwhile GET /health/live is asked every
PERIOD ms on a fresh connection and its latency measured. Prints the
probes' latency (median, p99, max, how many over 100 ms), colo-server's
RSS before and at its most, and the streams canceled for not reading
(colo_model_streams_unread_total) and the render passes cut at their
budget (colo_stream_render_deferred_total, when the server has it)
(docs/SECURITY.md, "Hostile clients"; docs/BENCHMARKS.md).

usage: scripts/unread-streams.py [--build build] [--server BINARY] [--tiny] [--clients 40] [--seconds 10]
                                 [--route infer|completions|chat]
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


def cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ.get("HOME", ""), ".cache")
    return os.path.join(base, "colo", "models")


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def body_for(route, i):
    if route == "infer":
        return "/v1/models/smollm2/infer", {"prompt": f"Tell me a long story, number {i}.", "n": 16,
                                            "logprobs": 20, "max_tokens": 400, "stream": True, "seed": i}
    if route == "completions":
        return "/v1/completions", {"model": "smollm2", "prompt": f"Tell me a long story, number {i}.", "n": 16,
                                   "logprobs": 20, "max_tokens": 400, "stream": True, "seed": i}
    return "/v1/chat/completions", {"model": "smollm2", "messages": [{"role": "user", "content": f"Story {i}"}],
                                    "n": 16, "logprobs": True, "top_logprobs": 20, "max_tokens": 400,
                                    "stream": True, "seed": i}


def probe(port):
    """Seconds that GET /health/live took on a new connection."""
    t0 = time.monotonic()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    s.close()
    if not data.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"/health/live answered {data[:40]!r}")
    return time.monotonic() - t0


def metric(text, name):
    total = 0.0
    for m in re.finditer(r"^" + re.escape(name) + r"(\{[^}]*\})? (\S+)$", text, re.M):
        total += float(m.group(2))
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--server", help="the colo-server binary (default: the build folder's)")
    ap.add_argument("--model", default=os.path.join(cache_dir(), "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--clients", type=int, default=40)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--period-ms", type=float, default=50)
    ap.add_argument("--route", default="infer", choices=["infer", "completions", "chat"])
    ap.add_argument("--tiny", action="store_true",
                    help="a tiny synthetic model (colo-mkmodel) in place of SmolLM2: thousands of tokens a second "
                    "on two cores, so that rendering, not the model, is the work")
    ap.add_argument("--max-batch", type=int, default=256, help="the model's batching.max_batch_size")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="colo-unread-")
    if a.tiny:
        a.model = os.path.join(tmp, "tiny.gguf")
        subprocess.run([os.path.join(a.build, "colo-mkmodel"), "--out", a.model, "--layers", "2", "--dim", "64",
                        "--heads", "4", "--kv-heads", "2", "--ffn", "128", "--vocab", "512", "--ctx", "2048"],
                       check=True, stdout=subprocess.DEVNULL)
    if not os.path.exists(a.model):
        sys.exit(f"{a.model}: not found (scripts/fetch-models.sh)")
    cfg = os.path.join(tmp, "colo.yaml")
    with open(cfg, "w") as f:
        f.write('server: { listen: "127.0.0.1:0", device: cpu }\n'
                "models:\n"
                f'  - {{ name: smollm2, kind: llama, path: "{a.model}", memory_fraction: 0.2, max_seq_len: 1024,\n'
                f"      batching: {{ max_batch_size: {a.max_batch}, max_queue: 512 }} }}\n")
    port_file = os.path.join(tmp, "port")
    log = open(os.path.join(tmp, "server.log"), "w")
    env = dict(os.environ, COLO_LOG_LEVEL="warn")
    srv = subprocess.Popen([a.server or os.path.join(a.build, "colo-server"), "--config", cfg, "--port-file", port_file],
                           stdout=log, stderr=log, env=env)
    try:
        port = None
        for _ in range(600):
            if os.path.exists(port_file) and open(port_file).read().strip():
                port = int(open(port_file).read())
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health/ready", timeout=2)
                    break
                except OSError:
                    pass
            time.sleep(0.1)
        else:
            sys.exit("colo-server did not become ready")
        idle = [probe(port) for _ in range(20)]
        rss0 = rss_kb(srv.pid)
        socks = []
        for i in range(a.clients):
            path, body = body_for(a.route, i)
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", port))
            b = json.dumps(body).encode()
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(b)}\r\n\r\n".encode() + b)
            socks.append(s)
        lat, rss_max = [], rss0
        t_end = time.monotonic() + a.seconds
        while time.monotonic() < t_end:
            lat.append(probe(port))
            rss_max = max(rss_max, rss_kb(srv.pid))
            time.sleep(a.period_ms / 1000)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            text = r.read().decode()
        for s in socks:
            s.close()
    finally:
        srv.terminate()
        srv.wait(timeout=60)
    ms = sorted(x * 1000 for x in lat)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(f"{'tiny model' if a.tiny else 'SmolLM2-135M'}, max_batch_size {a.max_batch}: "
          f"{a.clients} unread {a.route} streams (n 16, 20 top logprobs), {a.seconds:.0f} s, "
          f"{len(ms)} probes of /health/live")
    print(f"  idle:   median {statistics.median(idle) * 1000:.1f} ms, max {max(idle) * 1000:.1f} ms")
    print(f"  loaded: median {statistics.median(ms):.1f} ms, p99 {p99:.1f} ms, max {ms[-1]:.1f} ms, "
          f"over 100 ms: {sum(1 for x in ms if x > 100)}")
    print(f"  RSS {rss0} kB before, at most {rss_max} kB (+{(rss_max - rss0) / 1024:.0f} MiB)")
    print(f"  streams canceled for not reading {metric(text, 'colo_model_streams_unread_total'):.0f}, "
          f"render passes cut at their budget {metric(text, 'colo_stream_render_deferred_total'):.0f}, "
          f"unsent bytes at most {metric(text, 'colo_http_unsent_peak_bytes'):.0f}")


if __name__ == "__main__":
    main()
