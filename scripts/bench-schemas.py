#!/usr/bin/env python3
"""How many schemas of a set structured output finishes within max_tokens.

    scripts/bench-schemas.py [--generate build/colo-generate] [--model FILE.gguf]
        [--schemas tests/data/json_schemas_ordinary.json] [--max-tokens 200]
        [--threads N] [--json-object] [--markdown]

Runs colo-generate once per schema of the set (its "prompt" as a chat
message, its "schema" as --json-schema) greedily (temperature 0), and prints
per schema: the finish reason (stop: the document ended; length: cut by
max_tokens), the tokens generated, whether the output parses as JSON and
validates against the schema (a small validator of the keywords colo
accepts, below), and the start of the text. The last line is the count:
"finished N/M, valid V/M". With --json-object, one more run asks for any
object (response_format json_object) and checks that its first byte is '{'.

Exit code: 0 when every finished output is valid JSON that validates
(an output cut by max_tokens is counted, not a failure); 1 otherwise; 2 on
bad usage. Only the standard library.
"""
import argparse
import json
import os
import re
import subprocess
import sys


def default_model():
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "colo", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def type_ok(t, v):
    if t == "object":
        return isinstance(v, dict)
    if t == "array":
        return isinstance(v, list)
    if t == "string":
        return isinstance(v, str)
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "boolean":
        return isinstance(v, bool)
    if t == "null":
        return v is None
    raise ValueError(f"unknown type {t}")


def validate(s, v, root, path="$"):
    """Raises ValueError naming where v breaks schema s (the keywords colo
    compiles: type, properties, required, additionalProperties, items,
    min/maxItems, min/maxLength, pattern, enum, const, anyOf, $ref)."""
    if s is True or s == {}:
        return
    if "$ref" in s:
        ref = s["$ref"]
        for prefix in ("#/$defs/", "#/definitions/"):
            if ref.startswith(prefix):
                return validate(root[prefix[2:-1]][ref[len(prefix):]], v, root, path)
        raise ValueError(f"{path}: unsupported $ref {ref}")
    if "anyOf" in s:
        for alt in s["anyOf"]:
            try:
                return validate(alt, v, root, path)
            except ValueError:
                pass
        raise ValueError(f"{path}: no alternative of anyOf matches")
    if "enum" in s and not any(v == e and type(v) is type(e) for e in s["enum"]):
        raise ValueError(f"{path}: {v!r} is not in the enum")
    if "const" in s and not (v == s["const"] and type(v) is type(s["const"])):
        raise ValueError(f"{path}: {v!r} is not the const")
    t = s.get("type")
    if t is not None:
        types = t if isinstance(t, list) else [t]
        if not any(type_ok(x, v) for x in types):
            raise ValueError(f"{path}: {v!r} is not of type {t}")
    if isinstance(v, dict):
        props = s.get("properties", {})
        for k in s.get("required", []):
            if k not in v:
                raise ValueError(f"{path}: required property {k} is missing")
        for k, x in v.items():
            if k in props:
                validate(props[k], x, root, f"{path}.{k}")
            elif s.get("additionalProperties") is False:
                raise ValueError(f"{path}: property {k} is not allowed")
    if isinstance(v, list):
        if len(v) < s.get("minItems", 0) or ("maxItems" in s and len(v) > s["maxItems"]):
            raise ValueError(f"{path}: {len(v)} items")
        for i, x in enumerate(v):
            if "items" in s:
                validate(s["items"], x, root, f"{path}[{i}]")
    if isinstance(v, str):
        if len(v) < s.get("minLength", 0) or ("maxLength" in s and len(v) > s["maxLength"]):
            raise ValueError(f"{path}: {len(v)} characters")
        if "pattern" in s and not re.search(s["pattern"], v):
            raise ValueError(f"{path}: {v!r} does not match {s['pattern']}")


def generate(args, prompt, schema_args):
    """(text, finish reason, tokens generated) of one greedy run."""
    cmd = [args.generate, "--model", args.model, "--chat", prompt, "--max-tokens", str(args.max_tokens),
           "--temperature", "0", "--seed", "1", "--device", "cpu"] + schema_args
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    p = subprocess.run(cmd, capture_output=True, timeout=args.timeout_s)
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode != 0:
        return p.stdout.decode("utf-8", "replace"), "error: " + err.strip().splitlines()[-1:][0] if err.strip() else "error", 0
    m = re.search(r"decode (\d+) tokens .*finish: (\w+)", err)
    if not m:
        return p.stdout.decode("utf-8", "replace"), "error: no statistics line", 0
    text = p.stdout.decode("utf-8", "replace")
    text = text[:-1] if text.endswith("\n") else text  # colo-generate ends its output with one newline
    return text, m.group(2), int(m.group(1)) + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--generate", default="build/colo-generate")
    ap.add_argument("--model", default=default_model())
    ap.add_argument("--schemas", default="tests/data/json_schemas_ordinary.json")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--timeout-s", type=int, default=600)
    ap.add_argument("--json-object", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="a table row per schema")
    args = ap.parse_args()
    if not os.path.exists(args.generate) or not os.path.exists(args.model):
        print(f"bench-schemas: {args.generate} or {args.model} is missing (build; scripts/fetch-models.sh)",
              file=sys.stderr)
        return 2
    cases = json.load(open(args.schemas))
    finished = valid = 0
    bad = []
    if args.markdown:
        print("| schema | finish | tokens | valid | output (start) |")
        print("|---|---|---|---|---|")
    for case in cases:
        text, finish, tokens = generate(args, case["prompt"], ["--json-schema", json.dumps(case["schema"])])
        ok = "-"
        if finish == "stop":
            finished += 1
            try:
                validate(case["schema"], json.loads(text), case["schema"])
                ok = "yes"
                valid += 1
            except ValueError as e:  # json.JSONDecodeError is a ValueError
                ok = f"no ({e})"
                bad.append(case["name"])
        shown = json.dumps(text[:60])
        if args.markdown:
            print(f"| {case['name']} | {finish} | {tokens} | {ok} | `{shown}` |")
        else:
            print(f"{case['name']:<16} {finish:<7} {tokens:>4} tokens  valid: {ok:<4} {shown}")
        sys.stdout.flush()
    print(f"finished {finished}/{len(cases)}, valid {valid}/{len(cases)} "
          f"(max_tokens {args.max_tokens}, temperature 0)")
    if args.json_object:
        text, finish, tokens = generate(args, "Describe a person as JSON.", ["--json"])
        first = "'{'" if text.startswith("{") else repr(text[:1])
        print(f"json_object: {finish}, {tokens} tokens, first byte {first}: {json.dumps(text[:60])}")
        if not text.startswith("{"):
            bad.append("json_object")
    if bad:
        print("invalid: " + ", ".join(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
