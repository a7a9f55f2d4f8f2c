#!/usr/bin/env python3
"""Expected chat prompts for colo's chat templates (models/sample/chat.h), rendered
from real templates by jinja2, as Hugging Face transformers renders them
(apply_chat_template: a sandboxed environment with trim_blocks and
lstrip_blocks, raise_exception, add_generation_prompt=True).

    python3 scripts/ref/make_chat_ref.py TEMPLATE_DIR SMOLLM2.gguf OUT.json

TEMPLATE_DIR holds the .jinja files scripts/fetch-models.sh puts in the
model cache (llama-vocab/templates, from the llama-cpp-python sdist);
SMOLLM2.gguf gives its tokenizer.chat_template. For each template and each
conversation below OUT.json gets the prompt, or "error" when the template
refuses the conversation (Gemma 2 has no system role).
"""
import json
import os
import struct
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

# template file -> (the family colo should recognise, bos_token, eos_token)
TEMPLATES = {
    "Qwen-Qwen2.5-7B-Instruct.jinja": ("chatml", "", "<|im_end|>"),
    "meta-llama-Llama-3.1-8B-Instruct.jinja": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "google-gemma-2-2b-it.jinja": ("gemma", "<bos>", "<eos>"),
    "microsoft-Phi-3.5-mini-instruct.jinja": ("phi3", "<s>", "<|endoftext|>"),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": ("mistral-v3-tekken", "<s>", "</s>"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja": ("deepseek-r1", "<｜begin▁of▁sentence｜>",
                                                       "<｜end▁of▁sentence｜>"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": ("deepseek-r1", "<｜begin▁of▁sentence｜>",
                                                       "<｜end▁of▁sentence｜>"),
}

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a joke.\n"}],
    [{"role": "system", "content": "  Answer in French.\n"}, {"role": "user", "content": "  padded question  "},
     {"role": "assistant", "content": " Réponse avec des espaces. "}, {"role": "user", "content": "Et 🦙 ?"}],
    [{"role": "user", "content": "Think first."},
     {"role": "assistant", "content": "<think>\nreasoning\n</think>\n\nThe answer."},
     {"role": "user", "content": "Again"}],
]


def gguf_chat_template(path):
    """tokenizer.chat_template of a GGUF file (a minimal GGUF reader)."""
    with open(path, "rb") as f:
        def rd(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]

        def s():
            return f.read(rd("Q")).decode("utf-8")

        sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

        def val(t):
            if t == 8:
                return s()
            if t == 9:
                et, n = rd("I"), rd("Q")
                if et in sizes:
                    f.seek(n * struct.calcsize("<" + sizes[et]), 1)
                    return None
                return [val(et) for _ in range(n)]
            return rd(sizes[t])

        assert f.read(4) == b"GGUF"
        rd("I"), rd("Q")
        for _ in range(rd("Q")):
            k, t = s(), rd("I")
            v = val(t)
            if k == "tokenizer.chat_template":
                return v
    return None


def render(text, bos, eos, messages):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(text).render(messages=messages, bos_token=bos, eos_token=eos,
                                            add_generation_prompt=True)
    except jinja2.exceptions.TemplateError:
        return None


def main():
    tdir, smollm2, out = sys.argv[1:4]
    entries = []
    sources = [(name, open(os.path.join(tdir, name), encoding="utf-8").read()) + TEMPLATES[name]
               for name in sorted(TEMPLATES)]
    sources.append(("SmolLM2-135M-Instruct.Q4_1.gguf", gguf_chat_template(smollm2), "chatml", "<|im_start|>",
                    "<|im_end|>"))
    for name, text, family, bos, eos in sources:
        cases = []
        for conv in CONVERSATIONS:
            p = render(text, bos, eos, conv)
            cases.append({"messages": conv, "prompt": p if p is not None else "error"})
        entries.append({"template": name, "family": family, "bos": bos, "eos": eos, "cases": cases})
    doc = {"made_by": "jinja2 %s, scripts/ref/make_chat_ref.py" % jinja2.__version__, "templates": entries}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("%s: %d templates x %d conversations" % (out, len(entries), len(CONVERSATIONS)))


if __name__ == "__main__":
    main()
