"""Times streamed completions by hand with the official openai client.

The independent measurement colo-loadtest's TTFT and TPOT are checked
against (scripts/loadtest-openai-compare.sh runs both on one server):

    python scripts/loadtest_openai_timing.py --url http://127.0.0.1:8080 --prompts FILE \
        [--repeat 4] [--warmup 2] [--json OUT]

FILE holds JSON lines {"body": {...}} (colo-loadtest's --prompts format);
each body is sent as client.chat.completions.create(**body, stream=True)
with stream_options.include_usage (bodies with "prompt" instead of
"messages" go to client.completions.create). Requests run one at a time. Per request:
TTFT = from the moment the request goes to the transport (the HTTP client's
request event hook, after the client has built it) to the first chunk whose text (chat: delta
content) is not empty, so the role-only first chunk of a chat stream does not count;
end = after the stream is exhausted ([DONE] read); TPOT = (end - first) /
(usage.completion_tokens - 1), as vllm bench serve defines it. Prints the
mean and median of both and writes them to --json.
"""
import argparse
import json
import statistics
import sys
import time

import openai
from openai import OpenAI


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--repeat", type=int, default=4, help="passes over the prompts")
    ap.add_argument("--warmup", type=int, default=2, help="requests sent first and not counted")
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    bodies = []
    with open(args.prompts) as f:
        for line in f:
            if line.strip():
                bodies.append(json.loads(line)["body"])
    # TTFT starts when the request goes to the transport, as colo-loadtest's
    # starts when it writes the request: the HTTP client's request hook runs then, after
    # the client has built the request (a few milliseconds of Python that are
    # the client's own cost, not the server's).
    sent = [0.0]

    def on_request(request):
        sent[0] = time.perf_counter()

    http = openai.DefaultHttpxClient(event_hooks={"request": [on_request]})
    client = OpenAI(base_url=args.url.rstrip("/") + "/v1", api_key=args.api_key, max_retries=0, timeout=120,
                    http_client=http)

    def one(body):
        req = dict(body)
        req["stream"] = True
        req["stream_options"] = {"include_usage": True}
        first = None
        tokens = None
        chat = "messages" in req
        stream = client.chat.completions.create(**req) if chat else client.completions.create(**req)
        for chunk in stream:
            if chunk.choices and first is None:
                c = chunk.choices[0]
                if (c.delta.content if chat else c.text):
                    first = time.perf_counter()
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
        end = time.perf_counter()
        if first is None or tokens is None:
            raise RuntimeError("no token or no usage in the stream")
        ttft = (first - sent[0]) * 1e3
        tpot = (end - first) * 1e3 / (tokens - 1) if tokens > 1 else None
        return ttft, tpot, tokens

    for i in range(args.warmup):
        one(bodies[i % len(bodies)])
    ttfts, tpots, toks = [], [], []
    for _ in range(args.repeat):
        for body in bodies:
            ttft, tpot, n = one(body)
            ttfts.append(ttft)
            toks.append(n)
            if tpot is not None:
                tpots.append(tpot)
    res = {
        "client": f"openai {openai.__version__}",
        "requests": len(ttfts),
        "mean_ttft_ms": statistics.mean(ttfts),
        "median_ttft_ms": statistics.median(ttfts),
        "mean_tpot_ms": statistics.mean(tpots),
        "median_tpot_ms": statistics.median(tpots),
        "mean_output_tokens": statistics.mean(toks),
        "ttfts_ms": ttfts,
        "tpots_ms": tpots,
    }
    print(json.dumps({k: v for k, v in res.items() if not isinstance(v, list)}, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
