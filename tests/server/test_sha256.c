/* SHA-256 against FIPS 180-4's examples and lengths around the padding
 * boundary (checked against sha256sum's answers), and the comparison. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/tenants/sha256.h"

static void hex_of(const char *s, size_t n, char hex[65])
{
    uint8_t d[32];
    colo_sha256(s, n, d);
    colo_sha256_hex(d, hex);
}

static void test_vectors(void **state)
{
    (void)state;
    char hex[65];
    hex_of("", 0, hex);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    hex_of("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 448 bits */
    hex_of(m, strlen(m), hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    char *a = malloc(1000000);
    assert_non_null(a);
    memset(a, 'a', 1000000);
    hex_of(a, 1000000, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(a);
    hex_of("test", 4, hex);
    assert_string_equal(hex, "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
}

/* Every length from 0 to 200 against sha256sum, when it is installed. */
static void test_lengths_against_sha256sum(void **state)
{
    (void)state;
    FILE *probe = popen("command -v sha256sum", "r");
    char path[256] = "";
    bool have = probe && fgets(path, sizeof path, probe) && path[0] == '/';
    if (probe)
        pclose(probe);
    if (!have)
        skip();
    char buf[201];
    for (int i = 0; i < 200; i++)
        buf[i] = (char)('a' + rand() % 26);
    for (int n = 0; n <= 200; n += (n < 130 ? 1 : 7)) {
        char cmd[400], want[65] = "", hex[65];
        snprintf(cmd, sizeof cmd, "printf '%%s' '%.*s' | sha256sum", n, buf);
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        assert_non_null(fgets(want, sizeof want, p));
        pclose(p);
        hex_of(buf, (size_t)n, hex);
        assert_string_equal(hex, want);
    }
}

static void test_equal(void **state)
{
    (void)state;
    uint8_t a[32], b[32];
    colo_sha256("key", 3, a);
    memcpy(b, a, 32);
    assert_true(colo_sha256_equal(a, b));
    for (int i = 0; i < 32; i++) {
        b[i] ^= 1;
        assert_false(colo_sha256_equal(a, b));
        b[i] ^= 1;
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_lengths_against_sha256sum),
        cmocka_unit_test(test_equal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
