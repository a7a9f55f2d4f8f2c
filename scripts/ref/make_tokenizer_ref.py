#!/usr/bin/env python3
"""Reference token ids for colo's tokenizers (models/tokenizer/tokenizer.h), made by
llama.cpp on its own vocabulary-only GGUF files.

    python3 scripts/ref/make_tokenizer_ref.py VOCAB_DIR OUT_DIR [--extra FILE.gguf ...]

VOCAB_DIR holds llama.cpp's ggml-vocab-*.gguf files (scripts/fetch-models.sh
puts them in the model cache, under llama-vocab/). Each vocabulary gets
OUT_DIR/<name>.json: the texts below, tokenized by llama.cpp through
llama-cpp-python (Llama(vocab_only=True).tokenize) with and without the
special tokens (BOS/EOS and control tokens written in the text), and the
ids it gives. --extra adds other GGUF files the same way (a model's own
vocabulary, e.g. Gemma 3's). llama-cpp-python must find its libllama
(LLAMA_CPP_LIB_PATH); the version used is written into each file.
"""
import argparse
import json
import os
import sys

import llama_cpp

VOCABS = ["llama-bpe", "llama-spm", "phi-3", "qwen2", "gpt-2", "starcoder", "refact", "mpt"]

TEXTS = [
    "",
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\n\n",
    "\n\n\n",
    "\t\n",
    "Hello world",
    " Hello world",
    "Hello World!",
    "   Hello\n    Hello",
    "hello   world  ",
    "Numbers: 3 33 333 3333 33333 1234567890 3.14159 -42 1,000,000 0x1F",
    "Line one\nLine two\r\nLine three\n\n\nEnd",
    "Tabs\tand\t\tmore\ttabs\t",
    "Punctuation!? ... --- ((nested)) [brackets] {braces} <angle> @#$%^&*",
    "Contractions: don't, I'm, we've, they're, she'll, it'd, DON'T, I'M, o'clock",
    "Café naïve résumé über Straße Ærø",
    "你好，世界！日本語のテキスト。한국어 텍스트",
    "مرحبا بالعالم",
    "Привет, мир! нещо на Български",
    "कृपया हिंदी में लिखें ภาษาไทย",
    "Emoji: 😀🚀 ❤️ 👨\u200d👩\u200d👧 🦙.cpp ✅",
    "def f(x):\n    return x ** 2  # square\n\nclass A:\n\tpass\n",
    "for (int i = 0; i < n; i++) { sum += a[i]; }",
    "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
    "URL https://example.com/path?a=1&b=2#frag",
    "mixed\u00a0no-break\u2003em\u3000ideographic spaces",
    "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～",
    "w048 7tuijk dsdfhu",
    "' era",
    "\n =",
    "                              many spaces",
    "trailing spaces     ",
]

# Special tokens each family writes in its chat prompts: cases with them
# test the parse_special path.
SPECIAL_TEXTS = [
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    "<|user|>\nHi there<|end|>\n<|assistant|>\n",
    "<s>[INST] Hi there [/INST] Hello</s>[INST] more",
    "<s> <s>text</s> <unk>",
    "Text with <|endoftext|> inside",
]


def tokenize(llm, text, special):
    return llm.tokenize(text.encode("utf-8"), add_bos=special, special=special)


def one(path, out_path):
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    cases = []
    for text in TEXTS + SPECIAL_TEXTS:
        for special in (False, True):
            cases.append({"text": text, "special": special, "ids": tokenize(llm, text, special)})
    doc = {
        "vocab": os.path.basename(path),
        "made_by": "llama.cpp through llama-cpp-python %s (Llama(vocab_only=True).tokenize(text, "
                   "add_bos=special, special=special))" % llama_cpp.__version__,
        "cases": cases,
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print("%s: %d cases" % (out_path, len(cases)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("vocab_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--extra", nargs="*", default=[])
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    for v in VOCABS:
        p = os.path.join(a.vocab_dir, "ggml-vocab-%s.gguf" % v)
        if not os.path.exists(p):
            sys.exit("%s is missing" % p)
        one(p, os.path.join(a.out_dir, "%s.json" % v))
    for p in a.extra:
        name = os.path.basename(p).rsplit(".gguf", 1)[0]
        one(p, os.path.join(a.out_dir, "%s.json" % name))


if __name__ == "__main__":
    main()
