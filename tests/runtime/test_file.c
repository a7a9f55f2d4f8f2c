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
#include <sys/stat.h>
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_refused_without_blocking),
        cmocka_unit_test(test_regular_and_others),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
