/* Fuzz target: the tokenizer (models/tokenizer/tokenizer.h: byte-level BPE) with the tokenizer of a
 * synthetic model (tools/mkmodel.h: 256 byte tokens, merges, ChatML
 * specials), built once. The first byte picks the mode; the rest is:
 *   bit 1 clear: text to encode (bit 0: allow_special), and its tokens
 *                must decode to exactly the same bytes;
 *   bit 1 set:   little-endian 32-bit token ids to decode, any value;
 *   bit 2 set:   (with bit 1 clear) NUL-separated role, content, role...
 *                made a ChatML prompt, then encoded with specials. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/tokenizer/tokenizer.h"
#include "models/sample/chat.h"
#include "models/format/gguf.h"
#include "tools/mkmodel.h"
#include "fuzz_common.h"

#define DECODE_CAP 256 /* bytes a token may decode to, here */

static colo_gguf *gguf;
static colo_tokenizer *bpe;

static void teardown(void)
{
    colo_tokenizer_free(bpe);
    colo_gguf_close(gguf);
}

static void build(void)
{
    char path[64], err[256];
    int fd = fuzz_memfile(NULL, 0, path, sizeof path);
    colo_mkmodel_config c = {.n_layer = 1, .n_embd = 32, .n_head = 2, .n_kv_head = 1, .n_ff = 32,
                             .n_vocab = 320, .n_ctx = 64, .type = COLO_Q8_0, .seed = 1};
    if (fd < 0 || colo_mkmodel_write(path, &c, err, sizeof err) != COLO_OK ||
        !(gguf = colo_gguf_open(path, err, sizeof err)) || !(bpe = colo_tokenizer_from_gguf(gguf, err, sizeof err)))
        abort();
    close(fd); /* the mapping stays */
    atexit(teardown);
}

static void roundtrip(const char *text, size_t len, bool special)
{
    int32_t *ids = NULL;
    int n = 0;
    if (colo_tokenizer_encode(bpe, text, len, true, special, &ids, &n) != COLO_OK)
        abort();
    char *out = malloc(len + DECODE_CAP);
    if (!out)
        abort();
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        size_t piece;
        if (ids[i] < 0 || ids[i] >= colo_tokenizer_n_vocab(bpe) ||
            colo_tokenizer_decode(bpe, ids[i], out + o, len + DECODE_CAP - o, &piece) != COLO_OK)
            abort();
        o += piece;
        if (o > len)
            abort(); /* more bytes than were encoded */
    }
    if (o != len || memcmp(out, text, len))
        abort(); /* decoding gives back exactly the bytes encoded */
    free(out);
    free(ids);
}

static void decode_ids(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i + 4 <= size; i += 4) {
        int32_t id = (int32_t)((uint32_t)data[i] | (uint32_t)data[i + 1] << 8 | (uint32_t)data[i + 2] << 16 |
                               (uint32_t)data[i + 3] << 24);
        char buf[DECODE_CAP];
        size_t len = 0;
        size_t cap = (size_t)(data[i] & 7); /* small buffers too */
        colo_status st = colo_tokenizer_decode(bpe, id, buf, cap ? cap : sizeof buf, &len);
        bool in_range = id >= 0 && id < colo_tokenizer_n_vocab(bpe);
        if ((st == COLO_EINVAL) == in_range || (st == COLO_OK && len > (cap ? cap : sizeof buf)))
            abort();
        if ((colo_tokenizer_token_text(bpe, id) != NULL) != in_range)
            abort();
        (void)colo_tokenizer_is_special(bpe, id);
    }
}

static void chat(const uint8_t *data, size_t size)
{
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
    char *prompt = colo_chatml_prompt(msgs, n);
    if (!prompt)
        abort();
    roundtrip(prompt, strlen(prompt), true);
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
    if (mode & 2)
        decode_ids(data, size);
    else if (mode & 4)
        chat(data, size);
    else
        roundtrip((const char *)data, size, mode & 1);
    return 0;
}
