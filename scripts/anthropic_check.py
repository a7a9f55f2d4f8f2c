"""Checks colo-server's Anthropic Messages API with the official anthropic client.

Run by scripts/anthropic-check.sh, which starts the server; by hand:

    python scripts/anthropic_check.py --url http://127.0.0.1:8080 --model smollm2 --api-key KEY [--smollm2]

Prints one line per check and exits 0 only when every check passes.
"""
import argparse
import sys
import time

import anthropic

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
        expect(n.input_tokens == whole["usage"].input_tokens, f"{n.input_tokens} != {whole['usage'].input_tokens}")
        return f"{n.input_tokens} tokens"

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
        expect(m.usage.input_tokens == whole["usage"].input_tokens, "blocks render as the plain text does")

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

    check("messages.create", create)
    check("messages.stream", stream)
    check("messages.count_tokens", count)
    check("stop_sequences", stop_sequences)
    check("text blocks", blocks)
    check("errors", errors)
    if failures:
        print(f"{len(failures)} check(s) failed: {', '.join(failures)}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
