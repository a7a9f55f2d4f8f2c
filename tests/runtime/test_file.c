/* runtime/file.c: a model's file is opened only when it is a regular file,
 * and never blocks on one that is not (a FIFO without a writer). */
#include "runtime/file.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/colo-test-file-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/fifo", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/plain", dir);
    unlink(p);
    return rmdir(dir);
}

static void test_fifo_refused_without_blocking(void **state)
{
    (void)state;
    char p[128], err[256] = "";
    snprintf(p, sizeof p, "%s/fifo", dir);
    assert_int_equal(mkfifo(p, 0600), 0);
    /* with a blocking open() this call would never return: nobody writes */
    assert_int_equal(colo_file_open_regular(p, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a regular file (a FIFO)"));
    assert_null(colo_file_fopen_regular(p, err, sizeof err));
}

static void test_regular_and_others(void **state)
{
    (void)state;
    char p[128], err[256] = "";
    snprintf(p, sizeof p, "%s/plain", dir);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite("hello", 1, 5, f), 5);
    assert_int_equal(fclose(f), 0);
    size_t size = 0;
    int fd = colo_file_open_regular(p, &size, err, sizeof err);
    assert_true(fd >= 0);
    assert_int_equal(size, 5);
    char buf[8];
    assert_int_equal(read(fd, buf, sizeof buf), 5); /* blocking again, reads as usual */
    close(fd);
    f = colo_file_fopen_regular(p, err, sizeof err);
    assert_non_null(f);
    assert_int_equal(fread(buf, 1, sizeof buf, f), 5);
    fclose(f);
    assert_int_equal(colo_file_open_regular(dir, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "a directory"));
    assert_int_equal(colo_file_open_regular("/dev/null", NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "a character device"));
    snprintf(p, sizeof p, "%s/missing", dir);
    assert_int_equal(colo_file_open_regular(p, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot open"));
}

/* Pages of the mapping [p, p + bytes) in the page cache. */
static size_t resident(const void *p, size_t bytes)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), n = (bytes + pg - 1) / pg, r = 0;
    unsigned char *v = malloc(n);
    assert_non_null(v);
    assert_int_equal(mincore((void *)p, bytes, v), 0);
    for (size_t i = 0; i < n; i++)
        r += v[i] & 1;
    free(v);
    return r;
}

/* A file not in the page cache (40 MiB: helper threads populate it) is
 * read in whole and reads back what was written; a file cut short under
 * its mapping is an error, not a crash; refold leaves a small mapping
 * alone and keeps the contents of a large one. */
static void test_populate(void **state)
{
    (void)state;
    char path[] = "/tmp/colo-test-populate-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t bytes = (size_t)40 << 20, pg = (size_t)sysconf(_SC_PAGESIZE);
    uint32_t seed = (uint32_t)time(NULL);
    uint32_t *buf = malloc(bytes);
    assert_non_null(buf);
    for (size_t i = 0; i < bytes / 4; i++)
        buf[i] = (uint32_t)(i * 2654435761u) ^ seed;
    assert_int_equal(write(fd, buf, bytes), (ssize_t)bytes);
    assert_int_equal(fdatasync(fd), 0);
    assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    const uint32_t *m = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    assert_true(m != MAP_FAILED);
    assert_true(resident(m, bytes) < bytes / pg / 2); /* dropped */
    assert_int_equal(colo_file_populate(m, bytes), 0);
    assert_int_equal(resident(m, bytes), bytes / pg);
    assert_memory_equal(m, buf, bytes);
    assert_int_equal(colo_file_refold(path, m, bytes), 0);
    assert_memory_equal(m, buf, bytes);
    size_t res = 0, huge = 0;
    assert_true(colo_file_huge_mapped(m, &res, &huge)); /* Linux says, whatever its folios */
    assert_true(huge <= res);
    assert_int_equal(colo_file_refold(path, m, 4096), 0); /* small: nothing to do */
    munmap((void *)m, bytes);

    /* cut short under the mapping: the populate fails with the kernel's errno */
    m = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    assert_true(m != MAP_FAILED);
    assert_int_equal(ftruncate(fd, (off_t)(bytes / 2)), 0);
    assert_int_not_equal(colo_file_populate(m, bytes), 0);
    munmap((void *)m, bytes);
    close(fd);
    unlink(path);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_refused_without_blocking),
        cmocka_unit_test(test_regular_and_others),
        cmocka_unit_test(test_populate),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
