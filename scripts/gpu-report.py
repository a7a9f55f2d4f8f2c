#!/usr/bin/env python3
"""Tables for docs/GPU.md and docs/BENCHMARKS.md from a scripts/gpu-run.sh folder.

Reads what the stages left in DIR (summary.txt, cuda.log, check.log,
sanitize.log, matvec.log, kernels.log, decode.log, memory.log,
replay-files.tar.gz) and prints Markdown: the stages' exit statuses, each
CUDA test program's verdict, the suite's result and the device as colo saw
it, the sanitizer's verdicts, mat-vec bandwidth against a device
copy, prefill products against cuBLAS, decode tokens/s by batch (and
llama-bench's, when it ran), the wake and elastic-memory tables, and the
co-location replay beside the motivating time-sliced numbers. Stages that
did not run are left out. Uses only the standard library.

usage: scripts/gpu-report.py DIR [DIR ...]   (several folders: one call each)
"""
import csv
import io
import os
import re
import shutil
import statistics
import sys
import tarfile
import tempfile

# Phi-3.5-mini and DeepSeek-R1-Distill-Llama-8B in two TGI servers on one
# L40S, --cuda-memory-fraction 0.4 each, time-sliced by the driver.
MOTIVATING = {"latency": (2.01, 1.57), "retention": (0.50, 0.64), "stp": 1.14}


def read(d, name):
    p = os.path.join(d, name)
    return open(p, errors="replace").read() if os.path.exists(p) else None


def summary(d):
    s = read(d, "summary.txt")
    if not s:
        return
    print("### Stages\n")
    for line in s.splitlines():
        if line.startswith("gpu-run:"):
            print(f"- {line[len('gpu-run: '):]}")
        else:
            f = line.split()
            if len(f) >= 4 and f[1] == "exit":
                print(f"  - `{f[0]}`: exit {f[2]}, {f[3]} s")
    print()


def cuda(d):
    s = read(d, "cuda.log")
    if not s:
        return
    print("### CUDA test programs (`cuda`)\n")
    for pat in (r"^name, driver_version.*\n.*$", r"^colo commit: .*$"):
        for m in re.finditer(pat, s, re.M):
            print(f"    {m.group(0)}")
    rows = re.findall(r"^(PASS|FAIL|SKIPPED|TIMEOUT|MISSING) (test_\w+)(.*)$", s, re.M)
    if rows:
        print("\n| program | verdict | |\n|---|---|---|")
        for verdict, test, rest in rows:
            print(f"| `{test}` | {verdict.lower()} | {rest.strip()} |")
    print()


def check(d):
    s = read(d, "check.log")
    if not s:
        return
    print("### Suite (`check`)\n")
    for pat in (r"^\d+% tests passed.*$", r"^nvidia-smi.*$", r"^name, driver_version.*\n.*$",
                r"^colo commit: .*$", r"^== gpu-check: .*$"):
        for m in re.finditer(pat, s, re.M):
            print(f"    {m.group(0)}")
    failed = re.findall(r"^\s+\d+ - (\S+) \(Failed\)", s, re.M)
    if failed:
        print("\nFailed: " + ", ".join(f"`{t}`" for t in failed))
    dev = s.split("== CUDA device as colo sees it", 1)
    if len(dev) == 2:
        lines = [ln for ln in dev[1].splitlines()[1:12] if ln.startswith(("cuda:", "gpu-check")) or "partition" in ln]
        if lines:
            print("\nThe CUDA device as colo sees it:\n")
            for ln in lines:
                print(f"    {ln}")
    print()


def sanitize(d):
    s = read(d, "sanitize.log")
    if not s:
        return
    rows = re.findall(r"^(clean|ERRORS|TIMEOUT): (\w+) (\S+)", s, re.M)
    if not rows:
        return
    print("### compute-sanitizer\n\n| test | tool | verdict |\n|---|---|---|")
    for verdict, tool, test in rows:
        print(f"| `{test}` | {tool} | {verdict.lower()} |")
    print()


def kernels(d):
    for name in ("matvec.log", "kernels.log"):
        s = read(d, name)
        if s:
            kernel_tables(s, name[:-4])


def kernel_tables(s, stage):
    print(f"### Kernels (`{stage}`: `colo-bench-kernels`)\n")
    m = re.search(r"^device: (.*)$", s, re.M)
    if m:
        print(f"Device: {m.group(1)}. ", end="")
    m = re.search(r"device-to-device copy: ([\d.]+) GB/s", s)
    if m:
        print(f"A device-to-device copy moved {m.group(1)} GB/s (read and written).\n")
    mv = re.findall(r"^\s+(\w+)\s+n=(\d+)\s+k=(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)%$", s, re.M)
    if mv:
        shapes = sorted({(int(n), int(k)) for _, n, k, *_ in mv}, key=lambda x: (x[0] * x[1], x))
        types = list(dict.fromkeys(t for t, *_ in mv))
        by = {(t, int(n), int(k)): (float(gbs), int(frac)) for t, n, k, _, gbs, frac in mv}
        print("Mat-vec (one row), GB/s of weights and the fraction of the copy's rate:\n")
        print("| type | " + " | ".join(f"{n}x{k}" for n, k in shapes) + " |")
        print("|---|" + "---|" * len(shapes))
        for t in types:
            cells = [f"{by[(t, n, k)][0]:.0f} ({by[(t, n, k)][1]}%)" if (t, n, k) in by else "-" for n, k in shapes]
            print(f"| {t} | " + " | ".join(cells) + " |")
        print()
    pre = s.split("prefill (n=k=4096), TFLOP/s", 1)
    if len(pre) == 2:
        head = pre[1].splitlines()[0]
        ms = re.findall(r"m=\s*(\d+)", head)
        print("Prefill products at n = k = 4096, TFLOP/s (cuBLAS's own GEMM first):\n")
        print("| weights | " + " | ".join(f"m={m}" for m in ms) + " |\n|---|" + "---|" * len(ms))
        for ln in pre[1].splitlines()[1:]:
            m = re.match(r"^\s{2}(\S.*?)\s{2,}([\d.\s-]+)$", ln)
            if not m:
                break
            print(f"| {m.group(1).strip()} | " + " | ".join(m.group(2).split()) + " |")
        print()


def decode(d):
    s = read(d, "decode.log")
    if not s:
        return
    print("### Decode (`colo-generate`, tokens/s, median of the runs)\n")
    print("| model | weights | batch 1 | batch 8 | batch 32 | prefill tokens/s (batch 1) | llama-bench tg64 |")
    print("|---|---|---|---|---|---|---|")
    for block in re.split(r"^== (?=\S+$)", s, flags=re.M)[1:]:
        name = block.splitlines()[0].strip()
        if name.endswith("llama-bench"):
            continue
        size = re.search(r"\((\d+) bytes\)", block)
        med = {int(b): m for b, m in re.findall(r"^batch\s+(\d+): decode tokens/s .*\(median ([\d.]+)\)", block, re.M)}
        pf = re.findall(r"^batch 1: colo-generate: prefill .*?\(([\d.]+) tokens/s\)", block, re.M)
        lb = ""
        tail = s.split(f"== {name}: llama-bench", 1)
        if len(tail) == 2:
            m = re.search(r"\|\s*tg64\s*\|\s*([\d.]+)", tail[1].split("\n== ", 1)[0])
            lb = m.group(1) if m else "failed"
        cells = [f"{float(med[b]):.1f}" if b in med else "-" for b in (1, 8, 32)]
        pfm = f"{statistics.median(float(x) for x in pf):.0f}" if pf else "-"
        gb = f"{int(size.group(1)) / 1e9:.2f} GB" if size else "-"
        print(f"| {name} | {gb} | " + " | ".join(cells) + f" | {pfm} | {lb or '-'} |")
    print()


def memory(d):
    s = read(d, "memory.log")
    if not s:
        return
    print("### Memory (`memory`)\n")
    for t in re.findall(r"((?:^\|.*\|\n)+)", s + "\n", re.M):
        print(t)


def replay(d):
    p = os.path.join(d, "replay-files.tar.gz")
    if not os.path.exists(p):
        return
    with tarfile.open(p) as tf:
        try:
            f = tf.extractfile("replay/colocation.tsv")
        except KeyError:
            return
        rows = list(csv.DictReader(io.TextIOWrapper(f), delimiter="\t"))
    if not rows:
        return
    print("### Co-location replay (`replay`)\n")
    print("`hi` (Phi-3.5-mini shape, priority high, one connection) beside `be` (R1-Distill-Llama-8B shape, "
          "priority low): p99 latency together / alone, throughput together / alone, and STP (the sum of the "
          "two retentions).\n")
    print("| setup | `hi` p99 x | `be` p99 x | `hi` kept | `be` kept | STP |\n|---|---|---|---|---|---|")
    lat, ret = MOTIVATING["latency"], MOTIVATING["retention"]
    print(f"| two TGI servers, time-sliced (L40S, motivating) | {lat[0]:.2f} | {lat[1]:.2f} | {ret[0]:.2f} | "
          f"{ret[1]:.2f} | {MOTIVATING['stp']:.2f} |")
    for r in rows:
        g = lambda k: r.get(k) or "-"
        print(f"| {r['policy']} (round {r['round']}) | {g('hi_p99_ratio')} | {g('be_p99_ratio')} | "
              f"{g('hi_retention')} | {g('be_retention')} | {g('stp')} |")
    print()
    goals(rows)


def goals(rows):
    """The replay's goals (docs/GPU.md), met or not, from the medians per setup."""
    def med(policy, key):
        v = [float(r[key]) for r in rows
             if r["policy"] == policy and re.fullmatch(r"[\d.]+", r.get(key) or "")]
        return statistics.median(v) if v else None
    yes = lambda ok: "met" if ok else "not met"
    lines = []
    hi, be = med("priority", "hi_p99_ratio"), med("priority", "be_retention")
    if hi is not None and be is not None:
        lines.append(f"`priority`: `hi` p99 {hi:.2f}x alone (goal at most 1.07), `be` keeps {be:.2f} "
                     f"(goal at least 0.50): {yes(hi <= 1.07 and be >= 0.50)}")
    stp, kh, kb = med("fair", "stp"), med("fair", "hi_retention"), med("fair", "be_retention")
    if None not in (stp, kh, kb):
        lines.append(f"`fair`: STP {stp:.2f} (goal at least 1.5), each kept {kh:.2f} / {kb:.2f} (goal at least "
                     f"0.70): {yes(stp >= 1.5 and min(kh, kb) >= 0.70)}")
    sep = {k: med("separate", k) for k in ("hi_p99_ratio", "be_p99_ratio", "stp")}
    fair = {k: med("fair", k) for k in sep}
    if None not in sep.values() and None not in fair.values():
        better = fair["hi_p99_ratio"] < sep["hi_p99_ratio"] and fair["be_p99_ratio"] < sep["be_p99_ratio"] \
            and fair["stp"] > sep["stp"]
        lines.append(f"`fair` against two separate processes in the same run: latency impact "
                     f"{fair['hi_p99_ratio']:.2f} / {fair['be_p99_ratio']:.2f} against {sep['hi_p99_ratio']:.2f} / "
                     f"{sep['be_p99_ratio']:.2f}, STP {fair['stp']:.2f} against {sep['stp']:.2f}: {yes(better)}")
    if lines:
        print("Goals:\n")
        for ln in lines:
            print(f"- {ln}")
        print()


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 else 2)
    for d in sys.argv[1:]:
        print(f"## {d}\n")
        packed = os.path.join(d, "gpu-run-files.tar.gz")  # a call that left more than 8 files
        with tempfile.TemporaryDirectory() as tmp:
            if os.path.exists(packed):
                with tarfile.open(packed) as tf:
                    tf.extractall(tmp, filter="data")
                shutil.copy(os.path.join(d, "summary.txt"), tmp)
                d = tmp
            for part in (summary, cuda, check, sanitize, kernels, decode, memory, replay):
                part(d)


if __name__ == "__main__":
    main()
