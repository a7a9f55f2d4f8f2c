"""Checks colo-server's OpenAI-compatible endpoints with the official openai client.

Run by scripts/openai-check.sh, which starts the server; by hand:

    python scripts/openai_check.py --url http://127.0.0.1:8080 --model smollm2 [--embed-model minilm]
        [--api-key KEY] [--expect-text Paris]

Prints one line per check and exits 0 only when every check passes.
"""
import argparse
import math
import sys
import time

import openai
from openai import OpenAI

failures = []


def check(name, fn):
    t0 = time.monotonic()
    try:
        detail = fn()
    except Exception as e:  # every failure is reported, the run goes on
        failures.append(name)
        print(f"FAIL {name}: {type(e).__name__}: {e}")
        return
    print(f"ok   {name} ({(time.monotonic() - t0) * 1e3:.0f} ms){': ' + detail if detail else ''}")


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:8080")
    ap.add_argument("--model", required=True, help="a generative model served there")
    ap.add_argument("--embed-model", help="an encoder (bert) model served there, for /v1/embeddings")
    ap.add_argument("--api-key", default="none", help="sent as Authorization: Bearer KEY")
    ap.add_argument("--expect-text", help="a word the chat answer about France's capital must contain")
    args = ap.parse_args()

    client = OpenAI(base_url=args.url.rstrip("/") + "/v1", api_key=args.api_key, max_retries=0, timeout=120)
    print(f"openai {openai.__version__} against {args.url}")
    question = [{"role": "user", "content": "What is the capital of France?"}]

    def models():
        ids = [m.id for m in client.models.list()]
        expect(args.model in ids, f"{args.model} not in {ids}")
        if args.embed_model:
            expect(args.embed_model in ids, f"{args.embed_model} not in {ids}")
        m = client.models.retrieve(args.model)
        expect(m.id == args.model and m.object == "model", f"retrieve gave {m}")
        return ", ".join(ids)

    def chat():
        r = client.chat.completions.create(model=args.model, messages=question, max_tokens=16, temperature=0)
        c = r.choices[0]
        expect(r.object == "chat.completion" and r.id.startswith("chatcmpl-"), f"object {r.object} id {r.id}")
        expect(c.message.role == "assistant" and isinstance(c.message.content, str), f"message {c.message}")
        expect(c.finish_reason in ("stop", "length"), f"finish_reason {c.finish_reason}")
        expect(r.usage.completion_tokens >= 1 and r.usage.prompt_tokens >= 1, f"usage {r.usage}")
        expect(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, f"usage {r.usage}")
        if args.expect_text:
            expect(args.expect_text in c.message.content, f"{args.expect_text!r} not in {c.message.content!r}")
        return repr(c.message.content)

    def chat_stream():
        stream = client.chat.completions.create(model=args.model, messages=question, max_tokens=16, temperature=0,
                                                stream=True, stream_options={"include_usage": True})
        pieces, finish, usage, n = [], None, None, 0
        for chunk in stream:  # ends when the server sends data: [DONE]
            n += 1
            expect(chunk.object == "chat.completion.chunk", f"chunk object {chunk.object}")
            if chunk.usage:
                usage = chunk.usage
            for ch in chunk.choices:
                if ch.delta.content:
                    pieces.append(ch.delta.content)
                if ch.finish_reason:
                    finish = ch.finish_reason
        expect(pieces, "no content chunks")
        expect(finish in ("stop", "length"), f"finish_reason {finish}")
        expect(usage is not None and usage.completion_tokens >= 1, f"usage {usage}")
        text = "".join(pieces)
        if args.expect_text:
            expect(args.expect_text in text, f"{args.expect_text!r} not in {text!r}")
        return f"{n} chunks, {usage.completion_tokens} tokens, {text!r}"

    def completion():
        r = client.completions.create(model=args.model, prompt="The capital of France is", max_tokens=8,
                                      temperature=0)
        c = r.choices[0]
        expect(r.object == "text_completion" and isinstance(c.text, str), f"object {r.object} text {c.text!r}")
        expect(c.finish_reason in ("stop", "length"), f"finish_reason {c.finish_reason}")
        expect(1 <= r.usage.completion_tokens <= 8, f"usage {r.usage}")
        return repr(c.text)

    def completion_stream():
        pieces = [ch.choices[0].text for ch in client.completions.create(
            model=args.model, prompt="The capital of France is", max_tokens=8, temperature=0, stream=True)]
        expect(len(pieces) >= 2, f"{len(pieces)} chunks")
        return f"{len(pieces)} chunks, {''.join(pieces)!r}"

    def unknown_model():
        try:
            client.chat.completions.create(model="no-such-model", messages=question, max_tokens=1)
        except openai.NotFoundError as e:
            expect(e.status_code == 404, f"status {e.status_code}")
            return "404 NotFoundError"
        raise AssertionError("no error for an unknown model")

    def embeddings():
        texts = ["The cat sat on the mat.", "A dog barked at the postman."]
        # The client asks for base64 unless told otherwise, then decodes it.
        r = client.embeddings.create(model=args.embed_model, input=texts)
        expect(len(r.data) == 2 and [d.index for d in r.data] == [0, 1], f"data {len(r.data)}")
        dim = len(r.data[0].embedding)
        expect(dim > 0 and len(r.data[1].embedding) == dim, "dimensions differ")
        for d in r.data:
            norm = math.sqrt(sum(x * x for x in d.embedding))
            expect(abs(norm - 1) < 1e-3, f"norm {norm}")
        f = client.embeddings.create(model=args.embed_model, input=texts, encoding_format="float")
        diff = max(abs(a - b) for a, b in zip(f.data[0].embedding, r.data[0].embedding))
        expect(diff < 1e-6, f"float and base64 differ by {diff}")
        expect(r.usage.prompt_tokens >= 2, f"usage {r.usage}")
        return f"2 x {dim}, L2 norm 1, base64 = float"

    check("models.list / models.retrieve", models)
    check("chat.completions.create", chat)
    check("chat.completions.create stream=True", chat_stream)
    check("completions.create", completion)
    check("completions.create stream=True", completion_stream)
    check("unknown model -> NotFoundError", unknown_model)
    if args.embed_model:
        check("embeddings.create", embeddings)
    print("openai-check: " + ("PASS" if not failures else f"FAIL ({', '.join(failures)})"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
