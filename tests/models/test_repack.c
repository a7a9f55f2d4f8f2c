/* The repack cache (models/format/repack.h): a payload made once is mapped
 * from its file afterwards; a corrupt, truncated or stale file, or one of
 * another format version, is detected and made again, never mapped as it
 * is; a payload that cannot be made leaves no file behind; a folder that
 * cannot be written is an error the caller can fall back from. */
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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "models/format/repack.h"

static char dir[256], cache[300], src[300];
static uint32_t seed;

typedef struct {
    int calls;
    colo_status fail; /* returned instead of filling when not COLO_OK */
} filler;

/* A payload that depends on the seed and its length: word i = hash(seed, i). */
static uint32_t word_at(size_t i) { return (uint32_t)((i + 1) * 2654435761u) ^ seed; }

static colo_status fill(void *ud, void *dst, size_t bytes, char *err, size_t errlen)
{
    filler *f = ud;
    f->calls++;
    if (f->fail != COLO_OK) {
        snprintf(err, errlen, "cannot make it");
        return f->fail;
    }
    uint32_t *w = dst;
    for (size_t i = 0; i < bytes / 4; i++)
        w[i] = word_at(i);
    return COLO_OK;
}

static void check_payload(const colo_repack *r, size_t bytes)
{
    const uint32_t *w = colo_repack_data(r);
    assert_int_equal((uintptr_t)w % 4096, 0);
    for (size_t i = 0; i < bytes / 4; i++)
        if (w[i] != word_at(i))
            fail_msg("word %zu differs", i);
}

/* Maps key's payload of bytes; whether it was made (fill called) now. */
static bool map_once(const colo_repack_key *key, size_t bytes)
{
    filler f = {0};
    colo_repack *r;
    bool built;
    char err[512] = "";
    colo_status st = colo_repack_map(key, bytes, fill, &f, &r, &built, err, sizeof err);
    if (st != COLO_OK)
        fail_msg("map: %s", err);
    assert_int_equal(f.calls, built ? 1 : 0);
    check_payload(r, bytes);
    colo_repack_close(r);
    return built;
}

/* The one cache file of the folder into path; how many there are. */
static int cache_file(char *path, size_t len)
{
    DIR *d = opendir(cache);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(path, len, "%s/%s", cache, e->d_name);
            n++;
        }
    closedir(d);
    return n;
}

/* Writes bytes at off of path and moves its modification time on (a file
 * changed under its name). */
static void poke(const char *path, off_t off, const void *bytes, size_t n)
{
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, bytes, n, off), (ssize_t)n);
    struct timespec ts[2] = {{0, UTIME_OMIT}, {time(NULL) + 100 + seed % 100, 0}};
    assert_int_equal(futimens(fd, ts), 0);
    close(fd);
}

static int setup(void **state)
{
    (void)state;
    seed = (uint32_t)time(NULL) * 2246822519u;
    snprintf(dir, sizeof dir, "/tmp/colo-test-repack-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(cache, sizeof cache, "%s/cache/repack", dir); /* made by the first map */
    snprintf(src, sizeof src, "%s/source.bin", dir);
    FILE *f = fopen(src, "wb");
    if (!f || fputs("the source", f) < 0 || fclose(f) != 0)
        return -1;
    return setenv("COLO_REPACK_DIR", cache, 1);
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    unsetenv("COLO_REPACK_DIR");
    return system(cmd) == 0 ? 0 : -1;
}

static void test_made_once_then_mapped(void **state)
{
    (void)state;
    colo_repack_key key = {.kind = "test", .src_path = src, .layout = 1};
    size_t bytes = (size_t)3 << 20 | 44;
    assert_true(map_once(&key, bytes));
    assert_false(map_once(&key, bytes));
    assert_false(map_once(&key, bytes));
    char path[600];
    assert_int_equal(cache_file(path, sizeof path), 1);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal((size_t)sb.st_size, COLO_REPACK_HEADER_BYTES + bytes);
    /* another layout is another file */
    key.layout = 2;
    assert_true(map_once(&key, bytes));
    assert_int_equal(cache_file(path, sizeof path), 2);
}

static void test_bad_files_made_again(void **state)
{
    (void)state;
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", cache);
    assert_int_equal(system(cmd), 0);
    colo_repack_key key = {.kind = "test", .src_path = src, .layout = 7};
    size_t bytes = (size_t)1 << 20;
    assert_true(map_once(&key, bytes));
    char path[600];
    assert_int_equal(cache_file(path, sizeof path), 1);

    /* a payload byte flipped */
    unsigned char b;
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &b, 1, COLO_REPACK_HEADER_BYTES + 12345), 1);
    close(fd);
    b ^= 0x10;
    poke(path, COLO_REPACK_HEADER_BYTES + 12345, &b, 1);
    assert_true(map_once(&key, bytes));
    assert_false(map_once(&key, bytes));
    /* the header's format version */
    uint32_t v = COLO_REPACK_VERSION + 1;
    poke(path, 8, &v, sizeof v);
    assert_true(map_once(&key, bytes));
    /* cut short */
    assert_int_equal(truncate(path, COLO_REPACK_HEADER_BYTES + bytes / 2), 0);
    assert_true(map_once(&key, bytes));
    /* not even a header */
    assert_int_equal(truncate(path, 10), 0);
    assert_true(map_once(&key, bytes));
    assert_false(map_once(&key, bytes));
    assert_int_equal(cache_file(path, sizeof path), 1);
}

static void test_stale_source(void **state)
{
    (void)state;
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", cache);
    assert_int_equal(system(cmd), 0);
    colo_repack_key key = {.kind = "test", .src_path = src, .layout = 9};
    size_t bytes = 8192;
    assert_true(map_once(&key, bytes));
    char old[600], now[600];
    assert_int_equal(cache_file(old, sizeof old), 1);
    /* the source changes: its cache file is another one, made anew */
    poke(src, 0, "T", 1);
    assert_true(map_once(&key, bytes));
    assert_int_equal(cache_file(now, sizeof now), 2);
    /* a file made from the source's old version, under the new one's name:
     * refused as stale, made again */
    DIR *d = opendir(cache);
    assert_non_null(d);
    struct dirent *e;
    now[0] = 0;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            char p[600];
            snprintf(p, sizeof p, "%s/%s", cache, e->d_name);
            if (strcmp(p, old))
                snprintf(now, sizeof now, "%s", p);
        }
    closedir(d);
    assert_true(now[0]);
    snprintf(cmd, sizeof cmd, "cp %s %s", old, now);
    assert_int_equal(system(cmd), 0);
    assert_true(map_once(&key, bytes));
    assert_false(map_once(&key, bytes));
}

static void test_failures(void **state)
{
    (void)state;
    colo_repack_key key = {.kind = "test", .src_path = src, .layout = 11};
    char err[512] = "", cmd[1300];
    colo_repack *r = (colo_repack *)1;
    /* a payload that cannot be made: its status, and no file left behind */
    snprintf(cmd, sizeof cmd, "rm -rf %s", cache);
    assert_int_equal(system(cmd), 0);
    filler f = {.fail = COLO_EFORMAT};
    assert_int_equal(colo_repack_map(&key, 4096, fill, &f, &r, NULL, err, sizeof err), COLO_EFORMAT);
    assert_null(r);
    assert_non_null(strstr(err, "cannot make it"));
    char path[600];
    assert_int_equal(cache_file(path, sizeof path), 0);
    /* no source */
    colo_repack_key gone = {.kind = "test", .src_path = "/nonexistent/colo-source", .layout = 1};
    f.fail = COLO_OK;
    assert_int_equal(colo_repack_map(&gone, 4096, fill, &f, &r, NULL, err, sizeof err), COLO_EIO);
    /* a cache folder that cannot be made (under a regular file) */
    char bad[400];
    snprintf(bad, sizeof bad, "%s/sub", src);
    assert_int_equal(setenv("COLO_REPACK_DIR", bad, 1), 0);
    assert_int_equal(colo_repack_map(&key, 4096, fill, &f, &r, NULL, err, sizeof err), COLO_EIO);
    assert_null(r);
    assert_int_equal(setenv("COLO_REPACK_DIR", cache, 1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_made_once_then_mapped),
        cmocka_unit_test(test_bad_files_made_again),
        cmocka_unit_test(test_stale_source),
        cmocka_unit_test(test_failures),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
