#!/usr/bin/env python3
"""A float64 forward pass of a gemma3 GGUF in numpy (weights dequantized
with the gguf package): the exact reference for colo's Gemma 3 logits.
Scaled embeddings, q/k norms per head, rope on halves, sliding-window layers
(five of every six) with their own rope base, post-norms, GeGLU (tanh GELU).

usage: gemma3_f64.py MODEL.gguf TOKEN_ID [TOKEN_ID ...]   -> the top-20 logits of the last token
       as a module: logits(reader_state, ids) -> numpy array"""
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


class Model:
    def __init__(self, path):
        r = GGUFReader(path)
        self.f = {k: v for k, v in r.fields.items()}
        self.T = {t.name: t for t in r.tensors}
        v = lambda k: self.f["gemma3." + k].contents()
        self.L, self.E, self.H = v("block_count"), v("embedding_length"), v("attention.head_count")
        self.KVH, self.hd = v("attention.head_count_kv"), v("attention.key_length")
        self.base = v("rope.freq_base")
        self.base_swa = v("rope.freq_base_swa") if "gemma3.rope.freq_base_swa" in self.f else 10000.0
        self.eps, self.swa = v("attention.layer_norm_rms_epsilon"), v("attention.sliding_window")
        self.cache = {}

    def W(self, name):
        if name not in self.cache:
            t = self.T[name]
            self.cache[name] = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(
                [int(x) for x in reversed(t.shape)])
        return self.cache[name]

    def logits(self, ids):
        E, H, KVH, hd, eps = self.E, self.H, self.KVH, self.hd, self.eps
        n = len(ids)
        rms = lambda v, w: v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w
        emb = self.W("token_embd.weight")
        x = emb[ids] * np.sqrt(E)
        pos = np.arange(n)

        def rope(v, nh, base):
            inv = base ** (-np.arange(0, hd, 2) / hd)
            ang = pos[:, None] * inv[None, :]
            c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
            v = v.reshape(n, nh, hd)
            a, b = v[..., : hd // 2], v[..., hd // 2:]
            return np.concatenate([a * c - b * s, a * s + b * c], -1)

        for l in range(self.L):
            p = f"blk.{l}."
            local = l % 6 < 5
            h = rms(x, self.W(p + "attn_norm.weight"))
            q = rms((h @ self.W(p + "attn_q.weight").T).reshape(n, H, hd), self.W(p + "attn_q_norm.weight"))
            k = rms((h @ self.W(p + "attn_k.weight").T).reshape(n, KVH, hd), self.W(p + "attn_k_norm.weight"))
            v = (h @ self.W(p + "attn_v.weight").T).reshape(n, KVH, hd)
            base = self.base_swa if local else self.base
            q, k = rope(q, H, base), rope(k, KVH, base)
            mask = np.triu(np.ones((n, n), bool), 1)
            if local:
                mask |= np.tril(np.ones((n, n), bool), -self.swa)
            out = np.zeros((n, H, hd))
            for hh in range(H):
                kv = hh // (H // KVH)
                sc = q[:, hh] @ k[:, kv].T / np.sqrt(hd)
                sc[mask] = -np.inf
                sc = np.exp(sc - sc.max(-1, keepdims=True))
                sc /= sc.sum(-1, keepdims=True)
                out[:, hh] = sc @ v[:, kv]
            a = out.reshape(n, H * hd) @ self.W(p + "attn_output.weight").T
            x = x + rms(a, self.W(p + "post_attention_norm.weight"))
            h = rms(x, self.W(p + "ffn_norm.weight"))
            g, u = h @ self.W(p + "ffn_gate.weight").T, h @ self.W(p + "ffn_up.weight").T
            gelu = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))
            d = (gelu * u) @ self.W(p + "ffn_down.weight").T
            x = x + rms(d, self.W(p + "post_ffw_norm.weight"))
        h = rms(x[-1], self.W("output_norm.weight"))
        out_w = self.W("output.weight") if "output.weight" in self.T else emb
        return out_w @ h


if __name__ == "__main__":
    m = Model(sys.argv[1])
    lg = m.logits([int(x) for x in sys.argv[2:]])
    top = np.argsort(-lg)[:20]
    print(" ".join(f"{i}:{lg[i]:.4f}" for i in top))
