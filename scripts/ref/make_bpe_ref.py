#!/usr/bin/env python3
"""Reference token ids for colo's byte-level BPE on SmolLM2's tokenizer.

    python3 scripts/ref/make_bpe_ref.py MODEL_DIR OUT.json --tool hf|llama [--check OTHER.json]

MODEL_DIR holds SmolLM2-135M-Instruct.Q4_1.gguf (scripts/fetch-models.sh
--print-dir). The tokenizer is the one stored in the GGUF, read by
  hf:    transformers' GGUF loader (AutoTokenizer.from_pretrained(dir,
         gguf_file=...)), i.e. the Rust `tokenizers` library;
  llama: llama.cpp through llama-cpp-python (Llama(vocab_only=True)).
Both tokenize without a BOS token. Cases with "special": true parse
<|im_start|> and friends written in the text as their ids; with false they
are plain text. --check compares the ids with another reference file and
exits 1 listing every case where the two tools disagree.
"""
import argparse
import json
import os
import sys

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

TEXTS = [
    "Hello world",
    "hello   world  ",
    " leading space",
    "Numbers: 12345 and 3.14159, 1,000,000",
    "Line one\nLine two\r\nLine three\n\n\nEnd",
    "Tabs\tand\t\tmore\ttabs",
    "Punctuation!? ... --- ((nested)) [brackets] {braces} <angle>",
    "Contractions: don't, I'm, we've, they're, she'll, it'd, o'clock",
    "Café naïve résumé über Straße",
    "你好，世界！日本語のテキスト",
    "مرحبا بالعالم",
    "Привет, мир",
    "Emoji: 😀🚀 ❤️ 👨\u200d👩\u200d👧",
    "def f(x):\n    return x ** 2  # square\n",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "Text with <|endoftext|> inside",
    "URL https://example.com/path?a=1&b=2#frag",
    "    indented    block",
    "MiXeD CaSe WoRdS",
    "a",
    "",
    "\n",
    "x = [1, 2, 3]; y = {'k': 'v'}",
    "The year 2024 had 366 days.",
    "très élégant — “quoted” ‘single’",
    # added: more whitespace, numbers and scripts
    "   ",
    "end with newline\n\n",
    "a \n b\t\n\tc",
    "\r\n\r\n",
    "no\u00a0break\u3000ideographic\u2003em space",
    "Roman Ⅻ, superscript x², fractions ½ ¾, Arabic-Indic ٣٤٥",
    "UPPER'S and don'T: case of 'S 'T",
    "''quoted'' and 's alone",
    "Ελληνικά κείμενα και עברית",
    "한국어 텍스트와 ไทย ภาษา",
    "हिन्दी में लिखा",
    "snake_case_name = camelCaseName + 0x1F3",
    "$$$ %%% &&& *** +++ ||| ~~~",
    "<|im_end|><|im_start|>",
    "<|im_start|user",
    "<|endoftext|><|endoftext|>",
    # control characters and Unicode whitespace the regex classes disagree on
    "a\x0bb\x0cc\x1cd\x1fe\x85f\u2028g",
    "  \x1c  x",
    "decomposed e\u0301 and n\u0303, Hangul jamo \u1100\u1161",
    "zero\u200bwidth and soft\u00adhyphen",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "                                                  many spaces",
]
SPECIAL_OFF = [
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "Text with <|endoftext|> inside",
    "<|im_end|><|im_start|>",
]


def cases():
    for t in TEXTS:
        yield t, True
    for t in SPECIAL_OFF:
        yield t, False


def tokenize_hf(model_dir):
    """Hugging Face `tokenizers` (Rust) built from the GGUF's vocabulary and
    merges with SmolLM2's own tokenizer.json pipeline: pre-tokenizer
    Sequence[Digits(individual_digits), ByteLevel(add_prefix_space=False)],
    BPE without dropout, control tokens (token_type 3) as special added
    tokens. (transformers' GGUF loader cannot be used: it does not know the
    "smollm" pre-tokenizer and would merge digits.)"""
    import gguf
    import tokenizers
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    r = gguf.GGUFReader(os.path.join(model_dir, GGUF))

    def field(name):
        f = r.fields[name]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data] if f.types[0] == gguf.GGUFValueType.ARRAY \
            and f.types[-1] == gguf.GGUFValueType.STRING else [int(f.parts[i][0]) for i in f.data]

    assert bytes(r.fields["tokenizer.ggml.pre"].parts[-1]).decode() == "smollm"
    tokens = field("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ")) for m in field("tokenizer.ggml.merges")]
    types = field("tokenizer.ggml.token_type")
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])
    out = []
    for text, special in cases():
        ids = tok.encode(text, add_special_tokens=False).ids if special else plain_hf(tok, text)
        out.append({"text": text, "special": special, "ids": ids})
    return out, "tokenizers " + tokenizers.__version__


def plain_hf(tok, text):
    """Token ids of text with no added-token matching: the pre-tokenizer and
    the BPE model applied directly (what special=False means in llama.cpp)."""
    ids = []
    for piece, _ in tok.pre_tokenizer.pre_tokenize_str(text):
        ids.extend(t.id for t in tok.model.tokenize(piece))
    return ids


def tokenize_llama(model_dir):
    import llama_cpp

    llm = llama_cpp.Llama(os.path.join(model_dir, GGUF), vocab_only=True, verbose=False)
    out = []
    for text, special in cases():
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)
        out.append({"text": text, "special": special, "ids": list(ids)})
    return out, "llama-cpp-python " + llama_cpp.__version__


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--tool", choices=["hf", "llama"], required=True)
    ap.add_argument("--check")
    a = ap.parse_args()
    out, tool = (tokenize_hf if a.tool == "hf" else tokenize_llama)(a.model_dir)
    with open(a.out, "w") as f:
        json.dump({"model": GGUF, "tool": tool, "cases": out}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote %s: %d cases (%s)" % (a.out, len(out), tool), file=sys.stderr)
    if a.check:
        other = json.load(open(a.check))["cases"]
        bad = 0
        for x, y in zip(out, other):
            if x["text"] != y["text"] or x["special"] != y["special"]:
                sys.exit("case lists differ at %r" % x["text"])
            if x["ids"] != y["ids"]:
                bad += 1
                print("DIFFER %r special=%s\n  %s\n  %s" % (x["text"], x["special"], x["ids"], y["ids"]))
        print("%d of %d cases differ" % (bad, len(out)), file=sys.stderr)
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
