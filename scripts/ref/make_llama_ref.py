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

from make_bpe_ref import TEXTS

model, root = sys.argv[1], sys.argv[2]
llm = Llama(model_path=model, n_ctx=2048, n_threads=2, logits_all=True, verbose=False, seed=0)

# make_bpe_ref.py's first 25 texts (its later ones were added after this
# reference was made)
strings = TEXTS[:25]
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
