#!/usr/bin/env python3
"""Writes the seed inputs of colo's fuzz targets: tests/fuzz/corpus/<name>/seed-*.

Small, meaningful inputs for each parser (valid requests and bodies, a tiny
GGUF and safetensors file, configurations, a BERT model folder's JSON
files, tokenizer texts). Deterministic:
running it again rewrites the same bytes. Only seed-* files are written;
regression inputs (regress-*) and anything else in the folders are left alone.

  scripts/fuzz-seeds.py [--mkmodel BUILD/colo-mkmodel]

With --mkmodel, a tiny synthetic llama GGUF (q8_0, 1 layer) is added to the
gguf seeds, so that the fuzzer starts from a file the llama reader accepts.
"""
import argparse
import json
import os
import struct
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# ---- http ----------------------------------------------------------------------------

def http_seeds():
    def req(method, target, body=b"", headers=(), version="1.1"):
        if isinstance(body, str):
            body = body.encode()
        lines = [f"{method} {target} HTTP/{version}", "Host: localhost"]
        lines += list(headers)
        if body:
            lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body

    echo = '{"prompt":"hello","max_tokens":4}'
    put("http", "get-health", req("GET", "/health/live"))
    put("http", "post-echo", req("POST", "/v1/echo?x=1#frag", echo, ["Content-Type: application/json"]))
    put("http", "model-param", req("GET", "/v1/models/smol%20lm?verbose=1", headers=["X-Request-Id: abc-123"]))
    put("http", "infer", req("POST", "/v1/models/m1/infer", '{"inputs":["a","b"]}'))
    put("http", "stream", req("POST", "/v1/models/m1/stream", "line one\nline two\n"))
    put("http", "later", req("GET", "/v1/later"))
    put("http", "pipelined",
        req("GET", "/health/live") + req("POST", "/v1/later", "{}") + req("POST", "/v1/models/x/stream", "hi")
        + req("GET", "/v1/models/x", headers=["Connection: close"]))
    chunked = (b"POST /v1/echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"5\r\n{\"a\":\r\n4;ext=1\r\n [1]\r\n1\r\n}\r\n0\r\nTrailer: x\r\n\r\n")
    put("http", "chunked", chunked + req("GET", "/health/live"))
    put("http", "expect-continue", req("PUT", "/v1/echo", '{"k":[1,2,3]}', ["Expect: 100-continue"]))
    put("http", "http10-keepalive",
        req("GET", "/health/live", version="1.0", headers=["Connection: keep-alive"])
        + req("POST", "/v1/models/a/stream", "x", version="1.0"))
    put("http", "method-not-allowed", req("DELETE", "/v1/echo"))
    put("http", "not-found", req("GET", "/v1/models/a/b/c/d"))
    put("http", "bad-percent", req("GET", "/v1/models/%zz"))
    put("http", "body-too-large", req("POST", "/v1/echo", headers=["Content-Length: 999999"]))
    put("http", "bad-json", req("POST", "/v1/echo", '{"a":1,"a":2}'))
    put("http", "upgrade", req("GET", "/health/live", headers=["Connection: Upgrade", "Upgrade: websocket"]))
    put("http", "version", b"GET / HTTP/2.0\r\n\r\n")
    put("http", "headers", req("GET", "/v1/models/h", headers=[f"X-H{i}: {'v' * i}" for i in range(24)]))
    put("http", "partial", b"POST /v1/echo HTTP/1.1\r\nContent-Length: 50\r\n\r\n{\"a\"")


# ---- api_request -----------------------------------------------------------------------

INFER, COMPLETIONS, CHAT, EMBEDDINGS = 0, 1, 2, 3
LLAMA, BERT = 0, 4
SMALL = 8


def api_seeds():
    def body(sel, obj):
        return bytes([sel]) + json.dumps(obj, ensure_ascii=False).encode()

    gen = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0.7, "top_p": 0.9, "top_k": 40,
           "seed": 42, "stop": ["\n", "."], "stream": True, "priority": "high"}
    put("api_request", "infer-prompt", body(INFER | LLAMA, gen))
    put("api_request", "infer-messages",
        body(INFER | LLAMA, {"messages": [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Hi"}], "max_tokens": 3}))
    put("api_request", "infer-bert", body(INFER | BERT, {"inputs": ["a sentence", "another one"], "priority": "low"}))
    put("api_request", "completions",
        body(COMPLETIONS | LLAMA, {"model": "smollm2", "prompt": ["x y z"], "max_tokens": 5, "stop": "\n",
                                   "stream": True, "stream_options": {"include_usage": True}, "n": 1,
                                   "user": "u", "logprobs": False, "presence_penalty": 0}))
    put("api_request", "chat",
        body(CHAT | LLAMA, {"model": "smollm2", "messages": [
            {"role": "developer", "content": "sys"},
            {"role": "user", "content": [{"type": "text", "text": "part one "}, {"type": "text", "text": "two"}],
             "name": "bob"},
            {"role": "assistant", "content": "ok"}], "temperature": 0, "seed": 7, "frequency_penalty": 0}))
    put("api_request", "embeddings",
        body(EMBEDDINGS | BERT, {"model": "minilm", "input": ["héllo wörld", "北京"], "encoding_format": "base64",
                                 "user": "u", "dimensions": None}))
    put("api_request", "embeddings-one", body(EMBEDDINGS | BERT, {"model": "minilm", "input": "one"}))
    put("api_request", "small-limits",
        body(INFER | LLAMA | SMALL, {"prompt": "x" * 80, "max_tokens": 17, "top_k": 301}))
    put("api_request", "small-inputs", body(EMBEDDINGS | BERT | SMALL, {"model": "m", "input": ["a", "b", "c"]}))
    put("api_request", "wrong-kind", body(COMPLETIONS | BERT, {"model": "m", "prompt": "p"}))
    # The Responses API (the ninth body of the target's table; 17 keeps the large limits):
    # every kind of input item, instructions, tools and a JSON schema.
    put("api_request", "responses-items",
        bytes([17]) + json.dumps({
            "model": "smollm2", "instructions": "Be brief.", "max_output_tokens": 16, "temperature": 0,
            "input": [
                {"role": "user", "content": "What is the weather in Paris?"},
                {"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Let me check."}]},
                {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{\"city\":\"Paris\"}"},
                {"type": "function_call", "call_id": "c2", "name": "time", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                {"type": "function_call_output", "call_id": "c2", "output": "noon"},
                {"type": "reasoning", "summary": []},
                {"role": "user", "content": [{"type": "input_text", "text": "And now?"}]}],
            "tools": [{"type": "function", "name": "weather", "description": "d",
                       "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                      "required": ["city"]}, "strict": True}],
            "tool_choice": "required", "parallel_tool_calls": False, "metadata": {"k": "v"},
            "truncation": "disabled", "store": False}).encode())
    put("api_request", "responses-schema",
        bytes([8]) + json.dumps({
            "model": "m", "input": "x",
            "text": {"format": {"type": "json_schema", "name": "o", "strict": True,
                                "schema": {"type": "object", "properties": {"a": {"type": "integer"}},
                                           "required": ["a"], "additionalProperties": False}}}}).encode())


# ---- gguf ----------------------------------------------------------------------------------

def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_file(kvs, tensors, align=32, version=3):
    """kvs: (key, type, encoded value); tensors: (name, ggml type, dims, data)."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, t, v in kvs:
        out += gguf_string(key) + struct.pack("<I", t) + v
    offset = 0
    offsets = []
    for name, t, dims, data in tensors:
        offsets.append(offset)
        out += gguf_string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", t, offset)
        offset += (len(data) + align - 1) // align * align
    out += b"\0" * (-len(out) % align)
    for (_, _, _, data), off in zip(tensors, offsets):
        out += data + b"\0" * (-len(data) % align)
    return out


def gguf_seeds(mkmodel):
    U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
    toks = ["a", "b", "ab", "<|endoftext|>", "Ġ", "Ġab"]
    kvs = [
        ("general.architecture", STR, gguf_string("llama")),
        ("general.name", STR, gguf_string("fuzz seed")),
        ("t.u8", U8, struct.pack("<B", 200)), ("t.i8", I8, struct.pack("<b", -5)),
        ("t.u16", U16, struct.pack("<H", 65000)), ("t.i16", I16, struct.pack("<h", -300)),
        ("t.u32", U32, struct.pack("<I", 7)), ("t.i32", I32, struct.pack("<i", -7)),
        ("t.f32", F32, struct.pack("<f", 0.5)), ("t.bool", BOOL, b"\1"),
        ("t.u64", U64, struct.pack("<Q", 1 << 40)), ("t.i64", I64, struct.pack("<q", -(1 << 40))),
        ("t.f64", F64, struct.pack("<d", 2.5)),
        ("t.nested", ARR, struct.pack("<IQ", ARR, 2) + struct.pack("<IQ", U8, 2) + b"\1\2"
         + struct.pack("<IQ", STR, 1) + gguf_string("x")),
        ("tokenizer.ggml.model", STR, gguf_string("gpt2")),
        ("tokenizer.ggml.pre", STR, gguf_string("gpt2")),
        ("tokenizer.ggml.tokens", ARR, struct.pack("<IQ", STR, len(toks)) + b"".join(gguf_string(t) for t in toks)),
        ("tokenizer.ggml.token_type", ARR, struct.pack("<IQ", I32, len(toks)) + struct.pack("<6i", 1, 1, 1, 3, 1, 1)),
        ("tokenizer.ggml.merges", ARR, struct.pack("<IQ", STR, 2) + gguf_string("a b") + gguf_string("Ġ ab")),
        ("tokenizer.ggml.eos_token_id", U32, struct.pack("<I", 3)),
        ("tokenizer.ggml.add_bos_token", BOOL, b"\0"),
    ]
    tensors = [("token_embd.weight", 0, [4, 6], struct.pack("<24f", *range(24))),  # F32
               ("output_norm.weight", 1, [4], struct.pack("<4e", 1, 1, 1, 1))]     # F16
    put("gguf", "kinds-v3", gguf_file(kvs, tensors))
    put("gguf", "aligned-v2", gguf_file(kvs[:3] + [("general.alignment", U32, struct.pack("<I", 64))],
                                        tensors, align=64, version=2))
    put("gguf", "empty", gguf_file([], []))
    if mkmodel:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.gguf")
            subprocess.run([mkmodel, "--out", path, "--layers", "1", "--dim", "32", "--heads", "2",
                            "--kv-heads", "1", "--ffn", "32", "--vocab", "272", "--ctx", "64",
                            "--type", "q8_0", "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
            with open(path, "rb") as f:
                put("gguf", "mkmodel-q8_0", f.read())


# ---- safetensors ---------------------------------------------------------------------------

def safetensors_file(tensors, metadata=None):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    put("safetensors", "kinds", safetensors_file([
        ("embeddings.word_embeddings.weight", "F32", [2, 3], struct.pack("<6f", *range(6))),
        ("embeddings.position_ids", "I64", [1, 2], struct.pack("<2q", 0, 1)),
        ("layer.0.bias", "F16", [2], struct.pack("<2e", 0.5, -1)),
        ("layer.0.weight", "BF16", [2], b"\x80\x3f\x00\x40"),
        ("scalar", "U8", [], b"\7"),
        ("empty", "F32", [0, 4], b""),
        ("flags", "BOOL", [3], b"\1\0\1"),
    ], metadata={"format": "pt"}))
    put("safetensors", "one", safetensors_file([("w", "F32", [1], struct.pack("<f", 1.0))]))
    put("safetensors", "none", safetensors_file([], metadata={}))


# ---- config ----------------------------------------------------------------------------------

def config_seeds():
    for name in ("default", "colocated"):
        with open(os.path.join(ROOT, "config", name + ".yaml"), "rb") as f:
            put("config", name + ".yaml", f.read())
    put("config", "partition.yaml", """server:
  listen: "[::1]:0"
  device: cpu
  cpu_memory_bytes: 2GiB
  max_body_bytes: 512KiB
scheduler:
  policy: partition
  quantum_us: 5000
  best_effort_cap: { max_inflight_steps: 1, max_inflight_ops: 4, max_inflight_us: 100 }
models:
  - name: a.b-c
    kind: llama
    path: models/a.gguf
    memory_fraction: 0.5
    sm_share: 0.5
    context: 512
    kv_cache: { block_size: 32, dtype: f32 }
  - name: e
    kind: bert
    path: /models/e
    memory_fraction: 0.25
    priority: low
    batching: { max_batch_size: 8, preferred_batch_size: [2, 4, 8] }
""")
    put("config", "flow.yaml", '{server: {listen: "127.0.0.1:1", threads: 2}, '
                               'models: [{name: x, kind: llama, path: x.gguf, memory_fraction: 1}]}\n')
    # the body of POST /admin/models/{name}/adapters (colo_config_parse_adapter)
    put("config", "adapter-body.yaml",
        '{"name": "support", "path": "lora/support.gguf", "scale": 0.5, "priority": "high", '
        '"sla": {"ttft_ms": 500, "tpot_ms": 50}, "on_overload": "reject"}\n')
    put("config", "anchors.yaml", """base: &b { kind: bert, memory_fraction: 0.1 }
models:
  - name: one
    <<: *b
    path: one
  - !!map { name: two, kind: llama, path: "t\\u00e9.gguf", memory_fraction: .1e1 }
""")


# ---- BERT model folder's JSON files ---------------------------------------------------------

# all-minilm-l6-v2's settings (the fields colo reads, and a few it ignores).
MINILM_CONFIG = {
    "architectures": ["BertModel"], "hidden_act": "gelu", "hidden_size": 384, "intermediate_size": 1536,
    "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert", "num_attention_heads": 12,
    "num_hidden_layers": 6, "pad_token_id": 0, "position_embedding_type": "absolute", "type_vocab_size": 2,
    "vocab_size": 30522,
}


def bert_config_seeds():
    # Parts separated by a line "====": config.json, sentence_bert_config.json,
    # tokenizer_config.json, 1_Pooling/config.json (fuzz_bert_config.c).
    def put_parts(name, *parts):
        put("bert_config", name, "\n====\n".join(p if isinstance(p, str) else json.dumps(p) for p in parts))

    def cfg(**changes):
        d = dict(MINILM_CONFIG)
        for k, v in changes.items():
            if v is None:
                d.pop(k, None)
            else:
                d[k] = v
        return d

    sb = {"max_seq_length": 256, "do_lower_case": False}
    tc = {"do_lower_case": True, "tokenize_chinese_chars": True, "strip_accents": None, "model_max_length": 512}
    pool = {"word_embedding_dimension": 384, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
            "pooling_mode_max_tokens": False}
    put_parts("minilm", cfg(), sb, tc, pool)
    put_parts("config-only", cfg())
    put_parts("no-type-vocab", cfg(type_vocab_size=None))
    put_parts("too-many-parameters", cfg(hidden_size=16777216, intermediate_size=16777216,
                                         num_hidden_layers=16777216, num_attention_heads=1))
    put_parts("heads-do-not-divide", cfg(num_attention_heads=7))
    put_parts("not-bert", cfg(model_type="llama"))
    put_parts("relative-positions", cfg(position_embedding_type="relative_key"))
    put_parts("eps-zero", cfg(layer_norm_eps=0))
    put_parts("one-position", cfg(max_position_embeddings=1))
    put_parts("seq-length-too-long", cfg(), {"max_seq_length": 513}, tc, pool)
    put_parts("cls-pooling", cfg(), sb, tc, {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True})
    put_parts("cased-no-cjk", cfg(), sb, {"do_lower_case": False, "tokenize_chinese_chars": False,
                                          "strip_accents": True}, pool)
    put_parts("duplicate-key", '{"model_type": "bert", "model_type": "bert"}')
    put_parts("not-an-object", "[1, 2, 3]")


# ---- tokenizers ------------------------------------------------------------------------------

def bpe_seeds():
    put("bpe", "text", b"\0The quick brown fox's 12345 jumps\tover  the lazy dog.\n")
    put("bpe", "unicode", "\0héllo wörld 北京 🙂 ça va? 1,000,000".encode())
    put("bpe", "specials", b"\1<|im_start|>user\nhi<|im_end|>\n<|endoftext|><|im_start|")
    put("bpe", "invalid-utf8", b"\0a\xff\xfe\xc3 \xe4\xb8 \xf0\x9f\x99 z")
    put("bpe", "ids", b"\2" + struct.pack("<8i", 0, 1, 255, 256, 300, 319, 320, -1))
    put("bpe", "chat", b"\4system\0Be brief.\0user\0Hello <|im_end|> there\0assistant\0")


def wordpiece_seeds():
    put("wordpiece", "text", b"\0Hello, world! Unaffable naive cafe.")
    put("wordpiece", "accents", "\0Héllo Wörld CAFÉ naïve İstanbul ß".encode())
    put("wordpiece", "cjk-cased", "\2北京 Hello\u3000world\u200b\u0007 tokenizer".encode())
    put("wordpiece", "specials", b"\1[CLS] hello [SEP] world [MASK][UNK] [PAD] [cls]")
    put("wordpiece", "short", b"\4aaaaaaaa unaffable the the the the the the")
    put("wordpiece", "invalid-utf8", b"\0a\xff\xfe\xc3 b\xe4\xb8\0c")
    put("wordpiece", "vocab", b"\x08[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n##s\nworld\n,\n!\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mkmodel", help="colo-mkmodel program, for a synthetic llama GGUF seed")
    args = ap.parse_args()
    http_seeds()
    api_seeds()
    gguf_seeds(args.mkmodel)
    safetensors_seeds()
    config_seeds()
    bert_config_seeds()
    bpe_seeds()
    wordpiece_seeds()


if __name__ == "__main__":
    main()
