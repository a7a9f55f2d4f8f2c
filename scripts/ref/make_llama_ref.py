#!/usr/bin/env python3
"""Reference data for colo's SmolLM2 tests, made with llama.cpp (through
llama-cpp-python built from its PyPI sdist) on the same GGUF file:

  tests/data/bpe/smollm2_tokens.json    token ids of varied strings
  tests/data/llama/smollm2_greedy.json  greedy continuations (ids) of prompts
                                        given as token ids, and the first
                                        step's top-5 logits

usage: make_llama_ref.py MODEL.gguf REPO_ROOT"""
import json
import sys

import numpy as np
from llama_cpp import Llama

model, root = sys.argv[1], sys.argv[2]
llm = Llama(model_path=model, n_ctx=2048, n_threads=2, logits_all=True, verbose=False, seed=0)

strings = [
    "Hello world",
    "hello   world  ",
    " leading space",
    "Numbers: 12345 and 3.14159, 1,000,000",
    "Line one\nLine two\r\nLine three\n\n\nEnd",
    "Tabs\tand\t\tmore\ttabs",
    "Punctuation!? ... --- ((nested)) [brackets] {braces} <angle>",
    "Contractions: don't, I'm, we've, they're, she'll, it'd, o'clock",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440",
    "Emoji: \U0001F600\U0001F680 \u2764\ufe0f \U0001F468\u200d\U0001F469\u200d\U0001F467",
    "def f(x):\n    return x ** 2  # square\n",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "Text with <|endoftext|> inside",
    "URL https://example.com/path?a=1&b=2#frag",
    "    indented    block",
    "MiXeD CaSe WoRdS",
    "a",
    "",
    "\n",
    "x = [1, 2, 3]; y = {'k': 'v'}",
    "The year 2024 had 366 days.",
    "tr\u00e8s \u00e9l\u00e9gant \u2014 \u201cquoted\u201d \u2018single\u2019",
]
toks = []
for s in strings:
    ids = llm.tokenize(s.encode("utf-8"), add_bos=False, special=True)
    toks.append({"text": s, "special": True, "ids": ids})
for s in strings[14:16]:
    ids = llm.tokenize(s.encode("utf-8"), add_bos=False, special=False)
    toks.append({"text": s, "special": False, "ids": ids})
with open(f"{root}/tests/data/bpe/smollm2_tokens.json", "w") as f:
    json.dump({"model": "SmolLM2-135M-Instruct.Q4_1.gguf", "cases": toks}, f, ensure_ascii=False, indent=1)

def chat(user):
    return f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"

prompts = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colors are",
    chat("What is the capital of France?"),
    chat("Write a haiku about the sea."),
    chat("List three uses of a paper clip."),
    chat("Explain photosynthesis in one sentence."),
    "1, 2, 3, 4, 5,",
    chat("Translate 'good morning' into Spanish."),
    "The history of the Roman Empire begins",
    "Water boils at 100 degrees Celsius because",
    "In computer science, a hash table is",
]
N = 40
cases = []
eog = {llm.token_eos(), 2}
for p in prompts:
    ids = llm.tokenize(p.encode("utf-8"), add_bos=False, special=True)
    llm.reset()
    llm.eval(ids)
    first = np.array(llm.scores[len(ids) - 1], dtype=np.float64)
    top = np.argsort(-first)[:5]
    out, margins = [], []
    cur = list(ids)
    for step in range(N):
        logits = np.array(llm.scores[len(cur) - 1], dtype=np.float64)
        order = np.argsort(-logits)
        t = int(order[0])
        margins.append(float(logits[order[0]] - logits[order[1]]))
        if t in eog:
            out.append(t)
            break
        out.append(t)
        cur.append(t)
        llm.eval([t])
    cases.append({"prompt": p, "prompt_ids": ids, "greedy_ids": out, "top1_margins": margins,
                  "top5_ids": [int(i) for i in top], "top5_logits": [float(first[i]) for i in top]})
with open(f"{root}/tests/data/llama/smollm2_greedy.json", "w") as f:
    json.dump({"model": "SmolLM2-135M-Instruct.Q4_1.gguf", "max_new_tokens": N, "cases": cases}, f,
              ensure_ascii=False, indent=1)
print("ok", len(toks), "token cases,", len(cases), "greedy cases")
