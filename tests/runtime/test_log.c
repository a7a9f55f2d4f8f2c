/* runtime/log.c: one call, one line, whatever the message holds. */
#include "runtime/log.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

/* Runs the logging of fn with stderr sent to a file; returns what was written (malloc'd). */
static char *capture(void (*fn)(void))
{
    fflush(stderr);
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fileno(tmp), STDERR_FILENO) >= 0);
    fn();
    fflush(stderr);
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    long n = ftell(tmp);
    assert_true(n >= 0);
    char *out = calloc(1, (size_t)n + 1);
    assert_non_null(out);
    rewind(tmp);
    assert_int_equal(fread(out, 1, (size_t)n, tmp), (size_t)n);
    fclose(tmp);
    return out;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* A model name as a client could send it: a newline and a forged line after it. */
static const char *forged_name = "x\n2026-01-02T03:04:05.678Z ERROR forged\r\x1b[2Jz\\n";

static void log_forged(void) { COLO_INFO("request id=1 model=%s status=%d", forged_name, 404); }

static void test_control_bytes_stay_in_one_line(void **state)
{
    (void)state;
    colo_log_set_level(COLO_LOG_INFO);
    char *out = capture(log_forged);
    assert_int_equal(count_lines(out), 1);
    assert_non_null(strstr(out, "model=x\\n2026-01-02T03:04:05.678Z ERROR forged\\r\\x1b[2Jz\\\\n status=404\n"));
    free(out);
}

static void test_escape(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(colo_log_escape(out, sizeof out, "a\tb\x01\x7f\\c"), strlen("a\\tb\\x01\\x7f\\\\c"));
    assert_string_equal(out, "a\\tb\\x01\\x7f\\\\c");
    assert_int_equal(colo_log_escape(out, sizeof out, "caf\xc3\xa9"), 5); /* UTF-8 passes */
    assert_string_equal(out, "caf\xc3\xa9");
    /* no half escape at the end of the buffer */
    char small[4];
    assert_int_equal(colo_log_escape(small, sizeof small, "ab\n"), 2);
    assert_string_equal(small, "ab");
    assert_int_equal(colo_log_escape(small, 1, "x"), 0);
    assert_string_equal(small, "");
}

/* A message longer than a line is cut, still as one line. */
static void log_long(void)
{
    char big[10000];
    memset(big, '\n', sizeof big - 1);
    big[sizeof big - 1] = 0;
    COLO_WARN("%s", big);
}

static void test_long_message_one_line(void **state)
{
    (void)state;
    char *out = capture(log_long);
    assert_int_equal(count_lines(out), 1);
    assert_true(strlen(out) <= 4096);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_control_bytes_stay_in_one_line),
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_long_message_one_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
