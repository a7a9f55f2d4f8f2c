/* Fuzz target: the GGUF reader (models/format/gguf.h) on arbitrary bytes, then
 * what the server reads from a GGUF before loading weights: every key
 * through the typed getters, string arrays element by element, every
 * tensor's bytes, the tokenizer (models/tokenizer/tokenizer.h) and a llama model's
 * memory need (models/arch/llama.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/tokenizer/tokenizer.h"
#include "models/format/gguf.h"
#include "models/arch/llama.h"
#include "fuzz_common.h"

/* Touches the first and last byte of a string: both must lie in the mapping. */
static void touch(const char *p, uint64_t len)
{
    if (len) {
        volatile char c = p[0];
        c = p[len - 1];
        (void)c;
    }
}

/* Reads every key through every getter: the one its type calls for must
 * work, the others must refuse, not misread. */
static void read_kvs(const colo_gguf *g)
{
    int n = colo_gguf_n_kv(g);
    for (int i = 0; i < n; i++) {
        const colo_gguf_kv *kv = colo_gguf_kv_at(g, i);
        (void)colo_gguf_type_name(kv->type);
        touch(kv->key.ptr, kv->key.len);
        char key[256];
        if (kv->key.len >= sizeof key || memchr(kv->key.ptr, 0, kv->key.len))
            continue; /* not reachable by name */
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = 0;
        if (!colo_gguf_find(g, key))
            abort(); /* a key that was read must be found */
        uint32_t u32;
        int64_t i64;
        float f32;
        bool b;
        colo_gguf_str s;
        colo_gguf_type t;
        uint64_t alen;
        const uint8_t *adata;
        (void)colo_gguf_get_u32(g, key, &u32);
        (void)colo_gguf_get_i64(g, key, &i64);
        (void)colo_gguf_get_f32(g, key, &f32);
        (void)colo_gguf_get_bool(g, key, &b);
        if (colo_gguf_get_str(g, key, &s) == COLO_OK)
            touch(s.ptr, s.len);
        if (colo_gguf_get_arr(g, key, &t, &alen, &adata) == COLO_OK && t == COLO_GGUF_STRING) {
            uint64_t lim = alen < 64 ? alen : 64;
            for (uint64_t k = 0; k < lim; k++) /* backwards: the index path */
                if (colo_gguf_arr_str(g, key, alen - 1 - k, &s) == COLO_OK)
                    touch(s.ptr, s.len);
        }
    }
}

static void read_tensors(const colo_gguf *g)
{
    int n = colo_gguf_n_tensors(g);
    for (int i = 0; i < n; i++) {
        const colo_gguf_tensor *t = colo_gguf_tensor_at(g, i);
        if (colo_gguf_find_tensor(g, t->name) == NULL)
            abort();
        const volatile uint8_t *p = t->data;
        uint8_t acc = 0;
        for (size_t k = 0; k < t->bytes; k += 4096)
            acc ^= p[k];
        if (t->bytes)
            acc ^= p[t->bytes - 1]; /* the last byte must lie in the mapping */
        (void)acc;
    }
}

static void use_tokenizer(const colo_gguf *g, const uint8_t *data, size_t size)
{
    char err[256];
    colo_tokenizer *b = colo_tokenizer_from_gguf(g, err, sizeof err);
    if (!b)
        return;
    /* Encode a slice of the input itself with the vocabulary it carries. */
    size_t n = size < 256 ? size : 256;
    int32_t *ids = NULL;
    int n_ids = 0;
    if (colo_tokenizer_encode(b, (const char *)data + size - n, n, true, true, &ids, &n_ids) == COLO_OK) {
        char buf[1024];
        size_t len;
        for (int i = 0; i < n_ids; i++)
            (void)colo_tokenizer_decode(b, ids[i], buf, sizeof buf, &len);
    }
    free(ids);
    for (int id = -1; id <= colo_tokenizer_n_vocab(b) && id < 512; id++) {
        char buf[1024];
        size_t len;
        (void)colo_tokenizer_decode(b, id, buf, sizeof buf, &len);
        (void)colo_tokenizer_token_text(b, id);
        (void)colo_tokenizer_is_special(b, id);
    }
    colo_tokenizer_free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init_once(NULL);
    char path[64], err[512];
    int fd = fuzz_memfile(data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    colo_gguf *g = colo_gguf_open(path, err, sizeof err);
    if (g) {
        (void)colo_gguf_version(g);
        (void)colo_gguf_alignment(g);
        (void)colo_gguf_data_offset(g); /* may lie past the end when no tensor has bytes */
        read_kvs(g);
        read_tensors(g);
        use_tokenizer(g, data, size);
        colo_gguf_close(g);
        colo_llama_memory mem;
        (void)colo_llama_memory_need(path, COLO_F16, &mem, err, sizeof err);
    }
    close(fd);
    return 0;
}
