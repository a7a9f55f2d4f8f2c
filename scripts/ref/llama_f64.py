#!/usr/bin/env python3
"""A float64 forward pass of a llama-architecture GGUF in numpy (weights
dequantized with the gguf package): the exact reference for colo's logits.

usage: llama_f64.py MODEL.gguf TOKEN_ID [TOKEN_ID ...]   -> prints the top-5 logits of the last token"""
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

r = GGUFReader(sys.argv[1])
f = {k: v for k, v in r.fields.items()}
def val(k):
    return f[k].contents()
L, E, H, KVH = val("llama.block_count"), val("llama.embedding_length"), val("llama.attention.head_count"), val("llama.attention.head_count_kv")
base, eps = val("llama.rope.freq_base"), val("llama.attention.layer_norm_rms_epsilon")
hd = E // H
T = {t.name: t for t in r.tensors}
def W(name):
    t = T[name]
    return dequantize(t.data, t.tensor_type).astype(np.float64).reshape([int(x) for x in reversed(t.shape)])
ids = [int(x) for x in sys.argv[2:]]
n = len(ids)
emb = W("token_embd.weight")
x = emb[ids]
def rms(v, w):
    return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w
pos = np.arange(n)
inv = base ** (-np.arange(0, hd, 2) / hd)
ang = pos[:, None] * inv[None, :]
cos, sin = np.cos(ang), np.sin(ang)
def rope(v, nh):
    v = v.reshape(n, nh, hd // 2, 2)
    a, b = v[..., 0], v[..., 1]
    c, s = cos[:, None, :], sin[:, None, :]
    return np.stack([a * c - b * s, a * s + b * c], -1).reshape(n, nh * hd)
for l in range(L):
    p = f"blk.{l}."
    h = rms(x, W(p + "attn_norm.weight"))
    q = rope(h @ W(p + "attn_q.weight").T, H)
    k = rope(h @ W(p + "attn_k.weight").T, KVH)
    v = h @ W(p + "attn_v.weight").T
    out = np.zeros((n, E))
    for hh in range(H):
        kv = hh // (H // KVH)
        qs, ks, vs = q[:, hh*hd:(hh+1)*hd], k[:, kv*hd:(kv+1)*hd], v[:, kv*hd:(kv+1)*hd]
        sc = qs @ ks.T / np.sqrt(hd)
        sc[np.triu(np.ones((n, n), bool), 1)] = -np.inf
        sc = np.exp(sc - sc.max(-1, keepdims=True))
        sc /= sc.sum(-1, keepdims=True)
        out[:, hh*hd:(hh+1)*hd] = sc @ vs
    x = x + out @ W(p + "attn_output.weight").T
    h = rms(x, W(p + "ffn_norm.weight"))
    g, u = h @ W(p + "ffn_gate.weight").T, h @ W(p + "ffn_up.weight").T
    x = x + (g / (1 + np.exp(-g)) * u) @ W(p + "ffn_down.weight").T
h = rms(x[-1], W("output_norm.weight"))
out_w = W("output.weight") if "output.weight" in T else emb
logits = out_w @ h
top = np.argsort(-logits)[:5]
print(" ".join(f"{i}:{logits[i]:.4f}" for i in top))
