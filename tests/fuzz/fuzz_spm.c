/* Fuzz target: SentencePiece-style BPE (models/tokenizer/spm.h) through the tokenizer
 * facade (models/tokenizer/tokenizer.h), and the chat templates (models/sample/chat.h), on two
 * hand-made vocabularies built once: "plain" (no space prefix, no
 * user-defined tokens) and "gemma-like" (a space prefix, runs of newlines and
 * spaces as user-defined tokens, Phi-3's white-space stripping). The first
 * byte picks the mode; the rest is:
 *   bits 1-2 clear: text to encode with the plain vocabulary (bit 0: parse
 *                   special tokens); without them, its tokens must decode to
 *                   the text (U+2581 read back as a space);
 *   bit 1 set:      the same text through the gemma-like vocabulary: every id
 *                   in range and decodable; then the bytes as token ids;
 *   bit 2 set:      NUL-separated role, content, role... rendered by the chat
 *                   family of bits 3-5, then encoded with special tokens. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/sample/chat.h"
#include "models/format/gguf.h"
#include "tools/gguf_write.h"
#include "models/tokenizer/tokenizer.h"
#include "fuzz_common.h"

#define DECODE_CAP 64 /* bytes a token may decode to, here */

static colo_gguf *g_plain, *g_gemma;
static colo_tokenizer *plain, *gemma;

static void teardown(void)
{
    colo_tokenizer_free(plain);
    colo_tokenizer_free(gemma);
    colo_gguf_close(g_plain);
    colo_gguf_close(g_gemma);
}

/* <unk> <s> </s>, 256 byte tokens, then pieces with scores, then specials. */
static colo_tokenizer *make(bool gemma_like, colo_gguf **gout)
{
    static const char *const pieces[] = {"\xe2\x96\x81", "a", "b", "t", "h", "e", "i", "n", "\xe2\x96\x81t",
                                         "he", "\xe2\x96\x81the", "in", "\xe2\x96\x81in", "ab", "ba",
                                         "\xe4\xbd\xa0", "\xe4\xbd\xa0\xe5\xa5\xbd", "\xf0\x9f\x98\x80"};
    enum { NP = sizeof pieces / sizeof pieces[0] };
    static const char *const specials[] = {"<|ctrl|>", "<start_of_turn>", "<end_of_turn>", "\n\n", "  ", "   "};
    int n_spec = gemma_like ? 6 : 3, n = 3 + 256 + NP + n_spec;
    const char *tok[3 + 256 + NP + 6];
    float score[3 + 256 + NP + 6];
    int32_t type[3 + 256 + NP + 6];
    static char bytes[256][8];
    tok[0] = "<unk>", tok[1] = "<s>", tok[2] = "</s>";
    type[0] = 2, type[1] = type[2] = 3;
    score[0] = score[1] = score[2] = 0;
    for (int c = 0; c < 256; c++) {
        snprintf(bytes[c], sizeof bytes[c], "<0x%02X>", c);
        tok[3 + c] = bytes[c], type[3 + c] = 6, score[3 + c] = 0;
    }
    for (int i = 0; i < NP; i++)
        tok[259 + i] = pieces[i], type[259 + i] = 1, score[259 + i] = -(float)(i % 7);
    for (int i = 0; i < n_spec; i++)
        tok[259 + NP + i] = specials[i], type[259 + NP + i] = i < 3 ? 3 : 4, score[259 + NP + i] = 0;
    char path[64], err[256];
    int fd = fuzz_memfile(NULL, 0, path, sizeof path);
    colo_gguf_writer *w = colo_gguf_writer_create();
    if (fd < 0 || !w || colo_gguf_writer_add_str(w, "tokenizer.ggml.model", "llama") ||
        colo_gguf_writer_add_str_arr(w, "tokenizer.ggml.tokens", tok, (uint64_t)n) ||
        colo_gguf_writer_add_f32_arr(w, "tokenizer.ggml.scores", score, (uint64_t)n) ||
        colo_gguf_writer_add_i32_arr(w, "tokenizer.ggml.token_type", type, (uint64_t)n) ||
        colo_gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", gemma_like) ||
        colo_gguf_writer_add_str(w, "general.name", gemma_like ? "phi3-like" : "plain") ||
        colo_gguf_writer_finish(w, path, NULL, NULL, err, sizeof err))
        abort();
    colo_gguf_writer_free(w);
    colo_tokenizer *t;
    if (!(*gout = colo_gguf_open(path, err, sizeof err)) || !(t = colo_tokenizer_from_gguf(*gout, err, sizeof err)))
        abort();
    close(fd); /* the mapping stays */
    return t;
}

static void build(void)
{
    plain = make(false, &g_plain);
    gemma = make(true, &g_gemma);
    atexit(teardown);
}

/* Decodes ids into a new buffer (*len bytes); aborts on an id out of range. */
static char *decode_all(const colo_tokenizer *t, const int32_t *ids, int n, size_t *len)
{
    size_t cap = (size_t)n * DECODE_CAP + 1, o = 0;
    char *out = malloc(cap);
    if (!out)
        abort();
    for (int i = 0; i < n; i++) {
        size_t piece;
        if (ids[i] < 0 || ids[i] >= colo_tokenizer_n_vocab(t) ||
            colo_tokenizer_decode(t, ids[i], out + o, cap - o, &piece) != COLO_OK)
            abort();
        o += piece;
    }
    *len = o;
    return out;
}

static void roundtrip(const char *text, size_t len, bool special)
{
    int32_t *ids = NULL;
    int n = 0;
    if (colo_tokenizer_encode(plain, text, len, true, special, &ids, &n) != COLO_OK)
        abort();
    size_t o;
    char *out = decode_all(plain, ids, n, &o);
    if (!special) {
        /* the text with U+2581 as a space, after the BOS's "<s>" */
        char *want = malloc(len + 4);
        if (!want)
            abort();
        size_t k = 0;
        memcpy(want, "<s>", 3), k = 3;
        for (size_t i = 0; i < len; i++) {
            if (i + 3 <= len && !memcmp(text + i, "\xe2\x96\x81", 3)) {
                want[k++] = ' ';
                i += 2;
            } else {
                want[k++] = text[i];
            }
        }
        if (o != k || memcmp(out, want, k))
            abort(); /* decoding gives back the bytes encoded */
        free(want);
    }
    free(out);
    free(ids);
}

static void gemma_like(const uint8_t *data, size_t size)
{
    for (int special = 0; special < 2; special++) {
        int32_t *ids = NULL;
        int n = 0;
        if (colo_tokenizer_encode(gemma, (const char *)data, size, special, special, &ids, &n) != COLO_OK)
            abort();
        size_t o;
        free(decode_all(gemma, ids, n, &o));
        free(ids);
    }
    for (size_t i = 0; i + 2 <= size; i += 2) {
        int id = (int)((unsigned)data[i] | (unsigned)data[i + 1] << 8) - 8;
        char buf[DECODE_CAP];
        size_t len = 0, cap = (size_t)(data[i] & 7);
        colo_status st = colo_tokenizer_decode(gemma, id, buf, cap ? cap : sizeof buf, &len);
        bool in_range = id >= 0 && id < colo_tokenizer_n_vocab(gemma);
        if ((st == COLO_EINVAL) == in_range || (st == COLO_OK && len > (cap ? cap : sizeof buf)))
            abort();
    }
}

static void chat(unsigned family, const uint8_t *data, size_t size)
{
    static const char *const names[] = {"chatml",     "llama3",     "gemma",             "phi3",
                                        "mistral-v1", "mistral-v3", "mistral-v3-tekken", "deepseek-r1"};
    char *copy = malloc(size + 1);
    if (!copy)
        abort();
    memcpy(copy, data, size);
    copy[size] = 0;
    colo_chat_msg msgs[8];
    int n = 0;
    const char *p = copy, *end = copy + size;
    while (n < 8 && p < end) {
        msgs[n].role = p;
        p += strlen(p) + 1;
        msgs[n].content = p < end ? p : "";
        p += p < end ? strlen(p) + 1 : 0;
        n++;
    }
    colo_chat_template t;
    char err[256];
    if (colo_chat_template_init(&t, gemma, names[family & 7], err, sizeof err) != COLO_OK)
        abort();
    char *prompt = colo_chat_prompt(&t, msgs, n);
    if (!prompt)
        abort();
    int32_t *ids = NULL;
    int k = 0;
    if (colo_tokenizer_encode(gemma, prompt, strlen(prompt), true, true, &ids, &k) != COLO_OK)
        abort();
    size_t o;
    free(decode_all(gemma, ids, k, &o));
    free(ids);
    free(prompt);
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init_once(build);
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    data++, size--;
    if (mode & 4)
        chat((unsigned)mode >> 3, data, size);
    else if (mode & 2)
        gemma_like(data, size);
    else
        roundtrip((const char *)data, size, mode & 1);
    return 0;
}
