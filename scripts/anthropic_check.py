"""Checks colo-server's Anthropic Messages API with the official anthropic client.

Run by scripts/anthropic-check.sh, which starts the server; by hand:

    python scripts/anthropic_check.py --url http://127.0.0.1:8080 --model smollm2 --api-key KEY [--smollm2]

Every field colo implements is exercised: system, content blocks,
max_tokens, stop_sequences, temperature, top_p, top_k, stream (every event
type), tools with tool_choice auto / any / tool / none, tool_use and
tool_result blocks sent back, count_tokens; greedy streamed answers
(text and tool_use inputs) must equal whole ones.

Prints one line per check and exits 0 only when every check passes.
"""
import argparse
import json
import sys

import anthropic

from client_check_lib import check, expect, failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--smollm2", action="store_true", help="the model is SmolLM2: check what it answers")
    a = ap.parse_args()
    client = anthropic.Anthropic(base_url=a.url, api_key=a.api_key, max_retries=0, timeout=120)
    msgs = [{"role": "user", "content": "What is the capital of France?"}]

    whole = {}

    def create():
        m = client.messages.create(model=a.model, max_tokens=24, system="Answer in one sentence.", messages=msgs,
                                   extra_body={"temperature": 0})
        expect(m.type == "message" and m.role == "assistant", f"type/role {m.type}/{m.role}")
        expect(m.id.startswith("msg_"), f"id {m.id}")
        expect(len(m.content) == 1 and m.content[0].type == "text", f"content {m.content}")
        expect(m.stop_reason in ("end_turn", "max_tokens"), f"stop_reason {m.stop_reason}")
        expect(m.usage.input_tokens > 5 and 0 < m.usage.output_tokens <= 24, f"usage {m.usage}")
        if a.smollm2:
            expect("Paris" in m.content[0].text, f"answer {m.content[0].text!r}")
        whole["text"], whole["usage"], whole["stop"] = m.content[0].text, m.usage, m.stop_reason
        return repr(m.content[0].text[:60])

    def stream():
        events = []
        with client.messages.stream(model=a.model, max_tokens=24, system="Answer in one sentence.", messages=msgs,
                                    extra_body={"temperature": 0}) as s:
            for ev in s:
                events.append(ev.type)
            final = s.get_final_message()
        text = "".join(b.text for b in final.content if b.type == "text")
        expect(events[0] == "message_start" and "content_block_delta" in events and events[-1] == "message_stop",
               f"events {events[:3]}...{events[-3:]}")
        expect(text == whole["text"], f"streamed {text!r} != whole {whole['text']!r}")
        expect(final.usage.output_tokens == whole["usage"].output_tokens, "output tokens differ")
        expect(final.stop_reason == whole["stop"], f"stop_reason {final.stop_reason}")
        return f"{len(events)} events, same text"

    def count():
        n = client.messages.count_tokens(model=a.model, system="Answer in one sentence.", messages=msgs)
        u = whole["usage"]
        total = u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0)
        expect(n.input_tokens == total, f"{n.input_tokens} != {total} ({u})")
        return f"{n.input_tokens} tokens, {u.cache_read_input_tokens} of them read from the prefix cache"

    def stop_sequences():
        if a.smollm2:
            m = client.messages.create(model=a.model, max_tokens=40, extra_body={"temperature": 0}, stop_sequences=["5"],
                                       messages=[{"role": "user", "content": "Count from 1 to 10, separated by commas."}])
            expect(m.stop_reason == "stop_sequence" and m.stop_sequence == "5", f"{m.stop_reason} {m.stop_sequence}")
            expect("5" not in m.content[0].text, f"text {m.content[0].text!r}")
            return repr(m.content[0].text)
        # a synthetic model: stop at the first character it writes
        first = client.messages.create(model=a.model, max_tokens=4, extra_body={"temperature": 0}, messages=msgs).content[0].text
        expect(first, "empty text")
        m = client.messages.create(model=a.model, max_tokens=4, extra_body={"temperature": 0}, messages=msgs,
                                   stop_sequences=[first[:1]])
        expect(m.stop_reason == "stop_sequence" and m.stop_sequence == first[:1], f"{m.stop_reason}")
        expect(m.content[0].text == "", f"text {m.content[0].text!r}")
        return "stopped"

    def blocks():
        m = client.messages.create(model=a.model, max_tokens=4, extra_body={"temperature": 0},
                                   system=[{"type": "text", "text": "Answer in one sentence."}],
                                   messages=[{"role": "user", "content": [{"type": "text", "text": "What is the capital "},
                                                                          {"type": "text", "text": "of France?"}]}])
        def total(u):
            return u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0)
        expect(total(m.usage) == total(whole["usage"]), "blocks render as the plain text does")

    def errors():
        try:
            client.messages.create(model="no-such-model", max_tokens=4, messages=msgs)
            raise AssertionError("unknown model accepted")
        except anthropic.NotFoundError as e:
            expect(e.body["error"]["type"] == "not_found_error", f"{e.body}")
        try:
            client.messages.create(model=a.model, max_tokens=4, messages=[{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}])
            raise AssertionError("an image accepted")
        except anthropic.BadRequestError as e:
            expect("image" in e.body["error"]["message"], f"{e.body}")
        try:
            anthropic.Anthropic(base_url=a.url, api_key="wrong", max_retries=0).messages.create(
                model=a.model, max_tokens=4, messages=msgs)
            raise AssertionError("a wrong key accepted")
        except anthropic.AuthenticationError as e:
            expect(e.body["error"]["type"] == "authentication_error", f"{e.body}")
        return "404, 400, 401 in Anthropic's shape"

    def sampling():
        # (this client version takes the sampling fields through extra_body)
        m1 = client.messages.create(model=a.model, max_tokens=12, messages=msgs,
                                    extra_body={"temperature": 0.7, "top_p": 0.9, "top_k": 40})
        expect(m1.content[0].type == "text", f"content {m1.content}")
        g = client.messages.create(model=a.model, max_tokens=12, messages=msgs, extra_body={"temperature": 0, "top_k": 1})
        h = client.messages.create(model=a.model, max_tokens=12, messages=msgs, extra_body={"temperature": 1, "top_k": 1})
        expect(g.content[0].text == h.content[0].text, "top_k 1 is not greedy")
        return "temperature, top_p, top_k"

    tools = [{"name": "get_weather", "description": "The current weather in a city",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                                "unit": {"enum": ["celsius", "fahrenheit"]}},
                               "required": ["city", "unit"], "additionalProperties": False}},
             {"name": "add", "description": "Adds two integers",
              "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                               "required": ["a", "b"]}}]
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]

    def uses(m):
        return [(b.name, b.input) for b in m.content if b.type == "tool_use"]

    def tool_use():
        got = []
        for choice in ({"type": "tool", "name": "get_weather"}, {"type": "any"}):
            kw = dict(model=a.model, max_tokens=300, messages=ask, tools=tools, tool_choice=choice,
                      extra_body={"temperature": 0})
            m = client.messages.create(**kw)
            expect(m.stop_reason == "tool_use" and len(uses(m)) == 1, f"{choice}: {m.stop_reason} {m.content}")
            name, inp = uses(m)[0]
            if name == "get_weather":
                expect(set(inp) == {"city", "unit"} and inp["unit"] in ("celsius", "fahrenheit"), f"input {inp}")
            else:
                expect(name == "add" and isinstance(inp.get("a"), int) and isinstance(inp.get("b"), int), f"{inp}")
            with client.messages.stream(**kw) as st:
                events = [ev.type for ev in st]
                final = st.get_final_message()
            expect(uses(final) == uses(m), f"streamed {uses(final)} != whole {uses(m)}")
            expect(final.stop_reason == "tool_use" and "content_block_start" in events, f"events {events}")
            got.append(f"{name}({json.dumps(inp)})")
        block = next(b for b in m.content if b.type == "tool_use")
        expect(block.id.startswith("toolu_"), f"id {block.id}")
        m = client.messages.create(model=a.model, max_tokens=16, messages=ask, tools=tools,
                                   tool_choice={"type": "none"}, extra_body={"temperature": 0})
        expect(not uses(m) and m.stop_reason in ("end_turn", "max_tokens"), f"none: {m.content}")
        m = client.messages.create(model=a.model, max_tokens=300, messages=ask, tools=tools,
                                   tool_choice={"type": "auto"}, extra_body={"temperature": 0})
        expect((m.stop_reason == "tool_use") == bool(uses(m)), f"auto: {m.stop_reason} {m.content}")
        back = ask + [{"role": "assistant", "content": [{"type": "tool_use", "id": block.id, "name": block.name,
                                                         "input": block.input}]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block.id,
                                                    "content": "18 degrees and sunny"}]}]
        m = client.messages.create(model=a.model, max_tokens=24, messages=back, tools=tools,
                                   extra_body={"temperature": 0})
        n = client.messages.count_tokens(model=a.model, messages=back, tools=tools)
        total = m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) + (m.usage.cache_creation_input_tokens or 0)
        expect(n.input_tokens == total, f"count_tokens {n.input_tokens} != {total} ({m.usage})")
        return "; ".join(got) + f"; after the result: {m.stop_reason}"

    check("messages.create", create)
    check("messages.stream", stream)
    check("messages.count_tokens", count)
    check("stop_sequences", stop_sequences)
    check("text blocks", blocks)
    check("errors", errors)
    check("temperature, top_p, top_k", sampling)
    check("tools, tool_choice, tool_use / tool_result", tool_use)
    if failures:
        print(f"{len(failures)} check(s) failed: {', '.join(failures)}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
