#!/usr/bin/env python3
"""Reference data for colo's Gemma 3 270M test (tests/models/test_gemma3.c),
made with llama.cpp (llama-cpp-python built from its PyPI sdist) on the same
GGUF file (gemma-3-270m-q4_k_m.gguf, scripts/fetch-models.sh):

  tests/data/llama/gemma3_greedy.json: per prompt the prompt's token ids
  (BOS first, as the file asks), the greedy continuation (32 tokens or up to
  an end-of-generation token), the top-1/top-2 margin at every step, and the
  top-20 token ids and logits of the first 4 steps.

usage: make_gemma3_ref.py MODEL.gguf REPO_ROOT"""
import json
import sys

import numpy as np
from llama_cpp import Llama

model, root = sys.argv[1], sys.argv[2]
llm = Llama(model_path=model, n_ctx=2048, n_batch=2048, n_ubatch=2048, n_threads=2, logits_all=True, verbose=False, seed=0)


def turn(user):
    return f"<start_of_turn>user\n{user}<end_of_turn>\n<start_of_turn>model\n"


prompts = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "The three primary colors are",
    "1, 2, 3, 4, 5,",
    "The history of the Roman Empire begins",
    "Water boils at 100 degrees Celsius because",
    "In computer science, a hash table is",
    turn("What is the capital of France?"),
    turn("Write a haiku about the sea."),
    # past the 512-token sliding window of the local layers
    "Here is a long list of numbers: " + ", ".join(str(i) for i in range(1, 260)) + ". The next number is",
]
N = 32
eog = {llm.token_eos(), 106, 1}  # <eos>, <end_of_turn>
cases = []
for p in prompts:
    ids = llm.tokenize(p.encode("utf-8"), add_bos=True, special=True)
    llm.reset()
    llm._ctx.kv_cache_clear()  # the sliding-window cache cannot rewind
    llm.eval(ids)
    out, margins, tops = [], [], []
    cur = list(ids)
    for step in range(N):
        logits = np.array(llm.scores[len(cur) - 1], dtype=np.float64)
        order = np.argsort(-logits)
        if step < 4:
            tops.append({"ids": [int(i) for i in order[:20]], "logits": [round(float(logits[i]), 4) for i in order[:20]]})
        t = int(order[0])
        margins.append(round(float(logits[order[0]] - logits[order[1]]), 4))
        out.append(t)
        if t in eog:
            break
        cur.append(t)
        llm.eval([t])
    cases.append({"prompt": p, "prompt_ids": ids, "greedy_ids": out, "top1_margins": margins, "top20": tops})
    print(len(ids), out[:12])
with open(f"{root}/tests/data/llama/gemma3_greedy.json", "w") as f:
    json.dump({"model": "gemma-3-270m-q4_k_m.gguf", "max_new_tokens": N, "cases": cases}, f, ensure_ascii=False)
