/* Fault injection (runtime/fault.h): a fixed table of entries, matched by
 * kind and target, with atomic counters so that any thread may check. */
#include "runtime/fault.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/log.h"

#define MAX_FAULTS 16
#define MAX_TARGET 64

typedef struct fault {
    colo_fault_kind kind;
    char target[MAX_TARGET];
    long skip, count; /* count 0 = unlimited */
    atomic_long calls;
} fault;

static fault g_faults[MAX_FAULTS];
static atomic_int g_n_faults;
static atomic_long g_fired[COLO_FAULT_KINDS];

static const char *kind_names[COLO_FAULT_KINDS] = {"arena", "alloc", "launch", "blas", "poison", "stall", "kill", "gone"};

static bool parse_long(const char *s, size_t n, long *out)
{
    if (n == 0 || n > 18)
        return false;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

/* One entry "KIND@TARGET[:skip=N][:count=M]" of n bytes at s. */
static colo_status parse_entry(const char *s, size_t n, fault *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    f->count = 1;
    const char *at = memchr(s, '@', n);
    int k = -1;
    for (int i = 0; at && i < COLO_FAULT_KINDS; i++)
        if (strlen(kind_names[i]) == (size_t)(at - s) && !memcmp(s, kind_names[i], (size_t)(at - s)))
            k = i;
    if (k < 0) {
        char kinds[128] = "";
        for (int i = 0; i < COLO_FAULT_KINDS; i++)
            snprintf(kinds + strlen(kinds), sizeof kinds - strlen(kinds), "%s%s", i ? ", " : "", kind_names[i]);
        colo_set_err(err, errlen, "COLO_FAULTS: '%.*s': want KIND@TARGET with KIND one of %s", (int)n, s, kinds);
        return COLO_EINVAL;
    }
    f->kind = (colo_fault_kind)k;
    const char *t = at + 1, *end = s + n;
    const char *colon = memchr(t, ':', (size_t)(end - t));
    size_t tl = (size_t)((colon ? colon : end) - t);
    if (tl == 0 || tl >= MAX_TARGET) {
        colo_set_err(err, errlen, "COLO_FAULTS: '%.*s': the target must be a model name of 1-%d characters", (int)n,
                     s, MAX_TARGET - 1);
        return COLO_EINVAL;
    }
    memcpy(f->target, t, tl);
    while (colon) {
        const char *opt = colon + 1;
        colon = memchr(opt, ':', (size_t)(end - opt));
        size_t ol = (size_t)((colon ? colon : end) - opt);
        bool ok = false;
        if (ol > 5 && !memcmp(opt, "skip=", 5))
            ok = parse_long(opt + 5, ol - 5, &f->skip);
        else if (ol > 6 && !memcmp(opt, "count=", 6))
            ok = parse_long(opt + 6, ol - 6, &f->count);
        if (!ok) {
            colo_set_err(err, errlen, "COLO_FAULTS: '%.*s': unknown option '%.*s' (skip=N, count=M)", (int)n, s,
                         (int)ol, opt);
            return COLO_EINVAL;
        }
    }
    return COLO_OK;
}

colo_status colo_fault_configure(const char *spec, char *err, size_t errlen)
{
    atomic_store(&g_n_faults, 0);
    for (int i = 0; i < COLO_FAULT_KINDS; i++)
        atomic_store(&g_fired[i], 0);
    if (!spec || !*spec)
        return COLO_OK;
    static fault parsed[MAX_FAULTS];
    int n = 0;
    const char *p = spec;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (n == MAX_FAULTS) {
            colo_set_err(err, errlen, "COLO_FAULTS: more than %d entries", MAX_FAULTS);
            return COLO_EINVAL;
        }
        colo_status st = parse_entry(p, len, &parsed[n], err, errlen);
        if (st != COLO_OK)
            return st;
        n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    for (int i = 0; i < n; i++) {
        g_faults[i].kind = parsed[i].kind;
        memcpy(g_faults[i].target, parsed[i].target, MAX_TARGET);
        g_faults[i].skip = parsed[i].skip;
        g_faults[i].count = parsed[i].count;
        atomic_store(&g_faults[i].calls, 0);
    }
    atomic_store(&g_n_faults, n);
    return COLO_OK;
}

colo_status colo_fault_init(char *err, size_t errlen)
{
    const char *spec = getenv("COLO_FAULTS");
    colo_status st = colo_fault_configure(spec, err, errlen);
    if (st == COLO_OK && spec && *spec)
        COLO_WARN("fault injection on: COLO_FAULTS=%s", spec);
    return st;
}

bool colo_fault_hit(colo_fault_kind kind, const char *target)
{
    int n = atomic_load_explicit(&g_n_faults, memory_order_relaxed);
    if (n == 0 || !target)
        return false;
    for (int i = 0; i < n; i++) {
        fault *f = &g_faults[i];
        if (f->kind != kind || strcmp(f->target, target))
            continue;
        long c = atomic_fetch_add(&f->calls, 1);
        if (c >= f->skip && (f->count == 0 || c < f->skip + f->count)) {
            atomic_fetch_add(&g_fired[kind], 1);
            COLO_WARN("injected fault: %s on %s (call %ld)", kind_names[kind], target, c + 1);
            return true;
        }
    }
    return false;
}

long colo_fault_fired(colo_fault_kind kind)
{
    return (unsigned)kind < COLO_FAULT_KINDS ? atomic_load(&g_fired[kind]) : 0;
}
