#!/usr/bin/env python3
"""Medians over the rounds of scripts/bench-trace.sh.

    bench-trace-summary.py OUT_DIR BUDGET_BYTES NAME=GUARANTEE_BYTES ...

Reads OUT_DIR/RATE/ROUND/SIDE.json (colo-loadtest's trace reports) and
SIDE-requests.jsonl, prints one row per rate and side (the median of each
column over the rounds), the attainment pooled over the rounds' requests
with its 95% confidence interval (Wilson's score interval: each request
meets its SLOs or not) and each round's, and the separate-servers baseline
(how many models fit the budget as one server each, smallest first), and
writes OUT_DIR/summary.json.
"""
import json
import os
import statistics
import sys


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def failed(path):
    """Requests whose outcome was not ok (an HTTP error, a broken stream, no answer)."""
    n = 0
    if not os.path.exists(path):
        return None
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("outcome") != "ok":
                n += 1
    return n


def one_run(d, side):
    path = os.path.join(d, side + ".json")
    if not os.path.exists(path):
        return None
    t = json.load(open(path)).get("trace") or {}
    a = t.get("overall") or {}
    rss = t.get("peak_rss_bytes")
    return {
        "attainment_pct": a.get("attainment_pct"),
        "request_goodput": a.get("request_goodput"),
        "scheduled": a.get("scheduled"),
        "cold": a.get("cold"),
        "p99_ttft_warm_ms": a.get("p99_ttft_warm_ms"),
        "p99_ttft_cold_ms": a.get("p99_ttft_cold_ms"),
        "p50_ttft_cold_ms": a.get("p50_ttft_cold_ms"),
        "wakes": a.get("wakes"),
        "evictions": a.get("evictions"),
        "loads_seen": a.get("loads_seen"),
        "failed": failed(os.path.join(d, side + "-requests.jsonl")),
        "peak_rss_mib": rss / 1048576 if rss else None,
    }


def wilson(good, n, z=1.96):
    """95% interval of a proportion (percent), Wilson's score interval."""
    if not n:
        return None, None
    p = good / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / d
    return 100 * (c - h), 100 * (c + h)


def pooled(runs):
    """Attainment over every round's requests, and its interval."""
    good = n = 0
    for r in runs:
        if r["attainment_pct"] is None or not r["scheduled"]:
            continue
        n += r["scheduled"]
        good += round(r["attainment_pct"] * r["scheduled"] / 100)
    lo, hi = wilson(good, n)
    return {"requests": n, "good": good, "attainment_pct": 100 * good / n if n else None, "ci95_low_pct": lo,
            "ci95_high_pct": hi}


def fmt(v, p=1):
    return "-" if v is None else f"{v:.{p}f}"


def main():
    out, budget = sys.argv[1], int(sys.argv[2])
    sizes = sorted(int(a.split("=")[1]) for a in sys.argv[3:])
    rates = sorted((r for r in os.listdir(out) if os.path.isdir(os.path.join(out, r)) and r != "models"), key=float)
    summary = {"budget_bytes": budget, "rates": {}}
    print(f"\n{'rate/s':>6} {'server':7} {'rounds':>6} {'attain%':>8} {'goodput/s':>9} {'cold':>5} "
          f"{'p99 TTFT warm':>13} {'p99 TTFT cold':>13} {'p50 cold':>9} {'loads':>6} {'failed':>6} {'peak RSS MiB':>12}")
    for rate in rates:
        rounds = sorted(os.listdir(os.path.join(out, rate)), key=int)
        for side in ("colo", "router"):
            runs = [r for r in (one_run(os.path.join(out, rate, x), side) for x in rounds) if r]
            if not runs:
                continue
            m = {k: median([r[k] for r in runs]) for k in runs[0]}
            m["rounds"] = len(runs)
            summary["rates"].setdefault(rate, {})[side] = {"median": m, "runs": runs, "pooled": pooled(runs)}
            loads = m["evictions"] if side == "colo" else m["loads_seen"]
            print(f"{rate:>6} {side:7} {len(runs):>6} {fmt(m['attainment_pct']):>8} {fmt(m['request_goodput'], 2):>9}"
                  f" {fmt(m['cold'], 0):>5} {fmt(m['p99_ttft_warm_ms'], 0):>13} {fmt(m['p99_ttft_cold_ms'], 0):>13}"
                  f" {fmt(m['p50_ttft_cold_ms'], 0):>9} {fmt(loads, 0):>6} {fmt(m['failed'], 0):>6}"
                  f" {fmt(m['peak_rss_mib'], 0):>12}")
    print(f"\n{'rate/s':>6} {'server':7} {'requests':>8} {'attain%':>8} {'95% interval':>15}  per round")
    for rate, sides in summary["rates"].items():
        for side, v in sides.items():
            p = v["pooled"]
            ci = "-" if p["ci95_low_pct"] is None else f"{p['ci95_low_pct']:.1f}-{p['ci95_high_pct']:.1f}"
            per = " ".join(fmt(r["attainment_pct"]) for r in v["runs"])
            print(f"{rate:>6} {side:7} {p['requests']:>8} {fmt(p['attainment_pct']):>8} {ci:>15}  {per}")
    fit, used = 0, 0
    for s in sizes:
        if used + s > budget:
            break
        fit, used = fit + 1, used + s
    summary["separate_servers_fit"] = {"fit": fit, "of": len(sizes)}
    print(f"\n(loads: colo's evictions, the router's loads seen)\nseparate servers, one per model: {fit} of "
          f"{len(sizes)} models fit the budget of {budget / 1048576:.0f} MiB (each guaranteed its file plus "
          f"activations and KV cache, smallest first); the other {len(sizes) - fit} cannot be served")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
