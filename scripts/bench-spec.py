#!/usr/bin/env python3
"""Speculative decoding by prompt lookup against plain decoding, with
colo-generate (docs/BENCHMARKS.md, "Speculative decoding").

Each prompt of a set (scripts/data/spec-grounded.json: rewrite, extract,
quote from a given text; scripts/data/spec-open.json: open-ended) is sent as
one user message, greedy, once plainly and once with --speculative K, the
two alternating and swapping order every repeat. The generated token ids
of every run are compared bit for bit (the script exits 1 when any
differs); the decode speed (tokens after the first, over the time from the
first token to the last) is the median of the repeats. With --streams,
N copies of each prompt run at once (colo-generate --batch N) instead.
A benchmark, not a test: it asserts nothing about speed.

  scripts/bench-spec.py --set grounded --repeats 3
  scripts/bench-spec.py --model ~/.cache/colo/models/gemma-3-270m-q4_k_m.gguf --chat-template gemma
  scripts/bench-spec.py --set grounded --streams 1,4,8,32 --limit 4
  scripts/bench-spec.py --set grounded --baseline-build ../other/build   # two builds' drafting, in turn
  scripts/bench-spec.py --set both --replay 1,1.9,3.8,7.6   # the most drafting can gain at those step costs
  scripts/bench-spec.py --model SmolLM2-135M-Instruct.Q8_0.gguf --draft SmolLM2-135M-Instruct.Q4_1.gguf --speculative 4
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args, user, spec, batch, build=None):
    cmd = [os.path.join(build or args.build, "colo-generate"), "--model", args.model, "--chat", user, "--temperature", "0",
           "--max-tokens", str(args.max_tokens), "--threads", str(args.threads), "--print-tokens",
           "--speculative", str(args.speculative if spec else 0), "--batch", str(batch)]
    if args.chat_template:
        cmd += ["--chat-template", args.chat_template]
    if spec and args.draft:
        cmd += ["--draft", args.draft]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("bench-spec: colo-generate failed: " + p.stderr.strip())
    err = p.stderr
    toks = re.search(r"generated tokens \(\d+\):([0-9 ]*)", err)
    dec = re.search(r"decode (\d+) tokens in ([0-9.]+) s", err)
    acc = re.search(r"speculative: (\d+) tokens drafted in \d+ steps, (\d+) accepted", err)
    steps = re.search(r"steps: (\d+) decode, (\d+) prefill, (\d+) mixed", err)
    if not toks or not dec:
        sys.exit("bench-spec: cannot read colo-generate's report:\n" + err)
    n, secs = int(dec.group(1)), float(dec.group(2))
    return {"tokens": toks.group(1).split(), "rate": n / secs if secs > 0 else 0.0,
            "drafted": int(acc.group(1)) if acc else 0, "accepted": int(acc.group(2)) if acc else 0,
            "steps": sum(int(g) for g in steps.groups()) if steps else 0}


def bench_prompt(args, p, batch):
    plain, spec, base, same = [], [], [], True
    ref = None
    steps = {False: 0, True: 0}
    drafted = accepted = 0
    # with --baseline-build, a third run per repeat: that build's speculative decoding
    kinds = ["plain", "spec"] + (["base"] if args.baseline_build else [])
    for rep in range(args.repeats):
        order = kinds[rep % len(kinds):] + kinds[:rep % len(kinds)]
        if rep % 2:
            order.reverse()
        for kind in order:
            s = kind != "plain"
            r = run(args, p["user"], s, batch, args.baseline_build if kind == "base" else None)
            if ref is None:
                ref = r["tokens"]
            same &= r["tokens"] == ref
            {"plain": plain, "spec": spec, "base": base}[kind].append(r["rate"])
            if kind == "base":
                continue
            drafted += r["drafted"]
            steps[s] = r["steps"]
            accepted += r["accepted"]
    mp, ms = statistics.median(plain), statistics.median(spec)
    row = {"id": p["id"], "task": p["task"], "tokens": len(ref), "plain": mp, "spec": ms,
           "speedup": ms / mp if mp > 0 else 0.0, "same": same,
           "acceptance": accepted / drafted if drafted else 0.0, "drafted": drafted // args.repeats,
           "steps_plain": steps[False], "steps_spec": steps[True]}
    if base:
        row["base"] = statistics.median(base)
        row["base_speedup"] = row["base"] / mp if mp > 0 else 0.0
    return row


def lookup(toks, k, max_match=16):
    """colo_spec_lookup: what followed the longest earlier match of the end (the latest among equals)."""
    best, best_m, last = -1, 0, toks[-1]
    for i in range(len(toks) - 2, -1, -1):
        if toks[i] != last:
            continue
        m = 1
        while m < max_match and m <= i and toks[i - m] == toks[len(toks) - 1 - m]:
            m += 1
        if m > best_m:
            best, best_m = i, m
            if m == max_match:
                break
    return (toks[best + 1:best + 1 + k], best_m) if best >= 0 else ([], 0)


def replay(args, prompts):
    """The most drafting can gain at given step costs: each prompt's plain greedy run (its token ids)
    replayed step by step, with the cost of a step by its rows (1, 2-4, 5-8, 9-16 rows) from
    --replay. 'rule': draft 3 tokens where prompt lookup matched 2 tokens or more; 'oracle': knowing
    how many of lookup's draft the model keeps, the draft of 0, 3, 7 or 15 tokens worth the most."""
    c = [float(x) for x in args.replay.split(",")]
    cost = lambda rows: c[0] if rows == 1 else c[1] if rows <= 4 else c[2] if rows <= 8 else c[3]
    got = {"rule": [], "oracle": []}
    for p in prompts:
        cmd = [os.path.join(args.build, "colo-generate"), "--model", args.model, "--chat", p["user"], "--temperature",
               "0", "--max-tokens", str(args.max_tokens), "--threads", str(args.threads), "--print-tokens"]
        if args.chat_template:
            cmd += ["--chat-template", args.chat_template]
        err = subprocess.run(cmd, capture_output=True, text=True).stderr
        pr = re.search(r"prompt tokens \(\d+\):([0-9 ]*)", err)
        gen = re.search(r"generated tokens \(\d+\):([0-9 ]*)", err)
        if not pr or not gen:
            sys.exit("bench-spec: cannot read colo-generate's report:\n" + err)
        P, G = [int(x) for x in pr.group(1).split()], [int(x) for x in gen.group(1).split()]
        for how in got:
            i, spent = 0, 0.0
            while i < len(G):
                draft, m = lookup(P + G[:i], 15)
                kept = 0
                while kept < len(draft) and i + kept < len(G) and draft[kept] == G[i + kept]:
                    kept += 1
                if how == "rule":
                    n = 3 if m >= 2 else 0
                    step = (cost(1 + min(n, len(draft))), min(kept, n))
                else:
                    opts = [(cost(1), 0)] + [(cost(1 + n), min(kept, n)) for n in (3, 7, 15) if kept > 0]
                    step = max(opts, key=lambda o: (o[1] + 1) / o[0])
                spent += step[0]
                i += step[1] + 1
            got[how].append(len(G) / cost(1) / spent if spent else 0)
    for how, v in got.items():
        print(f"replay at step costs {args.replay}, {how}: speedup geometric mean {statistics.geometric_mean(v):.2f}, "
              f"median {statistics.median(v):.2f}, min {min(v):.2f}, max {max(v):.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "colo", "models")
    ap.add_argument("--model", default=os.path.join(cache, "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--chat-template", default="")
    ap.add_argument("--set", choices=["grounded", "open", "both"], default="both")
    ap.add_argument("--build", default=os.environ.get("BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--speculative", type=int, default=8, help="drafted tokens per step at most")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--draft", default="", help="draft with this model (colo-generate --draft) in place of prompt lookup")
    ap.add_argument("--streams", default="", help="comma-separated stream counts (colo-generate --batch)")
    ap.add_argument("--limit", type=int, default=0, help="the first N prompts of each set only")
    ap.add_argument("--json", default="", help="write every row to this file")
    ap.add_argument("--replay", default="",
                    help="COST1,COST2-4,COST5-8,COST9-16: the gain drafting can have at these step costs "
                         "(by rows), replayed from plain runs' token ids, instead of timing")
    ap.add_argument("--baseline-build", default="",
                    help="also run this build's colo-generate with --speculative, in turn with the others")
    args = ap.parse_args()
    if not os.access(args.model, os.R_OK):
        sys.exit(f"bench-spec: no {args.model} (scripts/fetch-models.sh)")
    sets = ["grounded", "open"] if args.set == "both" else [args.set]
    streams = [int(s) for s in args.streams.split(",")] if args.streams else [1]
    rows, all_same = [], True
    print(f"model {os.path.basename(args.model)}, --speculative {args.speculative}, {args.max_tokens} tokens at most, "
          f"{args.repeats} repeats, {args.threads} threads")
    for name in sets:
        with open(os.path.join(ROOT, "scripts", "data", f"spec-{name}.json")) as f:
            prompts = json.load(f)["prompts"]
        if args.limit:
            prompts = prompts[:args.limit]
        if args.replay:
            print(f"\n{name}")
            replay(args, prompts)
            continue
        for batch in streams:
            print(f"\n{name}, {batch} stream(s)\n")
            print("| prompt | task | tokens | plain tokens/s | speculative tokens/s | speedup | steps | drafted | "
                  "accepted | same |")
            print("|---|---|---|---|---|---|---|---|---|---|")
            got = []
            for p in prompts:
                r = bench_prompt(args, p, batch)
                r["set"], r["streams"] = name, batch
                got.append(r)
                all_same &= r["same"]
                print(f"| {r['id']} | {r['task']} | {r['tokens']} | {r['plain']:.1f} | {r['spec']:.1f} | "
                      f"{r['speedup']:.2f} | {r['steps_plain']} / {r['steps_spec']} | {r['drafted']} | "
                      f"{100 * r['acceptance']:.0f}% | "
                      f"{'yes' if r['same'] else 'NO'} |" +
                      (f" baseline {r['base']:.1f} ({r['base_speedup']:.2f}x)" if "base" in r else ""), flush=True)
            sp = [r["speedup"] for r in got if r["speedup"] > 0]
            gm = statistics.geometric_mean(sp) if sp else 0.0
            print(f"\n{name}, {batch} stream(s): speedup geometric mean {gm:.2f}, median {statistics.median(sp):.2f}, "
                  f"min {min(sp):.2f}, max {max(sp):.2f}; outputs identical: "
                  f"{sum(r['same'] for r in got)} of {len(got)}")
            bs = [r["base_speedup"] for r in got if r.get("base_speedup", 0) > 0]
            if bs:
                print(f"{name}, {batch} stream(s): the baseline build's speedup geometric mean "
                      f"{statistics.geometric_mean(bs):.2f}, median {statistics.median(bs):.2f}")
            rows += got
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all_same else 1


if __name__ == "__main__":
    sys.exit(main())
