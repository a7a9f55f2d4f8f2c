#!/usr/bin/env python3
"""Reference data for colo's LoRA adapter tests (tests/models/test_lora.c),
made with llama.cpp on synthetic GGUF files that colo-mkmodel writes (the base
model and the adapter, both seeded, so the test writes the same files again).

For each case (architecture x base weight type x adapter rank): colo-mkmodel
writes the base and a LoRA adapter of it (every product of every layer, F32,
alpha = rank / 2); llama.cpp (llama-cpp-python built from its PyPI sdist,
lora_path, lora_scale 1, F16 KV cache, one sequence) evaluates the families'
fixed prompt of token ids, then runs 16 greedy steps. The JSON keeps the
base's colo-mkmodel flags, the adapter's, the prompt, and per step the greedy
token, its top-1/top-2 logit margin and every logit (4 decimals), as
tests/data/families does.

A real base: with --real MODEL.gguf, the base is that file (SmolLM2-135M-
Instruct Q4_1 from the model cache), the adapter is written for its shape
(SMOLLM2 below, rank 16), the prompt is llama.cpp's tokens of a sentence, and
the JSON (OUT_DIR/smollm2_lora_r16.json) names the file under "model" and
keeps each step's 256 largest logits (top_ids, top_logits) in place of all
49,152.

usage: make_lora_ref.py COLO_MKMODEL OUT_DIR [ARCH:TYPE:RANK[:f16] ...]
       make_lora_ref.py COLO_MKMODEL OUT_DIR --real MODEL.gguf"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from llama_cpp import Llama

from family_shapes import ARCH_FLAGS, PROMPT, SHAPE, STEPS

SMOLLM2 = ["--arch", "llama", "--type", "q4_1", "--layers", "30", "--dim", "576", "--heads", "9", "--kv-heads", "3",
           "--ffn", "1536", "--vocab", "49152", "--ctx", "8192", "--seed", "1"]


def greedy(llm, prompt, top=0):
    llm.reset()
    llm.eval(prompt)
    steps = []
    for _ in range(STEPS):
        lg = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),)).astype(np.float64)
        order = np.argsort(-lg)
        tok = int(order[0])
        step = {"token": tok, "margin": round(float(lg[order[0]] - lg[order[1]]), 4)}
        if top:
            step["top_ids"] = [int(i) for i in order[:top]]
            step["top_logits"] = [round(float(lg[i]), 4) for i in order[:top]]
        else:
            step["logits"] = [round(float(x), 4) for x in lg]
        steps.append(step)
        llm.eval([tok])
    return steps


mkmodel, out = sys.argv[1], sys.argv[2]
if len(sys.argv) == 5 and sys.argv[3] == "--real":
    lora = ["--lora-rank", "16", "--lora-seed", "11"]
    with tempfile.TemporaryDirectory() as tmp:
        apath = f"{tmp}/smollm2-r16.gguf"
        subprocess.run([mkmodel, "--out", apath] + SMOLLM2 + lora, check=True)
        llm = Llama(model_path=sys.argv[4], lora_path=apath, lora_scale=1.0, n_ctx=256, n_batch=256, n_threads=2,
                    logits_all=True, verbose=False, seed=0)
        prompt = llm.tokenize(b"The capital of France is", add_bos=False)
        steps = greedy(llm, prompt, top=256)
    with open(f"{out}/smollm2_lora_r16.json", "w") as f:
        json.dump({"model": os.path.basename(sys.argv[4]), "mkmodel": SMOLLM2, "lora": lora, "prompt": prompt,
                   "steps": steps}, f, separators=(",", ":"))
    print("smollm2", [s["token"] for s in steps])
    sys.exit(0)
cases = sys.argv[3:] or ([f"{a}:f32:{r}" for a in ARCH_FLAGS for r in (8, 64)] + ["llama:q8_0:8", "qwen2:q4_k_m:16"] +
                         ["llama:f32:8:f16", "phi3:f32:8:f16"])
os.makedirs(out, exist_ok=True)
with tempfile.TemporaryDirectory() as tmp:
    for case in cases:
        arch, typ, rank, *atype = case.split(":")
        flags = ["--arch", arch, "--type", typ] + SHAPE + ARCH_FLAGS[arch]
        lora = ["--lora-rank", rank, "--lora-seed", "3"] + (["--lora-type", atype[0]] if atype else [])
        suffix = f"_{atype[0]}" if atype else ""
        path, apath = f"{tmp}/{arch}-{typ}.gguf", f"{tmp}/{arch}-{typ}-r{rank}{suffix}.gguf"
        subprocess.run([mkmodel, "--out", path] + flags, check=True)
        subprocess.run([mkmodel, "--out", apath] + flags + lora, check=True)
        llm = Llama(model_path=path, lora_path=apath, lora_scale=1.0, n_ctx=256, n_batch=256, n_threads=2,
                    logits_all=True, verbose=False, seed=0)
        steps = greedy(llm, PROMPT)
        with open(f"{out}/{arch}_{typ}_r{rank}{suffix}.json", "w") as f:
            json.dump({"mkmodel": flags, "lora": lora, "prompt": PROMPT, "steps": steps}, f, separators=(",", ":"))
        print(case, [s["token"] for s in steps])
