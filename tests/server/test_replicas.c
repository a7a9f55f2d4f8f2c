/* Three colo-server replicas behind HAProxy (scripts/replicas-check.py):
 * under load from colo-loadtest, a SIGTERMed replica turns not-ready,
 * drains and exits 0 with no failed request, and a SIGKILLed one fails
 * only the requests it had in flight. Skipped where HAProxy or python3
 * is not installed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "server_fixture.h"

static bool have(const char *prog)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", prog);
    return system(cmd) == 0;
}

static void test_replicas_behind_haproxy(void **state)
{
    (void)state;
    if (!have("haproxy") || !have("python3")) {
        fprintf(stderr, "haproxy or python3 is not installed\n");
        skip();
    }
    srv_fixture f;
    assert_true(srv_tmpdir(&f));
    assert_true(srv_mkmodel(&f, "m.gguf", 4, 256, 512, 512));
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "python3 %s/scripts/replicas-check.py --build-dir %s --model %s/m.gguf --workdir %s/run "
             "--duration 12 >%s/out.txt 2>&1",
             COLO_SOURCE_DIR, COLO_BINARY_DIR, f.dir, f.dir, f.dir);
    int rc = system(cmd);
    snprintf(cmd, sizeof cmd, "cat %s/out.txt >&2", f.dir);
    if (system(cmd) != 0)
        fprintf(stderr, "(no output)\n");
    assert_true(WIFEXITED(rc));
    assert_int_equal(WEXITSTATUS(rc), 0);
    srv_cleanup(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replicas_behind_haproxy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
