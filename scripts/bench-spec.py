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
  scripts/bench-spec.py --set grounded --llama /path/to/llama.cpp/build/bin   # llama.cpp beside colo

With --llama (one stream only), llama.cpp's programs from that directory run
in turn with colo's on the same prompt text (the model's chat template
written out: chatml with SmolLM2's default system message, or gemma):
llama-lookup drafting nothing (--spec-draft-n-max 0) for plain decoding, and
drafting n-grams of up to --speculative tokens or, with --draft,
llama-speculative-simple with the same draft model; their decode speeds are
what they report (tokens over the time after the prompt).
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


# the chat templates written out as text, for llama.cpp's programs (colo-generate applies the model's own)
TEMPLATES = {
    "chatml": "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
              "<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n",
    "gemma": "<start_of_turn>user\n{user}<end_of_turn>\n<start_of_turn>model\n",
}


def run_llama(args, user, spec):
    """llama.cpp on the same prompt: decode tokens/s, and drafted/accepted with spec."""
    text = TEMPLATES["gemma" if args.chat_template == "gemma" else "chatml"].format(user=user)
    common = ["-m", args.model, "-p", text, "-n", str(args.max_tokens), "--temp", "0", "-t", str(args.threads)]
    if not spec:  # the same loop, drafting nothing
        cmd = [os.path.join(args.llama, "llama-lookup")] + common + ["--spec-draft-n-max", "0"]
    elif args.draft:
        cmd = [os.path.join(args.llama, "llama-speculative-simple")] + common + [
            "-md", args.draft, "--spec-type", "draft-simple", "--spec-draft-n-max", str(args.speculative)]
    else:
        cmd = [os.path.join(args.llama, "llama-lookup")] + common + ["--spec-draft-n-max", str(args.speculative)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    out = p.stdout + p.stderr
    if p.returncode != 0:
        sys.exit(f"bench-spec: {os.path.basename(cmd[0])} failed:\n" + out[-2000:])
    dec = re.search(r"decoded\s+(\d+) tokens in\s+([0-9.]+) seconds", out)
    d, a = re.search(r"n_drafted\s*=\s*(\d+)", out), re.search(r"n_accept\s*=\s*(\d+)", out)
    if not dec:
        sys.exit("bench-spec: cannot read llama.cpp's report:\n" + out[-2000:])
    secs = float(dec.group(2))
    return {"rate": int(dec.group(1)) / secs if secs > 0 else 0.0, "drafted": int(d.group(1)) if d else 0,
            "accepted": int(a.group(1)) if a else 0}


def bench_prompt(args, p, batch):
    plain, spec, base, same = [], [], [], True
    ref = None
    steps = {False: 0, True: 0}
    drafted = accepted = 0
    # with --baseline-build, a third run per repeat: that build's speculative decoding; with
    # --llama, llama.cpp's plain decoding and its drafting
    kinds = ["plain", "spec"] + (["base"] if args.baseline_build else []) + (["lplain", "lspec"] if args.llama else [])
    lp, ls, ldrafted, laccepted = [], [], 0, 0
    for rep in range(args.repeats):
        order = kinds[rep % len(kinds):] + kinds[:rep % len(kinds)]
        if rep % 2:
            order.reverse()
        for kind in order:
            if kind in ("lplain", "lspec"):
                r = run_llama(args, p["user"], kind == "lspec")
                (lp if kind == "lplain" else ls).append(r["rate"])
                ldrafted += r.get("drafted", 0)
                laccepted += r.get("accepted", 0)
                continue
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
    if lp:
        row["llama_plain"], row["llama_spec"] = statistics.median(lp), statistics.median(ls)
        row["llama_speedup"] = row["llama_spec"] / row["llama_plain"] if row["llama_plain"] > 0 else 0.0
        row["llama_acceptance"] = laccepted / ldrafted if ldrafted else 0.0
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
    ap.add_argument("--llama", default="",
                    help="a llama.cpp bin directory: also run its llama-completion and llama-lookup "
                         "(llama-speculative-simple with --draft) on each prompt, in turn with colo (one stream)")
    ap.add_argument("--baseline-build", default="",
                    help="also run this build's colo-generate with --speculative, in turn with the others")
    args = ap.parse_args()
    if not os.access(args.model, os.R_OK):
        sys.exit(f"bench-spec: no {args.model} (scripts/fetch-models.sh)")
    sets = ["grounded", "open"] if args.set == "both" else [args.set]
    streams = [int(s) for s in args.streams.split(",")] if args.streams else [1]
    if args.llama and streams != [1]:
        sys.exit("bench-spec: --llama runs one stream only")
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
                      (f" baseline {r['base']:.1f} ({r['base_speedup']:.2f}x)" if "base" in r else "") +
                      (f" llama.cpp {r['llama_plain']:.1f} -> {r['llama_spec']:.1f} ({r['llama_speedup']:.2f}x, "
                       f"{100 * r['llama_acceptance']:.0f}% accepted; colo/llama.cpp drafting "
                       f"{r['spec'] / r['llama_spec'] if r['llama_spec'] else 0:.2f}x)" if "llama_plain" in r else ""),
                      flush=True)
            sp = [r["speedup"] for r in got if r["speedup"] > 0]
            gm = statistics.geometric_mean(sp) if sp else 0.0
            print(f"\n{name}, {batch} stream(s): speedup geometric mean {gm:.2f}, median {statistics.median(sp):.2f}, "
                  f"min {min(sp):.2f}, max {max(sp):.2f}; outputs identical: "
                  f"{sum(r['same'] for r in got)} of {len(got)}")
            bs = [r["base_speedup"] for r in got if r.get("base_speedup", 0) > 0]
            if bs:
                print(f"{name}, {batch} stream(s): the baseline build's speedup geometric mean "
                      f"{statistics.geometric_mean(bs):.2f}, median {statistics.median(bs):.2f}")
            ls_ = [r for r in got if r.get("llama_speedup", 0) > 0]
            if ls_:
                sg = lambda k: statistics.geometric_mean([r[k] for r in ls_])
                print(f"{name}: llama.cpp's speedup geometric mean {sg('llama_speedup'):.2f}; tokens/s geometric means: "
                      f"colo plain {sg('plain'):.1f}, colo speculative {sg('spec'):.1f}, llama.cpp plain "
                      f"{sg('llama_plain'):.1f}, llama.cpp {'draft model' if args.draft else 'lookup'} "
                      f"{sg('llama_spec'):.1f}: colo/llama.cpp {sg('spec') / sg('llama_spec'):.2f}x speculative, "
                      f"{sg('plain') / sg('llama_plain'):.2f}x plain")
            rows += got
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all_same else 1


if __name__ == "__main__":
    sys.exit(main())
