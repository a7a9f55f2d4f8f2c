#!/usr/bin/env python3
"""Adds exact (float64 numpy) greedy continuations to
tests/data/llama/smollm2_greedy.json: for each case, 40 tokens (or up to end
of text) from the prompt ids, with the top-1/top-2 margin of every step.
The forward pass is scripts/ref/llama_f64.py's, with a KV cache.

usage: greedy_f64.py MODEL.gguf REPO_ROOT"""
import json
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

model, root = sys.argv[1], sys.argv[2]
r = GGUFReader(model)
f = {k: v for k, v in r.fields.items()}
val = lambda k: f[k].contents()
L, E, H, KVH = val("llama.block_count"), val("llama.embedding_length"), val("llama.attention.head_count"), val("llama.attention.head_count_kv")
base, eps = val("llama.rope.freq_base"), val("llama.attention.layer_norm_rms_epsilon")
hd = E // H
T = {t.name: t for t in r.tensors}
def W(name):
    t = T[name]
    return dequantize(t.data, t.tensor_type).astype(np.float64).reshape([int(x) for x in reversed(t.shape)])
emb = W("token_embd.weight")
out_w = W("output.weight") if "output.weight" in T else emb
norm_out = W("output_norm.weight")
layers = []
for l in range(L):
    p = f"blk.{l}."
    layers.append({k: W(p + k + ".weight") for k in
                   ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]})
inv = base ** (-np.arange(0, hd, 2) / hd)

def rms(v, w):
    return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w

def rope(v, nh, pos):
    n = v.shape[0]
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    v = v.reshape(n, nh, hd // 2, 2)
    a, b = v[..., 0], v[..., 1]
    return np.stack([a * c - b * s, a * s + b * c], -1).reshape(n, nh * hd)

def forward(ids, cache, start):
    n = len(ids)
    pos = np.arange(start, start + n)
    x = emb[ids]
    for l, Lw in enumerate(layers):
        h = rms(x, Lw["attn_norm"])
        q = rope(h @ Lw["attn_q"].T, H, pos)
        k = rope(h @ Lw["attn_k"].T, KVH, pos)
        v = h @ Lw["attn_v"].T
        ck, cv = cache[l]
        ck = np.concatenate([ck, k]) if ck is not None else k
        cv = np.concatenate([cv, v]) if cv is not None else v
        cache[l] = (ck, cv)
        out = np.zeros((n, E))
        for hh in range(H):
            kv = hh // (H // KVH)
            sc = q[:, hh*hd:(hh+1)*hd] @ ck[:, kv*hd:(kv+1)*hd].T / np.sqrt(hd)
            mask = np.arange(ck.shape[0])[None, :] > pos[:, None]
            sc[mask] = -np.inf
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            sc /= sc.sum(-1, keepdims=True)
            out[:, hh*hd:(hh+1)*hd] = sc @ cv[:, kv*hd:(kv+1)*hd]
        x = x + out @ Lw["attn_output"].T
        h = rms(x, Lw["ffn_norm"])
        g, u = h @ Lw["ffn_gate"].T, h @ Lw["ffn_up"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ Lw["ffn_down"].T
    return out_w @ rms(x[-1], norm_out)

path = f"{root}/tests/data/llama/smollm2_greedy.json"
data = json.load(open(path))
for c in data["cases"]:
    cache = [(None, None)] * L
    ids = c["prompt_ids"]
    logits = forward(ids, cache, 0)
    cur, out, margins = len(ids), [], []
    for step in range(data["max_new_tokens"]):
        order = np.argsort(-logits)
        t = int(order[0])
        margins.append(float(logits[order[0]] - logits[order[1]]))
        out.append(t)
        if t == 2:
            break
        logits = forward([t], cache, cur)
        cur += 1
    c["greedy_f64_ids"] = out
    c["greedy_f64_margins"] = margins
json.dump(data, open(path, "w"), ensure_ascii=False, indent=1)
print("ok")
