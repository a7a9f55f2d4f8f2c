#!/usr/bin/env python3
"""Adds the exact (float64, numpy) first-step top-5 logits to
tests/data/llama/smollm2_greedy.json, using scripts/ref/llama_f64.py.

usage: add_f64_logits.py MODEL.gguf REPO_ROOT"""
import json
import subprocess
import sys

model, root = sys.argv[1], sys.argv[2]
path = f"{root}/tests/data/llama/smollm2_greedy.json"
data = json.load(open(path))
for c in data["cases"]:
    out = subprocess.run([sys.executable, f"{root}/scripts/ref/llama_f64.py", model] + [str(i) for i in c["prompt_ids"]],
                         capture_output=True, text=True, check=True).stdout.split()
    c["top5_f64_ids"] = [int(x.split(":")[0]) for x in out]
    c["top5_f64_logits"] = [float(x.split(":")[1]) for x in out]
json.dump(data, open(path, "w"), ensure_ascii=False, indent=1)
print("ok")
