#!/usr/bin/env python3
"""Three colo-server replicas behind HAProxy, under load, while one is
stopped gracefully and another is killed.

What it does:
  1. writes a small synthetic model (colo-mkmodel) unless --model is given,
     and starts three colo-server replicas on free loopback ports, each with
     server.drain_delay_ms so that SIGTERM turns it not-ready first;
  2. starts HAProxy (Debian's) in front: least-connections balancing,
     health checks on GET /health/ready every --check-ms, one log line per
     request (server, status, termination state, end time, active time);
  3. runs colo-loadtest through HAProxy (closed loop) and meanwhile
     (a) SIGTERMs replica r1: it must answer /health/ready 503 "draining",
         finish what it has, exit 0, and no request may fail;
     (b) SIGKILLs replica r2: only requests that were in flight on r2 at
         that moment may fail, and HAProxy must mark it DOWN;
  4. prints the counts per replica and checks them against the load
     tester's own totals.

Exit status: 0 when every check holds, 1 when one fails, 2 on a usage
error, 77 when HAProxy or a colo program is missing (a skip).

  scripts/replicas-check.py [--build-dir build] [--model FILE] [--duration 16]
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

SKIP = 77
SLACK_MS = 50


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=2.0):
    """(status, body) of GET url; (0, error text) when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (OSError, urllib.error.URLError) as e:
        return 0, str(e)


def wait_for(pred, timeout_s, step_s=0.02):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        v = pred()
        if v:
            return v
        time.sleep(step_s)
    return None


class Replica:
    def __init__(self, name, workdir, server_bin, model, args):
        self.name = name
        self.dir = os.path.join(workdir, name)
        os.makedirs(self.dir)
        self.port_file = os.path.join(self.dir, "port")
        self.log_path = os.path.join(self.dir, "server.log")
        cfg = os.path.join(self.dir, "config.yaml")
        with open(cfg, "w") as f:
            f.write(
                "server:\n"
                '  listen: "127.0.0.1:0"\n'
                "  device: cpu\n"
                f"  threads: {args.threads}\n"
                "  cpu_memory_bytes: 256MiB\n"
                f"  drain_delay_ms: {args.drain_ms}\n"
                "  shutdown_timeout_ms: 30000\n"
                "models:\n"
                f"  - {{ name: m, kind: llama, path: {model}, memory_fraction: 0.5,\n"
                "      batching: { max_batch_size: 8, max_queue: 256 } }\n")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([server_bin, "--config", cfg, "--port-file", self.port_file],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None

    def wait_ready(self, timeout_s=60):
        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} while starting")
            try:
                with open(self.port_file) as f:
                    self.port = int(f.read().strip() or 0)
            except (OSError, ValueError):
                return False
            return self.port and http_get(self.url("/health/ready"))[0] == 200
        return wait_for(ready, timeout_s)

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


HAPROXY_CFG = """\
global
    log stdout format raw local0
    maxconn 1024

defaults
    mode http
    log global
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    timeout http-request 10s
    # a connection refused by a stopped or dead replica is tried again on
    # another one (redispatch); a request already sent is never replayed
    retries 3
    option redispatch 1

frontend colo_in
    bind 127.0.0.1:{fe_port}
    # One request per client connection, so that every request is logged:
    # on a kept-alive client connection HAProxy answers a request whose
    # replica died with a silent close (the client is to retry) and logs
    # nothing, which would hide exactly the failures counted here.
    option httpclose
    # end time (ms since the epoch), replica, status, active time (ms), termination state
    log-format "req %[date(0,ms)] %s %ST %Ta %tsc"
    default_backend colo

backend colo
    balance leastconn
    option httpchk
    http-check send meth GET uri /health/ready
    http-check expect status 200
    default-server inter {check_ms}ms fastinter {check_ms}ms downinter {check_ms}ms fall 2 rise 2
{servers}

listen stats
    bind 127.0.0.1:{stats_port}
    stats enable
    stats uri /stats
"""


def haproxy_states(stats_port):
    """{server: (status, requests in flight)} from HAProxy's CSV statistics."""
    st, body = http_get(f"http://127.0.0.1:{stats_port}/stats;csv", timeout=1.0)
    if st != 200:
        return {}
    lines = body.splitlines()
    if not lines:
        return {}
    head = lines[0].lstrip("# ").split(",")
    ix = {k: i for i, k in enumerate(head)}
    out = {}
    for ln in lines[1:]:
        f = ln.split(",")
        if len(f) > ix["status"] and f[ix["pxname"]] == "colo" and f[ix["svname"]] not in ("BACKEND", "FRONTEND"):
            out[f[ix["svname"]]] = (f[ix["status"]], int(f[ix["scur"]] or 0))
    return out


def wait_down(stats_port, name, timeout_s=30):
    t0 = time.monotonic()
    got = wait_for(lambda: haproxy_states(stats_port).get(name, ("?", 0))[0].startswith("DOWN"), timeout_s, 0.01)
    return (time.monotonic() - t0) if got else None


def parse_log(path):
    """Request records from HAProxy's log: dicts end_ms, server, status, ta_ms, term."""
    reqs = []
    with open(path, errors="replace") as f:
        for ln in f:
            p = ln.split()
            if len(p) != 6 or p[0] != "req":
                continue
            try:
                reqs.append({"end_ms": int(p[1]), "server": p[2], "status": int(p[3]), "ta_ms": int(p[4]),
                             "term": p[5]})
            except ValueError:
                continue
    return reqs


def ok(r):
    return 200 <= r["status"] < 300 and r["term"].startswith("--")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default="build", help="where colo-server, colo-loadtest, colo-mkmodel are")
    ap.add_argument("--model", help="a GGUF to serve (default: a synthetic one made with colo-mkmodel)")
    ap.add_argument("--duration", type=float, default=16, help="seconds of load (default 16)")
    ap.add_argument("--concurrency", type=int, default=12, help="closed-loop connections (default 12)")
    ap.add_argument("--max-tokens", type=int, default=48, help="tokens per request (default 48)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads per replica (default 1)")
    ap.add_argument("--check-ms", type=int, default=250, help="HAProxy's health-check interval (default 250)")
    ap.add_argument("--drain-ms", type=int, default=3000, help="replicas' server.drain_delay_ms (default 3000)")
    ap.add_argument("--workdir", help="keep logs and configs here (default: a temporary folder, removed)")
    args = ap.parse_args()

    haproxy = shutil.which("haproxy")
    bins = {n: os.path.join(args.build_dir, n) for n in ("colo-server", "colo-loadtest", "colo-mkmodel")}
    if not haproxy:
        print("replicas-check: SKIP: haproxy is not installed (apt-get install haproxy)")
        return SKIP
    for n, p in bins.items():
        if not os.access(p, os.X_OK) and not (n == "colo-mkmodel" and args.model):
            print(f"replicas-check: SKIP: {p} is not built")
            return SKIP

    workdir = args.workdir or tempfile.mkdtemp(prefix="colo-replicas-")
    os.makedirs(workdir, exist_ok=True)
    replicas, procs = [], []
    failures = []

    def check(cond, what):
        print(f"  [{'ok' if cond else 'FAILED'}] {what}")
        if not cond:
            failures.append(what)

    try:
        model = args.model
        if not model:
            model = os.path.join(workdir, "m.gguf")
            subprocess.run([bins["colo-mkmodel"], "--out", model, "--layers", "4", "--dim", "256", "--heads", "4",
                            "--kv-heads", "2", "--ffn", "512", "--vocab", "512", "--ctx", "512", "--seed", "5"],
                           check=True, stdout=subprocess.DEVNULL)
        model = os.path.abspath(model)
        for i in range(3):
            replicas.append(Replica(f"r{i + 1}", workdir, bins["colo-server"], model, args))
        for r in replicas:
            if not r.wait_ready():
                raise RuntimeError(f"{r.name} did not become ready; see {r.log_path}")
        print("replicas: " + ", ".join(f"{r.name} on :{r.port}" for r in replicas))

        fe_port, stats_port = free_port(), free_port()
        servers = "\n".join(f"    server {r.name} 127.0.0.1:{r.port} check" for r in replicas)
        cfg_path = os.path.join(workdir, "haproxy.cfg")
        with open(cfg_path, "w") as f:
            f.write(HAPROXY_CFG.format(fe_port=fe_port, stats_port=stats_port, check_ms=args.check_ms,
                                       servers=servers))
        ha_log_path = os.path.join(workdir, "haproxy.log")
        ha_log = open(ha_log_path, "w")
        ha = subprocess.Popen([haproxy, "-db", "-f", cfg_path], stdout=ha_log, stderr=subprocess.STDOUT)
        procs.append(ha)
        up = wait_for(lambda: (s := haproxy_states(stats_port)) and len(s) == 3 and
                      all(v[0].startswith("UP") for v in s.values()), 20)
        if not up:
            raise RuntimeError(f"HAProxy did not see three replicas UP; see {ha_log_path}")
        print(f"haproxy: http://127.0.0.1:{fe_port}, leastconn, checks GET /health/ready every {args.check_ms} ms")

        lt_json = os.path.join(workdir, "loadtest.json")
        lt_log = open(os.path.join(workdir, "loadtest.out"), "w")
        lt = subprocess.Popen([bins["colo-loadtest"], "--url", f"http://127.0.0.1:{fe_port}", "--scenario", "single",
                               "--model", "m", "--kind", "m=generative", "--concurrency", str(args.concurrency),
                               "--duration", str(args.duration), "--max-tokens", str(args.max_tokens),
                               "--timeout", "30", "--json", lt_json, "--quiet"],
                              stdout=lt_log, stderr=subprocess.STDOUT)
        procs.append(lt)

        # (a) graceful stop of r1, a quarter into the run
        r1, r2 = replicas[0], replicas[1]
        time.sleep(args.duration * 0.25)
        before = haproxy_states(stats_port)
        t_term = time.time()
        r1.proc.send_signal(signal.SIGTERM)
        ready_status, ready_body = wait_for(
            lambda: (lambda s: s if s[0] != 200 else None)(http_get(r1.url("/health/ready"))), 5) or (200, "")
        down_r1 = wait_down(stats_port, "r1")
        r1_rc = r1.proc.wait(timeout=60)
        t_r1_exit = time.time()
        print(f"SIGTERM r1 (it had {before.get('r1', ('?', 0))[1]} in flight): /health/ready -> {ready_status}, "
              f"DOWN in HAProxy after {down_r1 if down_r1 is None else round(down_r1 * 1000)} ms, "
              f"exited {r1_rc} after {round((t_r1_exit - t_term) * 1000)} ms")

        # (b) kill r2, once r1 is gone
        time.sleep(max(0.0, t_term + args.duration * 0.55 - time.time()))
        before = haproxy_states(stats_port)
        t_kill = time.time()
        r2.proc.send_signal(signal.SIGKILL)
        r2.proc.wait()
        t_dead = time.time()  # its sockets are gone once it is reaped; until then its backlog still accepts
        down_r2 = wait_down(stats_port, "r2")
        print(f"SIGKILL r2 (HAProxy counted {before.get('r2', ('?', 0))[1]} in flight just before): gone after "
              f"{round((t_dead - t_kill) * 1000)} ms, DOWN in HAProxy after "
              f"{down_r2 if down_r2 is None else round(down_r2 * 1000)} ms (check interval {args.check_ms} ms, fall 2)")

        lt_rc = lt.wait(timeout=args.duration + 120)
        lt_log.close()
        time.sleep(0.5)  # HAProxy writes the last log lines
        ha.send_signal(signal.SIGTERM)
        ha.wait(timeout=10)
        ha_log.close()

        with open(lt_json) as f:
            ltr = json.load(f)
        res = [m for ph in ltr.get("phases", []) for m in ph.get("models", []) if m.get("model") == "m"]
        lt_ok = sum(r.get("ok", 0) for r in res)
        lt_err = sum(r["errors"].get(k, 0) for r in res for k in ("http", "connect", "timeout", "io"))

        reqs = parse_log(ha_log_path)
        kill_ms, dead_ms, term_ms = int(t_kill * 1000), int(t_dead * 1000), int(t_term * 1000)
        print("\nper replica (HAProxy's log):")
        print(f"  {'replica':8} {'requests':>8} {'ok':>6} {'failed':>6}  started after its signal")
        for name in ("r1", "r2", "r3", "<NOSRV>"):
            mine = [r for r in reqs if r["server"] == name]
            if not mine and name == "<NOSRV>":
                continue
            t = term_ms if name == "r1" else kill_ms if name == "r2" else None
            after = "" if t is None else str(sum(1 for r in mine if r["end_ms"] - r["ta_ms"] >= t))
            print(f"  {name:8} {len(mine):8} {sum(map(ok, mine)):6} {sum(not ok(r) for r in mine):6}  {after}")
        failed = [r for r in reqs if not ok(r)]
        # In flight on r2 at the kill: sent to r2 before it was gone (a killed process's
        # sockets live until it is reaped), not ended before the signal. HAProxy's log times
        # come from its own clock, read once per event-loop turn: SLACK_MS either side.
        inflight_r2 = [r for r in reqs if r["server"] == "r2" and r["end_ms"] - r["ta_ms"] <= dead_ms + SLACK_MS and
                       r["end_ms"] >= kill_ms - SLACK_MS]
        print(f"load tester: {lt_ok} ok, {lt_err} errors (exit {lt_rc}); HAProxy: {len(reqs)} requests, "
              f"{len(failed)} failed; in flight on r2 at the kill: {len(inflight_r2)}\n")

        check(ready_status == 503 and "draining" in ready_body, "r1 answered /health/ready 503 draining after SIGTERM")
        check(down_r1 is not None, "HAProxy marked r1 DOWN")
        check(r1_rc == 0, "r1 exited 0 after draining")
        check(not [r for r in failed if r["server"] == "r1"], "no request on r1 failed")
        check(not [r for r in failed if r["end_ms"] < kill_ms - SLACK_MS],
              "no request failed before the kill (graceful stop)")
        check(sum(1 for r in reqs if r["server"] == "r1" and r["end_ms"] >= term_ms) > 0,
              "r1 finished requests after SIGTERM")
        check(down_r2 is not None, "HAProxy marked r2 DOWN")
        stray = [r for r in failed if r not in inflight_r2]
        for r in stray:
            print(f"  failed, not in flight on r2 at the kill ({kill_ms} ms, gone at {dead_ms} ms): {r}")
        check(not stray, "every failed request was in flight on r2 at the kill")
        check(len(failed) <= args.concurrency, "no more failures than the load's concurrency")
        check(sum(1 for r in reqs if ok(r) and r["end_ms"] - r["ta_ms"] > dead_ms + SLACK_MS) > 0,
              "requests after the kill succeeded (on r3)")
        check(len(reqs) > 0 and lt_ok + lt_err >= len(reqs) - args.concurrency and lt_err == len(failed),
              "the load tester's errors are HAProxy's failed requests")
    except (RuntimeError, OSError, subprocess.SubprocessError, ValueError, KeyError) as e:
        failures.append(str(e))
        print(f"replicas-check: {e}", file=sys.stderr)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for r in replicas:
            r.stop()
        if failures:
            print(f"replicas-check: FAILED ({len(failures)}); logs in {workdir}")
        elif not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    if not failures:
        print("replicas-check: passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
