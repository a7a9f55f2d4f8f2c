#!/usr/bin/env python3
"""Load at run time: how long POST /admin/models takes to make a model ready.

Starts colo-server (CPU) with a tiny synthetic anchor model, then for each
model given, RUNS times: POST /admin/models with its config, poll
/v1/models/NAME until ready (wall time from the POST), read its load_ms,
one greedy request, DELETE it and wait until it is gone. Prints one line
per run and a table (docs/BENCHMARKS.md, "Loading at run time").

With --wake, each model is then also put to sleep and woken RUNS times
(POST /admin/models/NAME/sleep, then .../wake) and its lifecycle.last_wake_ms
is read: the wake time of a sleeping model, and its weights' bytes per
second of wake. --device cuda runs the server on the GPU.

usage: scripts/bench-lifecycle.py --build build --model NAME=PATH[:FRACTION] [--model ...] [--runs 3]
       [--device cpu|cuda] [--wake]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request


def req(port, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    try:
        with urllib.request.urlopen(r, timeout=120) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def wait_state(port, name, states, limit_s=300):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        st, m = req(port, "GET", f"/v1/models/{name}")
        if m and m.get("state") in states:
            return m
        time.sleep(0.005)
    sys.exit(f"{name}: not {'/'.join(states)} after {limit_s} s")


def wake_times(port, name, runs):
    """Sleeps and wakes NAME RUNS times; its lifecycle.last_wake_ms after each wake."""
    out = []
    for _ in range(runs):
        st, j = req(port, "POST", f"/admin/models/{name}/sleep")
        if st != 202:
            sys.exit(f"{name}: sleep answered {st}: {j}")
        wait_state(port, name, ("sleeping",))
        st, j = req(port, "POST", f"/admin/models/{name}/wake")
        if st != 202:
            sys.exit(f"{name}: wake answered {st}: {j}")
        m = wait_state(port, name, ("ready", "failed"))
        if m["state"] != "ready":
            sys.exit(f"{name}: wake failed: {m.get('error')}")
        out.append(m["lifecycle"]["last_wake_ms"])
        print(f"{name}: woke in {out[-1]:.0f} ms", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", action="append", required=True, help="NAME=PATH[:FRACTION] (default fraction 0.2)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--wake", action="store_true", help="also sleep and wake each model RUNS times")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="colo-bench-lifecycle-")
    anchor = os.path.join(tmp, "anchor.gguf")
    subprocess.run([os.path.join(a.build, "colo-mkmodel"), "--out", anchor, "--layers", "1", "--dim", "64",
                    "--heads", "4", "--kv-heads", "2", "--ffn", "128", "--vocab", "300", "--ctx", "64"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cfg = os.path.join(tmp, "config.yaml")
    with open(cfg, "w") as f:
        f.write(f'server: {{ listen: "127.0.0.1:0", device: {a.device} }}\nscheduler: {{ policy: spatial }}\n'
                "models:\n  - { name: anchor, kind: llama, path: anchor.gguf, memory_fraction: 0.01 }\n")
    port_file = os.path.join(tmp, "port")
    log = open(os.path.join(tmp, "server.log"), "w")
    srv = subprocess.Popen([os.path.join(a.build, "colo-server"), "--config", cfg, "--port-file", port_file],
                           stdout=log, stderr=log)
    try:
        for _ in range(600):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.05)
        port = int(open(port_file).read())
        rows, wakes = [], []
        for spec in a.model:
            name, rest = spec.split("=", 1)
            path, _, frac = rest.partition(":")
            body = {"name": name, "kind": "llama", "path": os.path.abspath(path),
                    "memory_fraction": float(frac or 0.2), "max_seq_len": 512,
                    "batching": {"max_batch_size": 8}}
            walls, loads = [], []
            for run in range(a.runs):
                t0 = time.monotonic()
                st, j = req(port, "POST", "/admin/models", body)
                if st != 202:
                    sys.exit(f"{name}: POST answered {st}: {j}")
                while True:
                    st, m = req(port, "GET", f"/v1/models/{name}")
                    if m["state"] in ("ready", "failed"):
                        break
                    time.sleep(0.002)
                wall = (time.monotonic() - t0) * 1000
                if m["state"] != "ready":
                    sys.exit(f"{name}: failed: {m.get('error')}")
                st, out = req(port, "POST", f"/v1/models/{name}/infer",
                              {"prompt": "Hello", "max_tokens": 4, "temperature": 0})
                if st != 200:
                    sys.exit(f"{name}: infer answered {st}")
                if a.wake and run == a.runs - 1:
                    wakes.append((name, m["memory"]["weights_bytes"], wake_times(port, name, a.runs)))
                req(port, "DELETE", f"/admin/models/{name}")
                while req(port, "GET", f"/v1/models/{name}")[0] != 404:
                    time.sleep(0.01)
                walls.append(wall)
                loads.append(m["load_ms"])
                print(f"{name} run {run + 1}: ready {wall:.0f} ms after the POST (load_ms {m['load_ms']:.0f}), "
                      f"weights {m['memory']['weights_bytes'] / 2**20:.1f} MiB", flush=True)
            rows.append((name, walls, loads))
        print("\n| model | POST to ready, ms | load_ms |\n|---|---|---|")
        for name, walls, loads in rows:
            print(f"| {name} | {', '.join(f'{w:.0f}' for w in walls)} | {', '.join(f'{x:.0f}' for x in loads)} |")
        if wakes:
            print("\n| model | weights | wake ms | weights GB/s of wake |\n|---|---|---|---|")
            for name, wb, ms in wakes:
                print(f"| {name} | {wb / 2**20:.0f} MiB | {', '.join(f'{x:.0f}' for x in ms)} | "
                      f"{', '.join(f'{wb / x / 1e6:.2f}' for x in ms)} |")
    finally:
        srv.terminate()
        srv.wait(timeout=30)
        log.close()


if __name__ == "__main__":
    main()
