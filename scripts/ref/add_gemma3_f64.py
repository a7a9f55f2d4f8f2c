#!/usr/bin/env python3
"""Adds to tests/data/llama/gemma3_greedy.json, per prompt, the exact
first-step top-20 logits (float64, scripts/ref/gemma3_f64.py): top20_f64.

usage: add_gemma3_f64.py MODEL.gguf REPO_ROOT"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemma3_f64 import Model  # noqa: E402

model, root = sys.argv[1], sys.argv[2]
path = f"{root}/tests/data/llama/gemma3_greedy.json"
j = json.load(open(path))
m = Model(model)
for c in j["cases"]:
    lg = m.logits(c["prompt_ids"])
    top = np.argsort(-lg)[:20]
    c["top20_f64"] = {"ids": [int(i) for i in top], "logits": [round(float(lg[i]), 4) for i in top]}
    print(len(c["prompt_ids"]), c["top20_f64"]["ids"][:3], c["top20"][0]["ids"][:3])
json.dump(j, open(path, "w"), ensure_ascii=False)
