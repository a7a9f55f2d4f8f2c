"""Checks colo-server's OpenAI-compatible endpoints with the official openai client.

Every request field colo implements is exercised: logprobs / top_logprobs,
presence and frequency penalties, repetition_penalty and min_p (extra_body),
logit_bias, seed, stop strings and token ids, stream_options.include_usage,
echo, response_format json_object and json_schema, tools and tool_choice
(auto, none, required, a named function) with tool results sent back; for
each greedy request the streamed answer must equal the whole one; `n`
choices, whole and streamed (chunks by choice index), greedy and seeded;
a batch uploaded, created, polled and read back (the Files and Batch APIs).

Run by scripts/openai-check.sh, which starts the server; by hand:

    python scripts/openai_check.py --url http://127.0.0.1:8080 --model smollm2 [--embed-model minilm]
        [--api-key KEY] [--expect-text Paris]

Prints one line per check and exits 0 only when every check passes.
"""
import argparse
import json
import math
import sys

import openai
from openai import OpenAI

from client_check_lib import check, expect, failures


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
    question = [{"role": "system", "content": "Answer in one sentence."},
                {"role": "user", "content": "What is the capital of France?"}]

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
            expect(e.code == "model_not_found" and e.type == "invalid_request_error", f"code {e.code} type {e.type}")
            return "404 NotFoundError, model_not_found"
        raise AssertionError("no error for an unknown model")

    def error_objects():
        """OpenAI's error object: type, code and param, as clients branch on them."""
        got = []
        try:
            client.chat.completions.create(model=args.model, messages=question, max_tokens=4, temperature=7)
            raise AssertionError("temperature 7 was accepted")
        except openai.BadRequestError as e:
            expect(e.type == "invalid_request_error" and e.param == "temperature", f"type {e.type} param {e.param}")
            got.append("400 temperature")
        try:
            client.chat.completions.create(model=args.model, max_tokens=4,
                                           messages=[{"role": "user", "content": "word " * 20000}])
            raise AssertionError("a prompt past the context was accepted")
        except openai.BadRequestError as e:
            expect(e.code == "context_length_exceeded", f"code {e.code}")
            got.append("400 context_length_exceeded")
        bad = OpenAI(base_url=args.url.rstrip("/") + "/v1", api_key="not-the-key", max_retries=0, timeout=30)
        try:
            bad.models.list()
            raise AssertionError("a wrong key was accepted")
        except openai.AuthenticationError as e:
            expect(e.code == "invalid_api_key" and e.type == "authentication_error", f"code {e.code} type {e.type}")
            got.append("401 invalid_api_key")
        return ", ".join(got)

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

    def greedy(stream=False, **kw):
        """A greedy chat answer: (text, finish_reason, tool_calls, logprobs content), whole or streamed."""
        kw.setdefault("model", args.model)
        kw.setdefault("messages", question)
        kw.setdefault("max_tokens", 24)
        kw.setdefault("temperature", 0)
        if not stream:
            r = client.chat.completions.create(**kw)
            c = r.choices[0]
            calls = [(t.function.name, t.function.arguments) for t in (c.message.tool_calls or [])]
            lp = [(x.token, x.logprob) for x in c.logprobs.content] if c.logprobs and c.logprobs.content else []
            return c.message.content or "", c.finish_reason, calls, lp
        text, finish, calls, lp = [], None, {}, []
        for chunk in client.chat.completions.create(stream=True, **kw):
            for ch in chunk.choices:
                if ch.delta.content:
                    text.append(ch.delta.content)
                for t in ch.delta.tool_calls or []:
                    name, a = calls.get(t.index, ("", ""))
                    calls[t.index] = (name + (t.function.name or ""), a + (t.function.arguments or ""))
                if ch.logprobs and ch.logprobs.content:
                    lp += [(x.token, x.logprob) for x in ch.logprobs.content]
                if ch.finish_reason:
                    finish = ch.finish_reason
        return "".join(text), finish, [calls[i] for i in sorted(calls)], lp

    def same(**kw):
        w, s = greedy(**kw), greedy(stream=True, **kw)
        expect(w[:3] == s[:3], f"whole {w[:3]} != streamed {s[:3]}")
        return w

    def logprobs():
        text, _, _, lp = same(logprobs=True, top_logprobs=5)
        r = client.chat.completions.create(model=args.model, messages=question, max_tokens=24, temperature=0,
                                           logprobs=True, top_logprobs=5)
        plain = greedy()[0]
        expect(text == plain, "logprobs changed the answer")
        for e in r.choices[0].logprobs.content:
            tops = [t.logprob for t in e.top_logprobs]
            expect(len(tops) == 5 and tops == sorted(tops, reverse=True), f"top_logprobs {tops}")
            expect(abs(e.logprob - tops[0]) < 1e-4, "the greedy token is not the most likely")
            expect(sum(math.exp(t) for t in tops) <= 1 + 1e-4, "top probabilities sum past 1")
        _, _, _, slp = greedy(stream=True, logprobs=True, top_logprobs=5)
        expect([t for t, _ in slp] == [t for t, _ in lp], "streamed logprobs name other tokens")
        c = client.completions.create(model=args.model, prompt="The capital of France is", max_tokens=4,
                                      temperature=0, logprobs=3, echo=True)
        expect(c.choices[0].text.startswith("The capital of France is"), f"echo {c.choices[0].text!r}")
        expect(c.choices[0].logprobs and len(c.choices[0].logprobs.tokens) >= 1, "completions logprobs")
        return f"{len(lp)} tokens, top 5 sorted, echo"

    def sampling_fields():
        base = greedy(max_tokens=12)[0]
        same(max_tokens=12, presence_penalty=1.5, frequency_penalty=1.0)
        same(max_tokens=12, extra_body={"repetition_penalty": 1.3, "min_p": 0.05})
        first = client.chat.completions.create(model=args.model, messages=question, max_tokens=1, temperature=0,
                                               logprobs=True, top_logprobs=1).choices[0].logprobs.content[0]
        ids = client.post(f"/models/{args.model}/tokenize", cast_to=object,
                          body={"prompt": first.token}).get("tokens", [])
        if len(ids) == 1:
            banned = greedy(max_tokens=1, logit_bias={str(ids[0]): -100})[0]
            expect(banned != first.token, f"logit_bias -100 kept {first.token!r}")
        a = greedy(max_tokens=12, temperature=1, seed=42)[0]
        b = greedy(max_tokens=12, temperature=1, seed=42)[0]
        expect(a == b, "the same seed gave two answers")
        if len(base) > 2:
            stop = base[1:3]
            t, f, _, _ = same(max_tokens=12, stop=[stop])
            expect(f == "stop" and stop not in t, f"stop string {stop!r}: {t!r} {f}")
        if len(ids) == 1:
            t, f, _, _ = same(max_tokens=12, stop=[ids[0]])
            expect(f == "stop" and t == "", f"stop token id: {t!r} {f}")
        return "penalties, min_p, logit_bias, seed, stop strings and ids"

    def n_choices():
        kw = dict(model=args.model, messages=question, max_tokens=12)
        one = greedy(max_tokens=12)[0]
        u1 = client.chat.completions.create(temperature=0, **kw).usage
        r = client.chat.completions.create(n=3, temperature=0, **kw)
        expect([c.index for c in r.choices] == [0, 1, 2], f"indexes {[c.index for c in r.choices]}")
        expect(all(c.message.content == one for c in r.choices), "greedy choices differ from the n=1 answer")
        expect(r.usage.prompt_tokens == u1.prompt_tokens and r.usage.completion_tokens == 3 * u1.completion_tokens,
               f"usage of 3 choices {r.usage} against one {u1}")
        texts = {}
        for chunk in client.chat.completions.create(n=3, temperature=0, stream=True, **kw):
            for ch in chunk.choices:
                texts[ch.index] = texts.get(ch.index, "") + (ch.delta.content or "")
        expect(sorted(texts) == [0, 1, 2] and all(t == one for t in texts.values()),
               f"streamed choices {texts}")
        a = client.chat.completions.create(n=2, temperature=1, seed=7, **kw)
        b = client.chat.completions.create(n=2, temperature=1, seed=7, **kw)
        expect([c.message.content for c in a.choices] == [c.message.content for c in b.choices],
               "seeded n choices are not reproducible")
        s8 = client.chat.completions.create(n=1, temperature=1, seed=8, **kw).choices[0].message.content
        expect(a.choices[1].message.content == s8, "choice 1 with seed 7 is not the n=1 answer with seed 8")
        try:
            client.chat.completions.create(n=17, **kw)
            expect(False, "n=17 was accepted")
        except openai.BadRequestError:
            pass
        return "n=3 greedy whole and streamed, n=2 seeded = seed + i, n=17 refused"

    def json_formats():
        t, f, _, _ = same(max_tokens=60, response_format={"type": "json_object"},
                          messages=[{"role": "user", "content": "Describe a cat as JSON."}])
        if f == "stop":
            expect(isinstance(json.loads(t), dict), f"json_object {t!r}")
        schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                   "country": {"enum": ["France", "Italy", "Spain"]}},
                  "required": ["city", "country"], "additionalProperties": False}
        t, f, _, _ = same(max_tokens=300, response_format={"type": "json_schema", "json_schema": {
            "name": "place", "schema": schema, "strict": True}})
        expect(f == "stop", f"json_schema finish {f}")
        d = json.loads(t)
        expect(set(d) == {"city", "country"} and d["country"] in schema["properties"]["country"]["enum"], f"{d}")
        return repr(t)

    weather = [{"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                        "unit": {"enum": ["celsius", "fahrenheit"]}},
                       "required": ["city", "unit"], "additionalProperties": False}}},
        {"type": "function", "function": {"name": "add", "description": "Adds two integers", "parameters": {
            "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"], "additionalProperties": False}}}]
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]

    def tools():
        got = []
        for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
            t, f, calls, _ = same(max_tokens=300, messages=ask, tools=weather, tool_choice=choice)
            expect(f == "tool_calls" and len(calls) == 1, f"{choice}: {f} {calls}")
            name, arguments = calls[0]
            a = json.loads(arguments)
            if name == "get_weather":
                expect(set(a) == {"city", "unit"} and a["unit"] in ("celsius", "fahrenheit"), f"arguments {a}")
            else:
                expect(name == "add" and isinstance(a["a"], int) and isinstance(a["b"], int), f"{name} {a}")
            got.append(f"{name}({arguments})")
        r = client.chat.completions.create(model=args.model, messages=ask, max_tokens=300, temperature=0,
                                           tools=weather, tool_choice={"type": "function",
                                                                       "function": {"name": "get_weather"}})
        call = r.choices[0].message.tool_calls[0]
        expect(call.id.startswith("call_") and call.type == "function", f"call {call}")
        t, f, calls, _ = same(max_tokens=16, messages=ask, tools=weather, tool_choice="none")
        expect(not calls and f in ("stop", "length"), f"tool_choice none: {f} {calls}")
        t, f, calls, _ = same(max_tokens=80, messages=ask, tools=weather, tool_choice="auto")
        expect((f == "tool_calls") == bool(calls), f"auto: {f} {calls}")
        back = ask + [{"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": "get_weather",
                                                             "arguments": call.function.arguments}}]},
                      {"role": "tool", "tool_call_id": call.id, "content": "18 degrees and sunny"}]
        t, f, _, _ = same(max_tokens=24, messages=back, tools=weather)
        expect(f in ("stop", "length", "tool_calls"), f"after the result: {f}")
        return "; ".join(got) + f"; then {t[:40]!r}"

    def responses():
        """The Responses API: whole, streamed and through the stream helper, the same greedy text."""
        kw = dict(model=args.model, input="What is the capital of France?", instructions="Answer in one sentence.",
                  max_output_tokens=24, temperature=0)
        r = client.responses.create(**kw)
        expect(r.object == "response" and r.status in ("completed", "incomplete"), f"status {r.status}")
        text = r.output_text
        expect(text and r.usage.input_tokens > 0 and 0 < r.usage.output_tokens <= 24, f"{text!r} {r.usage}")
        expect(r.usage.input_tokens_details.cached_tokens >= 0, f"usage {r.usage}")
        pieces, done, kinds = [], None, []
        for ev in client.responses.create(stream=True, **kw):
            kinds.append(ev.type)
            if ev.type == "response.output_text.delta":
                pieces.append(ev.delta)
            elif ev.type in ("response.completed", "response.incomplete"):
                done = ev.response
        expect(kinds[:2] == ["response.created", "response.in_progress"], f"events {kinds[:4]}")
        expect("".join(pieces) == text, f"streamed {''.join(pieces)!r} != whole {text!r}")
        expect(done is not None and done.output_text == text, "the last event's response differs")
        if r.status == "completed":  # (the SDK's helper wants response.completed; a cut answer ends incomplete)
            with client.responses.stream(**kw) as s:
                for _ in s:
                    pass
                final = s.get_final_response()
            expect(final.output_text == text, f"stream helper {final.output_text!r}")
        schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                  "required": ["city"], "additionalProperties": False}
        j = client.responses.create(model=args.model, input="Name the capital of France as JSON.", temperature=0,
                                    max_output_tokens=60, text={"format": {"type": "json_schema", "name": "city",
                                                                           "schema": schema, "strict": True}})
        if j.status == "completed":
            expect(set(json.loads(j.output_text)) == {"city"}, f"json_schema {j.output_text!r}")
        try:
            client.responses.create(model=args.model, input="x", previous_response_id="resp_1")
            raise AssertionError("an unknown previous_response_id was accepted")
        except openai.NotFoundError as e:
            expect(e.param == "previous_response_id", f"param {e.param}")
        # kept (OpenAI's default), read back, continued, listed, deleted
        got = client.responses.retrieve(r.id)
        expect(got.id == r.id and got.output_text == text, f"retrieve {got.output_text!r}")
        follow = client.responses.create(model=args.model, input="And of Italy?", previous_response_id=r.id,
                                         max_output_tokens=16, temperature=0)
        expect(follow.previous_response_id == r.id, f"previous {follow.previous_response_id}")
        expect(follow.usage.input_tokens > r.usage.input_tokens, f"usage {follow.usage} after {r.usage}")
        items = list(client.responses.input_items.list(follow.id))
        expect(len(items) == 1 and items[0].role == "user", f"input items {items}")
        client.responses.delete(follow.id)
        try:
            client.responses.retrieve(follow.id)
            raise AssertionError("a deleted response was found")
        except openai.NotFoundError:
            pass
        tools = [{"type": "function", "name": "get_weather", "description": "The weather in a city.",
                  "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                                 "required": ["city"], "additionalProperties": False}, "strict": True}]
        ask = [{"role": "user", "content": "What is the weather in Paris?"}]
        c = client.responses.create(model=args.model, input=ask, tools=tools, temperature=0, max_output_tokens=300,
                                    tool_choice={"type": "function", "name": "get_weather"})
        calls = [o for o in c.output if o.type == "function_call"]
        expect(len(calls) == 1 and calls[0].name == "get_weather", f"output {c.output}")
        expect(set(json.loads(calls[0].arguments)) == {"city"}, f"arguments {calls[0].arguments}")
        back = ask + [{"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
                       "arguments": calls[0].arguments},
                      {"type": "function_call_output", "call_id": calls[0].call_id, "output": "18 degrees and sunny"}]
        after = client.responses.create(model=args.model, input=back, tools=tools, temperature=0, max_output_tokens=16)
        expect(after.status in ("completed", "incomplete"), f"after the result: {after.status}")
        return f"{text!r}, {len(pieces)} deltas, a call {calls[0].arguments}, then {after.output_text[:30]!r}"

    def batches():
        """The Files and Batch APIs: upload, create, poll, read the output (greedy: what the endpoint answers)."""
        import io
        import time
        n = 3
        lines = [json.dumps({"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
                             "body": {"model": args.model, "messages": question, "max_tokens": 8, "temperature": 0}})
                 for i in range(n)]
        f = client.files.create(file=("batch.jsonl", io.BytesIO("\n".join(lines).encode())), purpose="batch")
        expect(f.id.startswith("file-") and f.purpose == "batch" and f.bytes > 0, f"file {f}")
        b = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h",
                                  metadata={"check": "openai"})
        expect(b.id.startswith("batch_") and b.status == "validating", f"created {b}")
        deadline = time.time() + 300
        while b.status not in ("completed", "failed", "expired", "cancelled") and time.time() < deadline:
            time.sleep(0.2)
            b = client.batches.retrieve(b.id)
        expect(b.status == "completed", f"status {b.status}, errors {b.errors}")
        expect(b.request_counts.total == n and b.request_counts.completed == n, f"counts {b.request_counts}")
        expect(b.metadata == {"check": "openai"} and b.completed_at >= b.created_at, f"batch {b}")
        got = [json.loads(x) for x in client.files.content(b.output_file_id).text.splitlines()]
        expect(sorted(g["custom_id"] for g in got) == [f"q{i}" for i in range(n)], f"custom ids {got}")
        expect(all(g["response"]["status_code"] == 200 and g["error"] is None for g in got), f"output {got}")
        direct = client.chat.completions.create(model=args.model, messages=question, max_tokens=8, temperature=0)
        texts = {g["response"]["body"]["choices"][0]["message"]["content"] for g in got}
        expect(texts == {direct.choices[0].message.content}, f"batch {texts} != direct {direct.choices[0].message}")
        expect(b.id in [x.id for x in client.batches.list(limit=10)], "not listed")
        client.files.delete(f.id)
        return f"{n} lines in {b.completed_at - b.created_at} s, {texts.pop()!r}"

    check("models.list / models.retrieve", models)
    check("responses.create / stream", responses)
    check("chat.completions.create", chat)
    check("chat.completions.create stream=True", chat_stream)
    check("completions.create", completion)
    check("completions.create stream=True", completion_stream)
    check("unknown model -> NotFoundError", unknown_model)
    check("error objects: type, code, param", error_objects)
    check("logprobs, top_logprobs, echo", logprobs)
    check("penalties, min_p, logit_bias, seed, stop", sampling_fields)
    check("n choices", n_choices)
    check("response_format json_object / json_schema", json_formats)
    check("tools, tool_choice, tool results", tools)
    check("files.create, batches.create / retrieve, files.content", batches)
    if args.embed_model:
        check("embeddings.create", embeddings)
    print("openai-check: " + ("PASS" if not failures else f"FAIL ({', '.join(failures)})"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
