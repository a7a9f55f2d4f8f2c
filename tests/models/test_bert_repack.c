/* A BERT encoder's weights mapped from their repack cache file
 * (models/arch/bert.c, models/format/repack.h) give the same embeddings,
 * bit for bit, as copies in the arena: when the cache file is made, when
 * it is mapped again (a wake), after its pages were dropped from the page
 * cache, and after it was corrupted (made again), in F32 and in F16. A
 * small model with fresh random weights, written here as a sentence-
 * transformers folder. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "models/arch/bert.h"
#include "models/format/repack.h"
#include "tests/page_cache.h"

enum { E = 32, NH = 2, L = 2, F = 64, V = 40, P = 16, TT = 2, NSEQ = 3 };

static char dir[256], cache[300];
static colo_device *dev;

static void put(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

typedef struct {
    char name[96];
    int rows, cols; /* cols 0: a vector */
} tensor;

/* model.safetensors with every tensor the encoder reads, F32, random. */
static void write_weights(unsigned seed)
{
    static tensor t[5 + 16 * L];
    int n = 0;
    t[n++] = (tensor){"embeddings.word_embeddings.weight", V, E};
    t[n++] = (tensor){"embeddings.position_embeddings.weight", P, E};
    t[n++] = (tensor){"embeddings.token_type_embeddings.weight", TT, E};
    t[n++] = (tensor){"embeddings.LayerNorm.weight", E, 0};
    t[n++] = (tensor){"embeddings.LayerNorm.bias", E, 0};
    static const struct {
        const char *sfx;
        int rows, cols;
    } per[16] = {{"attention.self.query.weight", E, E}, {"attention.self.key.weight", E, E},
                 {"attention.self.value.weight", E, E}, {"attention.self.query.bias", E, 0},
                 {"attention.self.key.bias", E, 0}, {"attention.self.value.bias", E, 0},
                 {"attention.output.dense.weight", E, E}, {"attention.output.dense.bias", E, 0},
                 {"attention.output.LayerNorm.weight", E, 0}, {"attention.output.LayerNorm.bias", E, 0},
                 {"intermediate.dense.weight", F, E}, {"intermediate.dense.bias", F, 0},
                 {"output.dense.weight", E, F}, {"output.dense.bias", E, 0},
                 {"output.LayerNorm.weight", E, 0}, {"output.LayerNorm.bias", E, 0}};
    for (int l = 0; l < L; l++)
        for (int i = 0; i < 16; i++) {
            snprintf(t[n].name, sizeof t[n].name, "encoder.layer.%d.%s", l, per[i].sfx);
            t[n].rows = per[i].rows, t[n].cols = per[i].cols;
            n++;
        }
    static char hdr[16384];
    size_t h = (size_t)snprintf(hdr, sizeof hdr, "{"), off = 0;
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)t[i].rows * (t[i].cols ? t[i].cols : 1) * 4;
        if (t[i].cols)
            h += (size_t)snprintf(hdr + h, sizeof hdr - h, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}",
                                  i ? "," : "", t[i].name, t[i].rows, t[i].cols, off, off + bytes);
        else
            h += (size_t)snprintf(hdr + h, sizeof hdr - h, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}",
                                  i ? "," : "", t[i].name, t[i].rows, off, off + bytes);
        off += bytes;
    }
    h += (size_t)snprintf(hdr + h, sizeof hdr - h, "}");
    assert_true(h < sizeof hdr);
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t hl = h;
    assert_int_equal(fwrite(&hl, 8, 1, f), 1);
    assert_int_equal(fwrite(hdr, 1, h, f), h);
    srand(seed);
    for (size_t i = 0; i < off / 4; i++) {
        float x = ((float)rand() / (float)RAND_MAX - 0.5f) * 0.4f;
        assert_int_equal(fwrite(&x, 4, 1, f), 1);
    }
    assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/colo-test-bert-repack-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(cache, sizeof cache, "%s/cache", dir);
    char err[256];
    colo_device_config dc = {.want = "cpu"};
    if (!(dev = colo_device_open(&dc, err, sizeof err)))
        return -1;
    return setenv("COLO_REPACK_DIR", cache, 1);
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    unsetenv("COLO_REPACK_DIR");
    unsetenv("COLO_WEIGHTS");
    colo_device_close(dev);
    return system(cmd) == 0 ? 0 : -1;
}

/* Embeddings (NSEQ, E) of three fixed token sequences, the weights loaded
 * with COLO_WEIGHTS=mode as weight type wt. */
static void embed(const char *mode, colo_dtype wt, float *out)
{
    setenv("COLO_WEIGHTS", mode, 1);
    char err[512] = "";
    colo_arena *a = colo_arena_create_bytes(dev, "bert", 64 << 20, err, sizeof err);
    colo_stream *s = colo_stream_create(dev, NULL, err, sizeof err);
    assert_non_null(a);
    assert_non_null(s);
    colo_bert_config bc = {.weight_type = wt};
    colo_bert *m = colo_bert_load(dir, &bc, a, s, err, sizeof err);
    if (!m)
        fail_msg("load: %s", err);
    assert_int_equal(colo_bert_reserve(m, NSEQ, P), COLO_OK);
    static const int32_t s0[] = {2, 7, 9, 3}, s1[] = {2, 11, 12, 13, 14, 15, 3}, s2[] = {2, 39, 3};
    const int32_t *ids[NSEQ] = {s0, s1, s2};
    int lens[NSEQ] = {4, 7, 3};
    assert_int_equal(colo_bert_forward(m, s, NSEQ, ids, lens, out, NULL), COLO_OK);
    assert_int_equal(colo_stream_sync(s), COLO_OK);
    colo_bert_free(m);
    assert_int_equal(colo_arena_used(a), 0);
    colo_stream_destroy(s);
    colo_arena_destroy(a);
    unsetenv("COLO_WEIGHTS");
}

/* The cache folder's one file into path. */
static void cache_file(char *path, size_t len)
{
    DIR *d = opendir(cache);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            snprintf(path, len, "%s/%s", cache, e->d_name), n++;
    closedir(d);
    assert_int_equal(n, 1);
}

static void test_mapped_as_copied(void **state)
{
    (void)state;
    put("config.json", "{\"model_type\":\"bert\",\"hidden_act\":\"gelu\",\"hidden_size\":32,\"intermediate_size\":64,"
                       "\"layer_norm_eps\":1e-12,\"max_position_embeddings\":16,\"num_attention_heads\":2,"
                       "\"num_hidden_layers\":2,\"position_embedding_type\":\"absolute\",\"type_vocab_size\":2,"
                       "\"vocab_size\":40}");
    char vocab[1024] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
    for (int i = 5; i < V; i++)
        snprintf(vocab + strlen(vocab), sizeof vocab - strlen(vocab), "w%d\n", i);
    put("vocab.txt", vocab);
    write_weights((unsigned)time(NULL));
    const colo_dtype types[] = {COLO_F32, COLO_F16};
    for (int k = 0; k < 2; k++) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf %s", cache);
        assert_int_equal(system(cmd), 0);
        static float copied[NSEQ * E], mapped[NSEQ * E];
        embed("copy", types[k], copied);
        assert_null(opendir(cache)); /* copies make no cache file */
        embed("map", types[k], mapped); /* makes the cache file */
        assert_memory_equal(copied, mapped, sizeof copied);
        char path[600];
        cache_file(path, sizeof path);
        struct stat made;
        assert_int_equal(stat(path, &made), 0);
        memset(mapped, 0, sizeof mapped);
        embed("map", types[k], mapped); /* maps it again, as a wake does */
        assert_memory_equal(copied, mapped, sizeof copied);
        struct stat again;
        assert_int_equal(stat(path, &again), 0);
        assert_int_equal(again.st_ino, made.st_ino); /* not made again */
        assert_int_equal(again.st_mtim.tv_nsec, made.st_mtim.tv_nsec);

        /* its pages dropped from the page cache: read from the disk */
        int fd = open(path, O_RDONLY);
        assert_true(fd >= 0);
        assert_int_equal(fdatasync(fd), 0);
        assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
        close(fd);
        assert_true(resident_pages(path) < 8);
        memset(mapped, 0, sizeof mapped);
        embed("map", types[k], mapped);
        assert_memory_equal(copied, mapped, sizeof copied);

        /* a byte of the weights corrupted: detected, made again */
        fd = open(path, O_RDWR);
        assert_true(fd >= 0);
        unsigned char b;
        assert_int_equal(pread(fd, &b, 1, COLO_REPACK_HEADER_BYTES + 777), 1);
        b ^= 0x40;
        assert_int_equal(pwrite(fd, &b, 1, COLO_REPACK_HEADER_BYTES + 777), 1);
        struct timespec ts[2] = {{0, UTIME_OMIT}, {time(NULL) + 1000, 0}};
        assert_int_equal(futimens(fd, ts), 0);
        close(fd);
        memset(mapped, 0, sizeof mapped);
        embed("map", types[k], mapped);
        assert_memory_equal(copied, mapped, sizeof copied);
        unsigned char now;
        fd = open(path, O_RDONLY);
        assert_int_equal(pread(fd, &now, 1, COLO_REPACK_HEADER_BYTES + 777), 1);
        close(fd);
        assert_int_equal(now, b ^ 0x40);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mapped_as_copied),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
