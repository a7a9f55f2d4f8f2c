"""Structured output through the official openai client, checked with jsonschema.

Run by scripts/json-schema-check.sh, which starts the server; by hand:

    python scripts/json_schema_check.py --url http://127.0.0.1:8080 --model smollm2 \
        [--schemas tests/data/json_schemas.json] [--temperatures 0,1] [--max-tokens 600]

Sends every schema of the set as response_format json_schema (strict) at
each temperature, and validates each output with the jsonschema package
(Draft 2020-12). An output cut by max_tokens (finish_reason "length") counts
as a failure: the set's schemas bound every string and array, so each
document ends well before. Also checks that an unsupported keyword is a 400
that names it. Exits 0 only when every output parses and validates.
"""
import argparse
import json
import sys
import time

import jsonschema
import openai
from openai import OpenAI


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--schemas", default="tests/data/json_schemas.json")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--max-tokens", type=int, default=600)
    args = ap.parse_args()
    client = OpenAI(base_url=args.url.rstrip("/") + "/v1", api_key=args.api_key, max_retries=0, timeout=300)
    cases = json.load(open(args.schemas))
    temps = [float(t) for t in args.temperatures.split(",")]
    print(f"openai {openai.__version__}, jsonschema {jsonschema.__version__}: {len(cases)} schemas x "
          f"temperatures {temps} against {args.model}")
    failures = []
    total, tokens, t_all = 0, 0, time.monotonic()
    for temp in temps:
        for i, case in enumerate(cases):
            jsonschema.Draft202012Validator.check_schema(case["schema"])
            t0 = time.monotonic()
            label = f"{case['name']} T={temp:g}"
            try:
                r = client.chat.completions.create(
                    model=args.model, messages=[{"role": "user", "content": case["prompt"]}],
                    max_tokens=args.max_tokens, temperature=temp, seed=1000 + i,
                    response_format={"type": "json_schema",
                                     "json_schema": {"name": case["name"], "schema": case["schema"], "strict": True}})
                c = r.choices[0]
                total += 1
                tokens += r.usage.completion_tokens
                if c.finish_reason != "stop":
                    raise AssertionError(f"finish_reason {c.finish_reason} after {r.usage.completion_tokens} "
                                         f"tokens: {c.message.content!r}")
                doc = json.loads(c.message.content)
                jsonschema.Draft202012Validator(case["schema"]).validate(doc)
            except Exception as e:  # every failure is reported, the run goes on
                failures.append(label)
                print(f"FAIL {label}: {type(e).__name__}: {str(e)[:400]}")
                continue
            print(f"ok   {label} ({(time.monotonic() - t0) * 1e3:.0f} ms, {r.usage.completion_tokens} tokens): "
                  f"{json.dumps(doc)[:120]}")
    # refusals name the construct
    refusals = [({"type": "object", "properties": {"x": {"type": "object", "patternProperties": {}}}},
                 "unsupported keyword 'patternProperties' at #/properties/x"),
                ({"type": "object", "properties": {"d": {"type": "string", "format": "date-time"}}},
                 "unsupported keyword 'format' at #/properties/d"),
                ({"type": "object", "properties": {"n": {"$ref": "#/$defs/n"}},
                  "$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}},
                 "recursive $ref")]
    for schema, want in refusals:
        try:
            client.chat.completions.create(
                model=args.model, messages=[{"role": "user", "content": "x"}], max_tokens=4,
                response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}})
            failures.append(want)
            print(f"FAIL refusal {want}: accepted")
        except openai.BadRequestError as e:
            if want not in str(e):
                failures.append(want)
                print(f"FAIL refusal {want}: {e}")
            else:
                print(f"ok   400 {want}")
    dt = time.monotonic() - t_all
    valid = total - sum(1 for f in failures if " T=" in f)
    print(f"json-schema-check: {valid} of {len(cases) * len(temps)} outputs valid, {tokens} tokens in {dt:.1f} s: "
          + ("PASS" if not failures else f"FAIL ({', '.join(failures)})"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
