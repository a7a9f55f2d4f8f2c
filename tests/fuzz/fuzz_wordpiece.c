/* Fuzz target: BERT WordPiece (models/tokenizer/wordpiece.h). The first byte picks
 * the mode: bit 0 allow_special, bits 1-2 one of three tokenizers built
 * once (uncased BERT, cased with no cleaning, short sequences and words);
 * with bit 3 set the rest is a vocab.txt instead, loaded and used on a
 * fixed text. Otherwise the rest is the text to encode. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/tokenizer/wordpiece.h"
#include "fuzz_common.h"

static const char *const vocab[] = {
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", ",", "!", "un", "##aff", "##able", "aff",
    "cafe", "\xe5\x8c\x97", "\xe4\xba\xac", "a", "##a", "the", "##s", ".", "i", "##\xc4\xb1", "\xc3\x9f", "-",
    "naive", "##ing", "token", "##ize", "##r", "Hello", "##\xcc\x81", "e", "##e", "1", "##1", "##2", "##3"};
#define N_VOCAB ((int)(sizeof vocab / sizeof vocab[0]))

static colo_wordpiece *wps[3];

static void teardown(void)
{
    for (int i = 0; i < 3; i++)
        colo_wordpiece_free(wps[i]);
}

static void build(void)
{
    colo_wordpiece_config c[3];
    c[0] = colo_wordpiece_default_config(128);
    c[1] = colo_wordpiece_default_config(64);
    c[1].lowercase = c[1].strip_accents = c[1].chinese_chars = c[1].clean_text = false;
    c[2] = colo_wordpiece_default_config(6);
    c[2].max_chars_per_word = 4;
    char err[256];
    for (int i = 0; i < 3; i++)
        if (!(wps[i] = colo_wordpiece_create(vocab, N_VOCAB, &c[i], err, sizeof err)))
            abort();
    atexit(teardown);
}

static void encode(const colo_wordpiece *wp, const char *text, size_t len, bool special, int cap)
{
    int32_t ids[256];
    int n = -1, n_full = -1;
    if (colo_wordpiece_encode(wp, text, len, special, ids, cap, &n, &n_full) != COLO_OK)
        abort(); /* never fails on arbitrary bytes */
    int lim = cap < colo_wordpiece_max_len(wp) ? cap : colo_wordpiece_max_len(wp);
    if (n < 2 || n > lim || n_full < n || ids[0] != colo_wordpiece_cls(wp) || ids[n - 1] != colo_wordpiece_sep(wp))
        abort();
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= colo_wordpiece_n_vocab(wp) || !colo_wordpiece_token(wp, ids[i]))
            abort();
}

static void from_vocab(const uint8_t *data, size_t size)
{
    char path[64], err[256];
    int fd = fuzz_memfile(data, size, path, sizeof path);
    if (fd < 0)
        return;
    colo_wordpiece_config c = colo_wordpiece_default_config(32);
    colo_wordpiece *wp = colo_wordpiece_load(path, &c, err, sizeof err);
    close(fd);
    if (!wp)
        return;
    static const char text[] = "Hello, [CLS] wörld! unaffable \xe5\x8c\x97\xe4\xba\xac [SEP] [MASK] x\xff";
    encode(wp, text, sizeof text - 1, true, 256);
    encode(wp, text, sizeof text - 1, false, 3);
    (void)colo_wordpiece_find(wp, "[UNK]");
    (void)colo_wordpiece_pad(wp);
    colo_wordpiece_free(wp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init_once(build);
    if (size < 1)
        return 0;
    if (data[0] & 8) {
        from_vocab(data + 1, size - 1);
        return 0;
    }
    const colo_wordpiece *wp = wps[((data[0] >> 1) & 3) % 3];
    bool special = data[0] & 1;
    encode(wp, (const char *)data + 1, size - 1, special, 256);
    encode(wp, (const char *)data + 1, size - 1, special, 2);
    return 0;
}
