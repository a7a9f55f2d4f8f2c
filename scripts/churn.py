#!/usr/bin/env python3
"""Churn soak: colo-server's models, adapters and config changing under a steady mixed load.

Starts colo-server (CPU) with SmolLM2-135M (llama, two LoRA adapters of its
shape written by colo-mkmodel, one named by the config file) and MiniLM
(bert) from the model cache, and three tenants' keys. Worker threads send a
steady mixed load: chat completions (plain and streamed), the Responses
API, Anthropic Messages, embeddings, requests to the adapters and to a
model loaded at run time, and streams whose client hangs up at a random
point. After WARMUP seconds of that load colo-server's RSS is taken, then for
SECONDS seconds a churn thread, every 0.2 to 1 s, picks one of: add or delete
an adapter (POST/DELETE /admin/models/smollm2/adapters), load or unload a
second SmolLM2 (POST/DELETE /admin/models), sleep or wake a model, or
SIGHUP with a rewritten config (the config's adapter added or removed, its
keep_alive_ms changed, a tenant's quota changed: the tenants section cannot
change while colo-server runs and must be kept as it was). Then the state of
before the churn is restored, the load goes on for WARMUP seconds more and
RSS is taken again; then SIGTERM.

Passes when: colo-server never exits before SIGTERM and exits 0 on it;
every request was answered with a status (the streams cut on purpose
aside) of the expected set (200, 400 for nothing, 404 and 503 for names
and models churned away, 429 for quotas; never another 5xx) and its access
log line says the same status (a cut stream: 200 or 499) and the request id;
the ledger (GET /v1/usage) holds the access log's tokens to the token
(completion tokens of generation, prompt tokens of embeddings) and its
requests by status (only refusals before admission, 404 and 503
model_not_ready, are in the access log alone); and RSS after the churn is
within 10% of RSS before it.

usage: scripts/churn.py [--build build] [--seconds 600] [--warmup 20] [--workers 6] [--seed 1]
Exit status 0 when it passes, 1 when it fails, 2 when it cannot run (no
models: scripts/fetch-models.sh).
"""
import argparse
import collections
import hashlib
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ADMIN = "churn-admin-key"
OPERATOR = "churn-operator-key"  # server.api_key_env: every model, GET /v1/usage of all tenants
KEYS = {"k-all": ("acme", "all"), "k-chat": ("acme", "chat"), "k-emb": ("globex", "emb")}
SMOL_SHAPE = ["--layers", "30", "--dim", "576", "--heads", "9", "--kv-heads", "3", "--ffn", "1536",
              "--vocab", "49152"]


def cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ.get("HOME", ""), ".cache")
    return os.path.join(base, "colo", "models")


def sha(k):
    return hashlib.sha256(k.encode()).hexdigest()


def rss_kb(pid, field="VmRSS"):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_parts(pid):
    return "/".join(str(rss_kb(pid, f)) for f in ("RssAnon", "RssFile", "RssShmem"))


class Server:
    def __init__(self, a, tmp):
        self.a, self.tmp = a, tmp
        self.cfg = os.path.join(tmp, "colo.yaml")
        self.log_path = os.path.join(tmp, "server.log")
        self.port = None
        self.proc = None

    def config(self, variant):
        """The config file; variant (0/1) toggles the file's adapter, keep_alive_ms and a quota."""
        smol = os.path.join(cache_dir(), "SmolLM2-135M-Instruct.Q4_1.gguf")
        minilm = os.path.join(cache_dir(), "all-minilm-l6-v2")
        adapters = '    adapters: [ { name: cfg-ad, path: "%s" } ]\n' % os.path.join(self.tmp, "a1.gguf") \
            if variant == 0 else ""
        keep = "    keep_alive_ms: %d\n" % (600000 if variant == 0 else 900000)
        rpm = 100000 if variant == 0 else 200000
        return (
            'server: { listen: "127.0.0.1:0", device: cpu, threads: 2, admin_key_env: COLO_CHURN_ADMIN_KEY,\n'
            "          api_key_env: COLO_CHURN_API_KEY,\n"
            "          shutdown_timeout_ms: 5000, drain_delay_ms: 0 }\n"
            "models:\n"
            "  - name: smollm2\n    kind: llama\n"
            f'    path: "{smol}"\n'
            "    memory_fraction: 0.25\n    max_seq_len: 512\n    adapter_memory_bytes: 64MiB\n"
            "    batching: { max_batch_size: 16, max_queue: 256, queue_timeout_ms: 60000 }\n"
            + keep + adapters +
            "  - name: minilm\n    kind: bert\n"
            f'    path: "{minilm}"\n'
            "    memory_fraction: 0.05\n"
            "    batching: { max_batch_size: 32, max_queue_delay_us: 1000, max_queue: 256 }\n"
            "tenants:\n"
            "  - organization: acme\n"
            "    projects:\n"
            f'      - {{ name: all, keys: [ {{ name: all, sha256: "{sha("k-all")}" }} ] }}\n'
            f"      - {{ name: chat, models: [smollm2],\n"
            f"          quotas: {{ requests_per_minute: {rpm} }},\n"
            f'          keys: [ {{ name: chat, sha256: "{sha("k-chat")}" }} ] }}\n'
            "  - organization: globex\n"
            "    projects:\n"
            "      - { name: emb, models: [minilm], quotas: { requests_per_minute: 300 },\n"
            f'          keys: [ {{ name: emb, sha256: "{sha("k-emb")}" }} ] }}\n'
            f'usage: {{ db: "{os.path.join(self.tmp, "usage.sqlite")}" }}\n')

    def write_config(self, variant):
        with open(self.cfg + ".new", "w") as f:
            f.write(self.config(variant))
        os.replace(self.cfg + ".new", self.cfg)

    def start(self):
        self.write_config(0)
        port_file = os.path.join(self.tmp, "port")
        env = dict(os.environ, COLO_CHURN_ADMIN_KEY=ADMIN, COLO_CHURN_API_KEY=OPERATOR, COLO_LOG_LEVEL="info")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([os.path.join(self.a.build, "colo-server"), "--config", self.cfg,
                                      "--port-file", port_file], stdout=self.log, stderr=self.log, env=env)
        for _ in range(600):
            if self.proc.poll() is not None:
                sys.exit(f"churn: colo-server exited at start ({self.proc.returncode}); see {self.log_path}")
            if os.path.exists(port_file) and open(port_file).read().strip():
                self.port = int(open(port_file).read())
                if self.get("/health/ready")[0] == 200:
                    return
            time.sleep(0.1)
        sys.exit("churn: colo-server did not become ready")

    def request(self, method, path, body=None, key=ADMIN, headers=None, timeout=120):
        h = {"Authorization": f"Bearer {key}"}
        if body is not None:
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, json.dumps(body) if body is not None else None, h)
            r = c.getresponse()
            data = r.read()
            return r.status, data
        finally:
            c.close()

    def get(self, path):
        try:
            return self.request("GET", path, key=OPERATOR)
        except OSError:
            return 0, b""

    def state(self, name):
        st, data = self.get(f"/v1/models/{name}")
        if st == 404:
            return "absent"
        try:
            return json.loads(data).get("state", "")
        except ValueError:
            return ""

    def wait_state(self, name, states, limit_s=60):
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit_s:
            s = self.state(name)
            if s in states:
                return s
            time.sleep(0.05)
        return self.state(name)


class Load:
    """Worker threads sending the mixed load; every answer recorded by request id."""

    def __init__(self, srv, workers, seed):
        self.srv, self.workers, self.seed = srv, workers, seed
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.results = {}  # id -> dict(kind, model, status, code, cut)
        self.errors = collections.Counter()
        self.n = 0
        self.threads = []

    def next_id(self):
        with self.lock:
            self.n += 1
            return f"churn-{self.n}"

    def record(self, rid, **kw):
        with self.lock:
            self.results[rid] = kw

    def start(self):
        for i in range(self.workers):
            t = threading.Thread(target=self.run, args=(random.Random(self.seed * 1000 + i),), daemon=True)
            t.start()
            self.threads.append(t)

    def join(self):
        self.stop.set()
        for t in self.threads:
            t.join(300)

    def run(self, rng):
        while not self.stop.is_set():
            kind = rng.choice(["chat", "chat", "chat_stream", "responses", "messages", "embed", "embed",
                               "adapter", "extra", "cut"])
            try:
                getattr(self, "send_" + kind)(rng)
            except Exception as e:  # a worker never dies; what it saw is counted
                with self.lock:
                    self.errors[f"{kind}: {type(e).__name__}"] += 1
                    self.errors["_total"] += 1

    def post(self, kind, model, path, body, key, rng, stream=False):
        rid = self.next_id()
        c = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=180)
        try:
            c.request("POST", path, json.dumps(body), {"Authorization": f"Bearer {key}", "X-Request-Id": rid,
                                                        "Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
        finally:
            c.close()
        code = ""
        if r.status != 200:
            try:
                err = json.loads(data).get("error", {})
                code = err.get("code") or err.get("type") or ""
            except ValueError:
                code = "?"
        elif stream and b"[DONE]" not in data and b"message_stop" not in data and b"response.completed" not in data \
                and b"response.incomplete" not in data:
            code = "stream_unfinished"
        elif stream and (re.search(rb'"error":\s*\{', data) or b"response.failed" in data):
            m = re.search(rb'"code":"([a-z_]+)"', data)
            code = "stream_error " + (m.group(1).decode() if m else "?")
        self.record(rid, kind=kind, model=model, status=r.status, code=code, cut=False, path=path,
                    tail=data[-160:].decode(errors="replace") if code else "")

    def chat_body(self, model, rng, stream=False):
        return {"model": model, "messages": [{"role": "user", "content": rng.choice(
            ["Hi!", "What is 2+2?", "Name a colour.", "Tell me a joke."])}],
                "max_tokens": rng.randint(2, 12), "stream": stream, "temperature": 0.7, "seed": rng.randint(0, 99)}

    def send_chat(self, rng):
        key = rng.choice(["k-all", "k-chat"])
        self.post("chat", "smollm2", "/v1/chat/completions", self.chat_body("smollm2", rng), key, rng)

    def send_chat_stream(self, rng):
        self.post("chat", "smollm2", "/v1/chat/completions", self.chat_body("smollm2", rng, True), "k-all", rng,
                  stream=True)

    def send_adapter(self, rng):
        name = rng.choice(["cfg-ad", "ad-0", "ad-1", "ad-2"])
        stream = rng.random() < 0.5
        self.post("chat", name, "/v1/chat/completions", self.chat_body(name, rng, stream), "k-all", rng, stream)

    def send_extra(self, rng):
        self.post("chat", "smol-b", "/v1/chat/completions", self.chat_body("smol-b", rng), "k-all", rng)

    def send_responses(self, rng):
        body = {"model": "smollm2", "input": rng.choice(["Say hello.", "One word: sky"]),
                "max_output_tokens": rng.randint(2, 10), "stream": rng.random() < 0.3}
        self.post("chat", "smollm2", "/v1/responses", body, "k-all", rng, stream=body["stream"])

    def send_messages(self, rng):
        body = {"model": "smollm2", "max_tokens": rng.randint(2, 10), "stream": rng.random() < 0.3,
                "messages": [{"role": "user", "content": "Hello there"}]}
        self.post("chat", "smollm2", "/v1/messages", body, "k-all", rng, stream=body["stream"])

    def send_embed(self, rng):
        n = rng.randint(1, 4)
        body = {"model": "minilm", "input": [f"sentence {rng.randint(0, 999)} about churn" for _ in range(n)]}
        self.post("embed", "minilm", "/v1/embeddings", body, rng.choice(["k-all", "k-emb"]), rng)

    def send_cut(self, rng):
        """A stream whose client hangs up after a few bytes (orderly close or RST)."""
        rid = self.next_id()
        body = json.dumps(self.chat_body("smollm2", rng, True) | {"max_tokens": 64})
        s = socket.create_connection(("127.0.0.1", self.srv.port), timeout=120)
        try:
            s.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k-all\r\n"
                       f"X-Request-Id: {rid}\r\nContent-Type: application/json\r\n"
                       f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
            want = rng.randint(1, 2000)
            got = b""
            while len(got) < want:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
            status = int(got[9:12]) if got.startswith(b"HTTP/1.1 ") else 0
            if rng.random() < 0.5:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        finally:
            s.close()
        self.record(rid, kind="chat", model="smollm2", status=status, code="", cut=True, path="cut")


class Churn:
    def __init__(self, srv, rng):
        self.srv, self.rng = srv, rng
        self.actions = collections.Counter()
        self.variant = 0
        self.stop = threading.Event()

    def act(self):
        s, rng = self.srv, self.rng
        what = rng.choice(["adapter_add", "adapter_add", "adapter_delete", "adapter_delete", "model_load",
                           "model_unload", "sleep", "wake", "sighup"])
        if what == "adapter_add":
            i = rng.randint(0, 2)
            st, _ = s.request("POST", "/admin/models/smollm2/adapters",
                              {"name": f"ad-{i}", "path": os.path.join(s.tmp, f"a{1 + i % 2}.gguf")})
        elif what == "adapter_delete":
            st, _ = s.request("DELETE", f"/admin/models/smollm2/adapters/ad-{rng.randint(0, 2)}")
        elif what == "model_load":
            st, _ = s.request("POST", "/admin/models", {
                "name": "smol-b", "kind": "llama", "memory_fraction": 0.2, "max_seq_len": 512,
                "path": os.path.join(cache_dir(), "SmolLM2-135M-Instruct.Q4_1.gguf")})
        elif what == "model_unload":
            st, _ = s.request("DELETE", "/admin/models/smol-b")
        elif what in ("sleep", "wake"):
            st, _ = s.request("POST", f"/admin/models/{rng.choice(['smollm2', 'minilm'])}/{what}")
        else:
            self.variant ^= 1
            s.write_config(self.variant)
            s.proc.send_signal(signal.SIGHUP)
            st = 0
        self.actions[f"{what} {st}"] += 1

    def run(self):
        while not self.stop.is_set():
            try:
                self.act()
            except OSError as e:
                self.actions[f"error {type(e).__name__}"] += 1
            self.stop.wait(self.rng.uniform(0.2, 1.0))

    def restore(self):
        """Back to the state before the churn: config variant 0, no run-time adapters or models, all awake."""
        s = self.srv
        if self.variant:
            self.variant = 0
            s.write_config(0)
            s.proc.send_signal(signal.SIGHUP)
        for i in range(3):
            s.request("DELETE", f"/admin/models/smollm2/adapters/ad-{i}")
        s.request("DELETE", "/admin/models/smol-b")
        for m in ("smollm2", "minilm"):
            s.request("POST", f"/admin/models/{m}/wake")
        ok = all(s.wait_state(m, ("ready",)) == "ready" for m in ("smollm2", "minilm", "cfg-ad"))
        ok = ok and all(s.wait_state(n, ("absent",)) == "absent" for n in ("smol-b", "ad-0", "ad-1", "ad-2"))
        return ok


def rss_level(pid, seconds):
    """RSS (kB) as the median of samples over seconds."""
    samples = []
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        samples.append(rss_kb(pid))
        time.sleep(0.5)
    samples.sort()
    return samples[len(samples) // 2]


LOG = re.compile(r"request id=(\S+) method=\S+ path=(\S+) model=(\S+) status=(\d+) tokens=(\S+)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--seconds", type=int, default=600, help="churn duration (default 600)")
    ap.add_argument("--warmup", type=int, default=20, help="load alone before and after the churn (default 20)")
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-churn", action="store_true", help="the load alone, as a control (RSS drift)")
    ap.add_argument("--verbose", action="store_true", help="show the end of each stream that did not finish")
    a = ap.parse_args()
    need = [os.path.join(cache_dir(), "SmolLM2-135M-Instruct.Q4_1.gguf"),
            os.path.join(cache_dir(), "all-minilm-l6-v2", "model.safetensors")]
    if not all(os.path.exists(p) for p in need):
        print("churn: model weights not cached (scripts/fetch-models.sh): skipped", file=sys.stderr)
        return 2
    for p in ("colo-server", "colo-mkmodel"):
        if not os.access(os.path.join(a.build, p), os.X_OK):
            print(f"churn: {a.build}/{p} is not built", file=sys.stderr)
            return 2
    tmp = tempfile.mkdtemp(prefix="colo-churn-")
    for i, rank in ((1, 4), (2, 8)):
        subprocess.run([os.path.join(a.build, "colo-mkmodel"), "--out", os.path.join(tmp, f"a{i}.gguf")]
                       + SMOL_SHAPE + ["--lora-rank", str(rank), "--lora-seed", str(i), "--lora-alpha", "4"],
                       check=True, stdout=subprocess.DEVNULL)
    srv = Server(a, tmp)
    srv.start()
    print(f"churn: colo-server pid {srv.proc.pid} on port {srv.port}; {a.warmup} s load, {a.seconds} s churn, "
          f"{a.warmup} s load (folder {tmp})", flush=True)
    load = Load(srv, a.workers, a.seed)
    load.start()
    time.sleep(a.warmup / 2)
    rss_before = rss_level(srv.proc.pid, a.warmup / 2)
    parts_before = rss_parts(srv.proc.pid)
    churn = Churn(srv, random.Random(a.seed))
    t = threading.Thread(target=churn.run, daemon=True)
    t0 = time.monotonic()
    if not a.no_churn:
        t.start()
    crashed = False
    while time.monotonic() - t0 < a.seconds:
        if srv.proc.poll() is not None:
            crashed = True
            break
        time.sleep(1)
    churn.stop.set()
    if t.is_alive():
        t.join(120)
    restored = not crashed and churn.restore()
    rss_after = rss_level(srv.proc.pid, a.warmup) if not crashed else 0
    parts_after = rss_parts(srv.proc.pid)
    print(f"RSS anon/file/shmem kB: {parts_before} before the churn, {parts_after} after", flush=True)
    load.join()
    usage = []
    if not crashed:
        st, data = srv.request("GET", "/v1/usage?group_by=model,status", key=OPERATOR)
        usage = json.loads(data).get("data", []) if st == 200 else []
        srv.proc.send_signal(signal.SIGTERM)
    try:
        exit_rc = srv.proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        srv.proc.kill()
        exit_rc = "hung"
    srv.log.close()
    return report(a, load, churn, usage, srv.log_path, rss_before, rss_after, exit_rc, crashed, restored)


def report(a, load, churn, usage, log_path, rss_before, rss_after, exit_rc, crashed, restored):
    fail = []
    res = load.results
    logged = {}
    for line in open(log_path, errors="replace"):
        m = LOG.search(line)
        if m and m.group(1).startswith("churn-"):
            logged[m.group(1)] = (m.group(3), int(m.group(4)), 0 if m.group(5) == "-" else int(m.group(5)))
    by_status = collections.Counter()
    by_code = collections.Counter()
    for rid, r in res.items():
        by_status["cut" if r["cut"] else r["status"]] += 1
        if r["status"] != 200 and not r["cut"]:
            by_code[f'{r["status"]} {r["code"]}'] += 1
        elif r["code"]:
            by_code[f'200 {r["code"]}'] += 1
    bad = {k: n for k, n in by_code.items()
           if not re.match(r"(404 model_not_found|404 not_found_error|503 model_not_ready|503 model_failed|"
                           r"503 canceled|503 out_of_memory|503 overloaded_error|429 rate_limit_exceeded|"
                           r"429 queue_full|429 rate_limit_error)$", k)}
    if bad:
        fail.append(f"unexpected answers {bad}")
    if load.errors.get("_total"):
        fail.append(f"requests without an answer {dict(load.errors)}")
    missing = [rid for rid in res if rid not in logged]
    if missing:
        fail.append(f"{len(missing)} requests not in the access log (e.g. {missing[:3]})")
    differ = [rid for rid, r in res.items() if rid in logged and
              (logged[rid][1] not in (200, 499, r["status"]) if r["cut"] else logged[rid][1] != r["status"])]
    if differ:
        fail.append(f"{len(differ)} requests whose access log status differs (e.g. "
                    f"{[(d, res[d]['status'], logged[d][1]) for d in differ[:3]]})")
    # ledger against the access log
    gen_log = sum(t for rid, (m, s, t) in logged.items() if res.get(rid, {}).get("kind") == "chat")
    emb_log = sum(t for rid, (m, s, t) in logged.items() if res.get(rid, {}).get("kind") == "embed")
    gen_ledger = sum(u["completion_tokens"] for u in usage if u["model"] != "minilm")
    emb_ledger = sum(u["prompt_tokens"] for u in usage if u["model"] == "minilm")
    led_status = collections.Counter()
    for u in usage:
        led_status[u["status"]] += u["requests"]
    log_status = collections.Counter(s for m, s, t in logged.values())
    pre_admission = collections.Counter()
    for rid, r in res.items():
        # (Messages name a 503 overloaded_error; a cut stream's 503 came before it began)
        if r["status"] == 404 or (r["status"] == 503 and (r["code"] in ("model_not_ready", "overloaded_error")
                                                          or r["cut"])):
            pre_admission[r["status"]] += 1
    for st in sorted(set(led_status) | set(log_status)):
        d = log_status[st] - led_status[st]
        if d != 0 and not (st in (404, 503) and 0 <= d <= pre_admission[st]):
            fail.append(f"status {st}: {log_status[st]} in the access log, {led_status[st]} in the ledger")
    if gen_log != gen_ledger or emb_log != emb_ledger:
        fail.append(f"tokens: access log {gen_log} generated / {emb_log} embedded, ledger {gen_ledger} / "
                    f"{emb_ledger}")
    growth = (rss_after - rss_before) / rss_before * 100 if rss_before else float("nan")
    if crashed:
        fail.append("colo-server exited during the churn")
    if exit_rc != 0:
        fail.append(f"exit status {exit_rc} on SIGTERM")
    if not restored:
        fail.append("the state before the churn could not be restored")
    if not rss_after or abs(growth) >= 10:
        fail.append(f"RSS {growth:+.1f}%")
    print(f"requests           {len(res)} ({len(res) / (a.seconds + 2 * a.warmup):.1f}/s)")
    print("by status          " + ", ".join(f"{k}: {n}" for k, n in sorted(by_status.items(), key=str)))
    print("refusals           " + (", ".join(f"{k}: {n}" for k, n in sorted(by_code.items())) or "none"))
    print("churn actions      " + ", ".join(f"{k}: {n}" for k, n in sorted(churn.actions.items())))
    print(f"access log         {len(logged)} lines of these requests; by status "
          + ", ".join(f"{k}: {n}" for k, n in sorted(log_status.items())))
    print("ledger             by status " + ", ".join(f"{k}: {n}" for k, n in sorted(led_status.items()))
          + f" (refused before admission, in the access log only: {dict(pre_admission)})")
    print(f"tokens             generated: access log {gen_log}, ledger {gen_ledger}; "
          f"embedded: access log {emb_log}, ledger {emb_ledger}")
    for rid, r in list(res.items()):
        if r.get("tail") and r["code"].startswith("stream") and a.verbose:
            print(f"  {rid} {r['path']} {r['model']} {r['code']}: ...{r['tail']!r}")
    print(f"RSS                {rss_before} kB before the churn, {rss_after} kB after ({growth:+.1f}%)")
    print(f"SIGTERM exit       {exit_rc}")
    print("churn: " + ("PASS" if not fail else "FAIL: " + "; ".join(fail)))
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
