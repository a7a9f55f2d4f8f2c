#!/usr/bin/env python3
"""Reference data for colo's model-family tests (tests/models/test_families.c),
made with llama.cpp on synthetic GGUF files that colo-mkmodel writes (seeded,
so the test writes the same files again).

For each case (architecture x weight type): colo-mkmodel writes the model;
llama.cpp (llama-cpp-python built from its PyPI sdist, F16 KV cache, one
sequence) evaluates a fixed prompt of token ids, then runs 16 greedy steps.
The JSON keeps the mkmodel flags, the prompt, and per step the greedy token,
its top-1/top-2 logit margin and every logit (4 decimals).

usage: make_family_ref.py COLO_MKMODEL OUT_DIR [ARCH:TYPE ...]"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from llama_cpp import Llama

from family_shapes import ARCH_FLAGS, PROMPT, SHAPE, STEPS

mkmodel, out = sys.argv[1], sys.argv[2]
cases = sys.argv[3:] or [f"{a}:{t}" for a in ARCH_FLAGS for t in ("f32", "q8_0", "q4_0")]
os.makedirs(out, exist_ok=True)
with tempfile.TemporaryDirectory() as tmp:
    for case in cases:
        arch, typ = case.split(":")
        flags = ["--arch", arch, "--type", typ] + SHAPE + ARCH_FLAGS[arch]
        path = f"{tmp}/{arch}-{typ}.gguf"
        subprocess.run([mkmodel, "--out", path] + flags, check=True)
        llm = Llama(model_path=path, n_ctx=256, n_batch=256, n_threads=2, logits_all=True, verbose=False, seed=0)
        llm.reset()
        llm.eval(PROMPT)
        steps = []
        for _ in range(STEPS):
            lg = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),)).astype(np.float64)
            order = np.argsort(-lg)
            tok = int(order[0])
            steps.append({"token": tok, "margin": round(float(lg[order[0]] - lg[order[1]]), 4),
                          "logits": [round(float(x), 4) for x in lg]})
            llm.eval([tok])
        with open(f"{out}/{arch}_{typ}.json", "w") as f:
            json.dump({"mkmodel": flags, "prompt": PROMPT, "steps": steps}, f, separators=(",", ":"))
        print(case, [s["token"] for s in steps])
