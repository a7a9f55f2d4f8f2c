/* The JSON Schema compiler and its automaton: documents that validate are
 * accepted byte by byte (every prefix alive, only the whole one done), ones
 * that do not are refused, random walks through the automaton always end
 * in a document jansson parses and that keeps the schema's rules, and
 * what colo does not support is refused with the keyword and where. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/sample/json_schema.h"
#include "tests/test_seed.h"

static colo_schema *compile(const char *schema)
{
    char err[256] = "";
    colo_schema *g = colo_schema_compile(schema, strlen(schema), err, sizeof err);
    if (!g)
        fail_msg("refused %s: %s", schema, err);
    return g;
}

/* 1: accepted and done, 0: refused, -1: accepted but not done */
static int run(const colo_schema *g, const char *doc)
{
    colo_schema_state s;
    colo_schema_state_init(g, &s);
    size_t n = strlen(doc);
    for (size_t k = 0; k < n; k++) {
        if (colo_schema_done(&s))
            return 0;
        if (!colo_schema_feed(g, &s, doc + k, 1))
            return 0;
    }
    return colo_schema_done(&s) ? 1 : -1;
}

typedef struct expect {
    const char *doc;
    int want;
} expect;

static void check(const char *schema, const expect *e, size_t n)
{
    colo_schema *g = compile(schema);
    for (size_t i = 0; i < n; i++) {
        int got = run(g, e[i].doc);
        if (got != e[i].want)
            fail_msg("schema %s, document %s: got %d, want %d", schema, e[i].doc, got, e[i].want);
    }
    colo_schema_free(g);
}

static void test_object_properties(void **state)
{
    (void)state;
    const char *schema = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                         "\"age\":{\"type\":\"integer\"},\"nick\":{\"type\":\"string\"},"
                         "\"ok\":{\"type\":\"boolean\"}},\"required\":[\"name\",\"age\"],"
                         "\"additionalProperties\":false}";
    static const expect e[] = {
        {"{\"name\":\"Ann\",\"age\":31}", 1},
        {"{ \"name\": \"Ann\", \"age\": -4, \"ok\": true }", 1},
        {"{\"name\":\"Ann\",\"age\":31,\"nick\":\"A\",\"ok\":false}", 1},
        {"{\"name\":\"Ann\",\"age\":31,\"nick\":\"A\"", -1},
        {"{\"name\":\"Ann\"}", 0},                 /* age is required */
        {"{\"age\":31,\"name\":\"Ann\"}", 0},      /* the schema's order */
        {"{\"name\":\"Ann\",\"age\":3.5}", 0},      /* an integer */
        {"{\"name\":\"Ann\",\"age\":31,\"x\":1}", 0}, /* no other property */
        {"{\"name\":\"Ann\",\"age\":031}", 0},
        {"{\"name\":\"Ann\",\"age\":31,}", 0},
        {"{\"name\":\"Ann\",\"age\":31} ", 0},     /* nothing after the document */
        {" {\"name\":\"Ann\",\"age\":31}", 0},
        {"{\"name\":\"Ann\",     \"age\":31}", 0}, /* whitespace is limited */
        {"{\"nam\":\"Ann\",\"age\":31}", 0},
        {"{\"name\":\"A\\u00e9\\n\",\"age\":0}", 1},
        {"{\"name\":\"A\nB\",\"age\":0}", 0},      /* control characters are escaped */
        {"{\"name\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\",\"age\":0}", 1},
        {"{\"name\":\"\xed\xa0\x80\",\"age\":0}", 0},     /* a surrogate in UTF-8 */
        {"{\"name\":\"\xe0\x80\xaf\",\"age\":0}", 0},     /* overlong */
        {"{\"name\":\"\xf4\x90\x80\x80\",\"age\":0}", 0}, /* past U+10FFFF */
        {"{\"name\":\"\xc3\",\"age\":0}", 0},             /* cut short */
    };
    check(schema, e, sizeof e / sizeof *e);
}

static void test_enums_arrays_numbers(void **state)
{
    (void)state;
    const char *schema = "{\"type\":\"object\",\"properties\":{\"c\":{\"enum\":[\"red\",\"green\",1,12,null]},"
                         "\"k\":{\"const\":\"x\"},\"xs\":{\"type\":\"array\",\"items\":{\"type\":\"number\"},"
                         "\"minItems\":1,\"maxItems\":3}},\"required\":[\"c\",\"k\",\"xs\"]}";
    static const expect e[] = {
        {"{\"c\":\"red\",\"k\":\"x\",\"xs\":[1]}", 1},
        {"{\"c\":12,\"k\":\"x\",\"xs\":[1.5e3, -0.25, 7]}", 1},
        {"{\"c\":1,\"k\":\"x\",\"xs\":[0]}", 1},
        /* 16 digits before the point, 16 after, 2 in the exponent */
        {"{\"c\":1,\"k\":\"x\",\"xs\":[-1234567890123456.1234567890123456E-12]}", 1},
        {"{\"c\":1,\"k\":\"x\",\"xs\":[12345678901234567]}", 0},
        {"{\"c\":1,\"k\":\"x\",\"xs\":[1.12345678901234567]}", 0},
        {"{\"c\":1,\"k\":\"x\",\"xs\":[1e123]}", 0},
        {"{\"c\":1,\"k\":\"x\",\"xs\":[-0.5,0e+1]}", 1},
        {"{\"c\":1,\"k\":\"x\",\"xs\":[-01]}", 0},
        {"{\"c\":1,\"k\":\"x\",\"xs\":[00]}", 0},
        {"{\"c\":null,\"k\":\"x\",\"xs\":[0]}", 1},
        {"{\"c\":123,\"k\":\"x\",\"xs\":[0]}", 0},
        {"{\"c\":\"blue\",\"k\":\"x\",\"xs\":[0]}", 0},
        {"{\"c\":\"red\",\"k\":\"y\",\"xs\":[0]}", 0},
        {"{\"c\":\"red\",\"k\":\"x\",\"xs\":[]}", 0},        /* minItems */
        {"{\"c\":\"red\",\"k\":\"x\",\"xs\":[1,2,3,4]}", 0}, /* maxItems */
        {"{\"c\":\"red\",\"k\":\"x\",\"xs\":[1.]}", 0},
        {"{\"c\":\"red\",\"k\":\"x\",\"xs\":[01]}", 0},
        {"{\"c\":\"red\",\"k\":\"x\",\"xs\":[1e]}", 0},
    };
    check(schema, e, sizeof e / sizeof *e);
}

static bool accepts_after(const colo_schema *g, const char *prefix, char c)
{
    colo_schema_state s;
    colo_schema_state_init(g, &s);
    assert_true(colo_schema_feed(g, &s, prefix, strlen(prefix)));
    return colo_schema_accepts(g, &s, &c, 1);
}

static unsigned long long rng = 88172645463325252ull;
static unsigned rnd(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (unsigned)(rng >> 11);
}

/* n random digits after prefix, the first not 0 */
static void digits(char *out, const char *prefix, int n)
{
    size_t k = strlen(prefix);
    memcpy(out, prefix, k);
    for (int i = 0; i < n; i++)
        out[k + (size_t)i] = (char)('0' + (i ? rnd() % 10 : 1 + rnd() % 9));
    out[k + (size_t)n] = 0;
}

/* Each part of a number stops at its bound (16, 16, 2 digits) and what
 * follows it is still allowed; a leading zero takes no digit after it. */
static void test_number_bounds(void **state)
{
    (void)state;
    rng ^= colo_test_seed("test_json_schema", 91) * 2654435761ull;
    colo_schema *g = compile("{\"type\":\"object\",\"properties\":{\"i\":{\"type\":\"integer\"},"
                             "\"x\":{\"type\":\"number\"}}}");
    char p[96], d = (char)('0' + rnd() % 10);
    for (int it = 0; it < 20; it++) {
        digits(p, "{\"i\":-", COLO_JSON_MAX_INT_DIGITS - 1);
        assert_true(accepts_after(g, p, d));
        digits(p, "{\"i\":", COLO_JSON_MAX_INT_DIGITS);
        assert_false(accepts_after(g, p, d)); /* a 17th digit */
        assert_true(accepts_after(g, p, '}'));
        assert_false(accepts_after(g, p, '.')); /* an integer */
        digits(p, "{\"x\":", COLO_JSON_MAX_INT_DIGITS);
        assert_false(accepts_after(g, p, d));
        assert_true(accepts_after(g, p, '.'));
        assert_true(accepts_after(g, p, 'e'));
        digits(p, "{\"x\":0.", COLO_JSON_MAX_FRAC_DIGITS);
        assert_false(accepts_after(g, p, d));
        assert_true(accepts_after(g, p, 'E'));
        digits(p, "{\"i\":1,\"x\":1e-", COLO_JSON_MAX_EXP_DIGITS);
        assert_false(accepts_after(g, p, d));
        assert_true(accepts_after(g, p, '}'));
        assert_false(accepts_after(g, "{\"i\":0", d));
        assert_false(accepts_after(g, "{\"x\":-0", d));
        assert_true(accepts_after(g, "{\"x\":-0", '.'));
    }
    colo_schema_free(g);
}

/* Between two tokens: nothing, one space, or one newline and at most 16
 * spaces; nothing before or after the document. */
static void test_whitespace(void **state)
{
    (void)state;
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                         "\"b\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},\"required\":[\"a\"]}";
    static const expect e[] = {
        {"{\n  \"a\": 1,\n  \"b\": [\n    \"x\"\n  ]\n}", 1},
        {"{ \"a\" : 1 , \"b\" : [ ] }", 1},
        {"{\"a\":\n                1}", 1}, /* 16 spaces */
        {"{\"a\":\n                 1}", 0}, /* 17 */
        {"{\"a\":1\n\n}", 0},                /* a second newline */
        {"{\"a\":1\n,\n\n\"b\":[]}", 0},
        {"{\"a\":  1}", 0},                  /* a second space */
        {"{\"a\": \n1}", 0},
        {"{\"a\":\t1}", 0},
        {"{\"a\":1\r\n}", 0},
        {"\n{\"a\":1}", 0},
        {"{\"a\":1}\n", 0},
    };
    check(schema, e, sizeof e / sizeof *e);
}

/* n random plain characters (letters, digits, spaces, an accented letter
 * and an escape, each one character) between quotes, after prefix. */
static char *text_of(const char *prefix, int n, const char *suffix)
{
    size_t k = strlen(prefix);
    char *t = malloc(k + 3 * (size_t)n + strlen(suffix) + 3);
    assert_non_null(t);
    char *q = t + sprintf(t, "%s\"", prefix);
    for (int i = 0; i < n; i++) {
        unsigned r = rnd() % 40;
        if (r == 0)
            q += sprintf(q, "\xc3\xa9");
        else if (r == 1)
            q += sprintf(q, "\\n");
        else
            *q++ = "abcdefghijklmnopqrstuvwxyz0123456789 ,."[r % 39];
    }
    sprintf(q, "\"%s", suffix);
    return t;
}

/* "[0,1,...]" of n items after prefix */
static char *items_of(const char *prefix, int n, const char *suffix)
{
    char *t = malloc(strlen(prefix) + 8 * (size_t)n + strlen(suffix) + 3);
    assert_non_null(t);
    char *q = t + sprintf(t, "%s[", prefix);
    for (int i = 0; i < n; i++)
        q += sprintf(q, i ? ",%u" : "%u", rnd() % 1000);
    sprintf(q, "]%s", suffix);
    return t;
}

/* run() on a document made by make(prefix, n, suffix) */
static int run_made(const colo_schema *g, char *(*make)(const char *, int, const char *), const char *prefix, int n,
                    const char *suffix)
{
    char *doc = make(prefix, n, suffix);
    int r = run(g, doc);
    free(doc);
    return r;
}

/* Where the schema leaves a length open, the default bound holds: 256
 * characters, 16 items (raised to a minLength, minItems or a pattern's
 * shortest match); a bound the schema sets wins; options change the
 * defaults, 0 removes them; json_object and {} take them too. */
static void test_default_bounds(void **state)
{
    (void)state;
    rng ^= colo_test_seed("test_json_schema", 303) * 2654435761ull;
    const int L = COLO_SCHEMA_DEFAULT_MAX_LENGTH, N = COLO_SCHEMA_DEFAULT_MAX_ITEMS;
    const char *open_schema = "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\"},"
                              "\"p\":{\"type\":\"string\",\"pattern\":\"^[a-z0-9 ,.]+$\"},"
                              "\"xs\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}},\"any\":{}}}";
    colo_schema *g = compile(open_schema);
    assert_int_equal(run_made(g, text_of, "{\"s\":", L, "}"), 1);
    assert_int_equal(run_made(g, text_of, "{\"s\":", L + 1, "}"), 0);
    assert_int_equal(run_made(g, text_of, "{\"any\":", L, "}"), 1);
    assert_int_equal(run_made(g, text_of, "{\"any\":", L + 1, "}"), 0);
    assert_int_equal(run_made(g, items_of, "{\"xs\":", N, "}"), 1);
    assert_int_equal(run_made(g, items_of, "{\"xs\":", N + 1, "}"), 0);
    assert_int_equal(run_made(g, items_of, "{\"any\":", N, "}"), 1);
    assert_int_equal(run_made(g, items_of, "{\"any\":", N + 1, "}"), 0);
    char pat[300] = "{\"p\":\"";
    memset(pat + 6, 'a', (size_t)L);
    strcpy(pat + 6 + L, "\"}");
    assert_int_equal(run(g, pat), 1);
    memset(pat + 6, 'a', (size_t)L + 1);
    strcpy(pat + 6 + L + 1, "\"}");
    assert_int_equal(run(g, pat), 0);
    colo_schema_free(g);

    /* set by the schema, or raised by its minimum */
    g = compile("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":1000},"
                "\"m\":{\"type\":\"string\",\"minLength\":300},\"xs\":{\"type\":\"array\",\"maxItems\":40},"
                "\"ys\":{\"type\":\"array\",\"minItems\":20}}}");
    assert_int_equal(run_made(g, text_of, "{\"s\":", 1000, "}"), 1);
    assert_int_equal(run_made(g, text_of, "{\"m\":", 300, "}"), 1);
    assert_int_equal(run_made(g, text_of, "{\"m\":", 301, "}"), 0);
    assert_int_equal(run_made(g, items_of, "{\"xs\":", 40, "}"), 1);
    assert_int_equal(run_made(g, items_of, "{\"ys\":", 20, "}"), 1);
    assert_int_equal(run_made(g, items_of, "{\"ys\":", 21, "}"), 0);
    colo_schema_free(g);

    /* other defaults, and none */
    char err[256] = "";
    colo_schema_options small = {.default_max_length = 4, .default_max_items = 2}, none = {0, 0};
    const char *zip = "{\"type\":\"object\",\"properties\":{\"z\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}}}";
    g = colo_schema_compile_opts(open_schema, strlen(open_schema), &small, err, sizeof err);
    assert_non_null(g);
    assert_int_equal(run_made(g, text_of, "{\"s\":", 4, "}"), 1);
    assert_int_equal(run_made(g, text_of, "{\"s\":", 5, "}"), 0);
    assert_int_equal(run_made(g, items_of, "{\"xs\":", 2, "}"), 1);
    assert_int_equal(run_made(g, items_of, "{\"xs\":", 3, "}"), 0);
    colo_schema_free(g);
    g = colo_schema_compile_opts(zip, strlen(zip), &small, err, sizeof err);
    assert_non_null(g);
    assert_int_equal(run(g, "{\"z\":\"12345\"}"), 1); /* the pattern needs 5 */
    colo_schema_free(g);
    g = colo_schema_compile_opts(open_schema, strlen(open_schema), &none, err, sizeof err);
    assert_non_null(g);
    assert_int_equal(run_made(g, text_of, "{\"s\":", 3000, "}"), 1);
    assert_int_equal(run_made(g, items_of, "{\"any\":", 100, "}"), 1);
    colo_schema_free(g);

    /* json_object */
    colo_schema *any = colo_schema_any_object();
    assert_non_null(any);
    assert_int_equal(run_made(any, text_of, "{\"k\":", L, "}"), 1);
    assert_int_equal(run_made(any, text_of, "{\"k\":", L + 1, "}"), 0);
    assert_int_equal(run_made(any, items_of, "{\"k\":", N, "}"), 1);
    assert_int_equal(run_made(any, items_of, "{\"k\":", N + 1, "}"), 0);
    colo_schema_free(any);
    any = colo_schema_any_object_opts(&small);
    assert_non_null(any);
    assert_int_equal(run(any, "{\"a\":1,\"b\":[\"abcd\",2]}"), 1);
    assert_int_equal(run(any, "{\"a\":1,\"b\":2,\"c\":3}"), 0);
    assert_int_equal(run(any, "{\"a\":\"abcde\"}"), 0);
    colo_schema_free(any);
}

/* With a pattern and a bound, a character is taken only when the pattern
 * can still end within the bound. */
static void test_pattern_room(void **state)
{
    (void)state;
    colo_schema *g = compile("{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"string\",\"maxLength\":3,"
                             "\"pattern\":\"^(a|bbbb|cd)+$\"}}}");
    assert_true(accepts_after(g, "{\"p\":\"", 'a'));
    assert_false(accepts_after(g, "{\"p\":\"", 'b')); /* bbbb cannot fit */
    assert_true(accepts_after(g, "{\"p\":\"a", 'c'));
    assert_false(accepts_after(g, "{\"p\":\"aa", 'c')); /* nor cd after two */
    assert_true(accepts_after(g, "{\"p\":\"aa", 'a'));
    assert_int_equal(run(g, "{\"p\":\"acd\"}"), 1);
    colo_schema_free(g);
}

static void test_anyof_refs_nullable(void **state)
{
    (void)state;
    const char *schema =
        "{\"type\":\"object\",\"$defs\":{\"pt\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"},"
        "\"y\":{\"type\":\"number\"}},\"required\":[\"x\",\"y\"],\"additionalProperties\":false}},"
        "\"properties\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/pt\"},{\"type\":\"string\"},"
        "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\"}},\"required\":[\"x\"]}]},"
        "\"b\":{\"type\":[\"string\",\"null\"]},\"c\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/pt\"}}},"
        "\"required\":[\"a\",\"b\",\"c\"],\"additionalProperties\":false}";
    static const expect e[] = {
        {"{\"a\":{\"x\":1,\"y\":2},\"b\":null,\"c\":[]}", 1},
        {"{\"a\":{\"x\":\"one\"},\"b\":\"s\",\"c\":[{\"x\":0,\"y\":0},{\"x\":1,\"y\":-1}]}", 1},
        {"{\"a\":\"text\",\"b\":null,\"c\":[]}", 1},
        {"{\"a\":{\"x\":1},\"b\":null,\"c\":[]}", 0},       /* the number form needs y */
        {"{\"a\":{\"x\":\"s\",\"y\":2},\"b\":null,\"c\":[]}", 0},
        {"{\"a\":true,\"b\":null,\"c\":[]}", 0},
        {"{\"a\":\"t\",\"b\":1,\"c\":[]}", 0},
        {"{\"a\":\"t\",\"b\":null,\"c\":[{\"x\":1}]}", 0},
    };
    check(schema, e, sizeof e / sizeof *e);
}

static void test_strings(void **state)
{
    (void)state;
    const char *schema = "{\"type\":\"object\",\"properties\":{\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}(-[0-9]{4})?$\"},"
                         "\"code\":{\"type\":\"string\",\"pattern\":\"[A-Z]+x\"},"
                         "\"s\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":3},"
                         "\"any\":{},\"obj\":{\"type\":\"object\"}},"
                         "\"required\":[\"zip\",\"code\",\"s\",\"any\",\"obj\"]}";
    static const expect e[] = {
        {"{\"zip\":\"12345\",\"code\":\"ABx\",\"s\":\"ab\",\"any\":[1,{\"q\":null}],\"obj\":{}}", 1},
        {"{\"zip\":\"12345-6789\",\"code\":\"..Zx..\",\"s\":\"\xc3\xa9\xc3\xa9\xc3\xa9\",\"any\":-2,\"obj\":{\"a\":[]}}", 1},
        {"{\"zip\":\"1234\",\"code\":\"ABx\",\"s\":\"ab\",\"any\":1,\"obj\":{}}", 0},
        {"{\"zip\":\"123456\",\"code\":\"ABx\",\"s\":\"ab\",\"any\":1,\"obj\":{}}", 0},
        {"{\"zip\":\"12345-678\",\"code\":\"ABx\",\"s\":\"ab\",\"any\":1,\"obj\":{}}", 0},
        {"{\"zip\":\"12345\",\"code\":\"abx\",\"s\":\"ab\",\"any\":1,\"obj\":{}}", 0},
        {"{\"zip\":\"12345\",\"code\":\"ABx\",\"s\":\"a\",\"any\":1,\"obj\":{}}", 0},
        {"{\"zip\":\"12345\",\"code\":\"ABx\",\"s\":\"abcd\",\"any\":1,\"obj\":{}}", 0},
        {"{\"zip\":\"12345\",\"code\":\"ABx\",\"s\":\"ab\",\"any\":1,\"obj\":[]}", 0},
        {"{\"zip\":\"12345\",\"code\":\"ABx\",\"s\":\"ab\",\"any\":tru,\"obj\":{}}", 0},
    };
    check(schema, e, sizeof e / sizeof *e);
}

static void test_refusals(void **state)
{
    (void)state;
    static const struct {
        const char *schema, *msg;
    } r[] = {
        {"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"object\",\"patternProperties\":{}}}}",
         "unsupported keyword 'patternProperties' at #/properties/x"},
        {"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"format\":\"date\"}}}",
         "unsupported keyword 'format' at #/properties/x"},
        {"{\"type\":\"object\",\"properties\":{\"x\":{\"allOf\":[]}}}", "unsupported keyword 'allOf'"},
        {"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\",\"minimum\":3}}}",
         "unsupported keyword 'minimum'"},
        {"{\"type\":\"string\"}", "the root must be an object"},
        {"{\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"#/$defs/n\"}},\"$defs\":{\"n\":{\"type\":\"object\","
         "\"properties\":{\"c\":{\"$ref\":\"#/$defs/n\"}}}}}",
         "recursive $ref '#/$defs/n'"},
        {"{\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"#/$defs/none\"}}}", "names no definition"},
        {"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"strin\"}}}", "unknown type 'strin'"},
        {"{\"type\":\"object\",\"required\":[\"y\"],\"properties\":{\"x\":{}}}", "'required' names 'y'"},
        {"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"pattern\":\"(?=a)\"}}}", "pattern '(?=a)'"},
        {"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}}}",
         "'maxItems' is less than 'minItems'"},
        {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}", "additionalProperties"},
        {"{\"type\":\"object\",", "not JSON"},
    };
    for (size_t i = 0; i < sizeof r / sizeof *r; i++) {
        char err[256] = "";
        colo_schema *g = colo_schema_compile(r[i].schema, strlen(r[i].schema), err, sizeof err);
        if (g)
            fail_msg("accepted %s", r[i].schema);
        if (!strstr(err, r[i].msg))
            fail_msg("%s: message '%s' lacks '%s'", r[i].schema, err, r[i].msg);
    }
}

/* A pattern's groups nest at most 32 deep; deeper ones are refused, not
 * recursed into (20,000 levels overflowed the stack). */
static void test_pattern_nesting(void **state)
{
    (void)state;
    static const int depths[] = {32, 33, 20000};
    for (size_t i = 0; i < sizeof depths / sizeof *depths; i++) {
        int d = depths[i];
        const char *head = "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"pattern\":\"^";
        const char *tail = "$\"}}}";
        size_t n = strlen(head) + 2 * (size_t)d + 1 + strlen(tail) + 1;
        char *schema = malloc(n);
        assert_non_null(schema);
        char *p = schema + sprintf(schema, "%s", head);
        memset(p, '(', (size_t)d), p += d;
        *p++ = 'a';
        memset(p, ')', (size_t)d), p += d;
        strcpy(p, tail);
        char err[256] = "";
        colo_schema *g = colo_schema_compile(schema, strlen(schema), err, sizeof err);
        if (d <= 32) {
            if (!g)
                fail_msg("%d levels refused: %s", d, err);
            colo_schema_state s;
            colo_schema_state_init(g, &s);
            assert_true(colo_schema_accepts(g, &s, "{\"x\":\"a\"}", 9));
            colo_schema_free(g);
        } else {
            if (g)
                fail_msg("%d levels accepted", d);
            if (!strstr(err, "nests groups too deeply (at most 32 levels)"))
                fail_msg("%d levels: message '%s'", d, err);
        }
        free(schema);
    }
}

/* Random walks: at every step some byte is allowed (or the document is
 * done), and what comes out parses. */

static json_t *walk(const colo_schema *g, char *buf, size_t cap)
{
    colo_schema_state s;
    colo_schema_state_init(g, &s);
    size_t n = 0;
    while (!colo_schema_done(&s)) {
        char allowed[128];
        int na = 0;
        for (int c = 0x09; c < 0x7F; c++) {
            char ch = (char)c;
            if ((c >= 0x20 || c == '\n') && colo_schema_accepts(g, &s, &ch, 1))
                allowed[na++] = ch;
        }
        if (na == 0)
            fail_msg("stuck after %.*s", (int)n, buf);
        /* lean towards ending things, so that walks finish */
        char pick = allowed[rnd() % (unsigned)na];
        if (n > cap / 8 && rnd() % 4) {
            for (int i = 0; i < na; i++)
                if (strchr("\"]},0", allowed[i]))
                    pick = allowed[i];
        }
        if (n + 1 >= cap)
            fail_msg("no end after %zu bytes", n);
        buf[n++] = pick;
        assert_true(colo_schema_feed(g, &s, &pick, 1));
    }
    buf[n] = 0;
    json_error_t je;
    json_t *doc = json_loads(buf, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!doc && strstr(buf, "\\u0000")) {
        /* jansson takes no NUL in an object key, which JSON allows: the
         * same document with \u0001 in its place must parse */
        for (char *q = buf; (q = strstr(q, "\\u0000")); q += 6)
            q[5] = '1';
        doc = json_loads(buf, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    }
    if (!doc)
        fail_msg("walk produced unparsable %s (%s)", buf, je.text);
    return doc;
}

static void test_random_walks(void **state)
{
    (void)state;
    rng ^= colo_test_seed("test_json_schema", 245) * 2654435761ull;
    const char *schema =
        "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\","
        "\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"maxItems\":4},\"kind\":{\"anyOf\":[{\"type\":\"null\"},"
        "{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"number\"}},\"required\":[\"v\"]}]},"
        "\"code\":{\"type\":\"string\",\"pattern\":\"^[a-f]{2,4}$\"},\"s\":{\"type\":\"string\",\"maxLength\":5}},"
        "\"required\":[\"id\",\"tags\",\"kind\",\"code\"]}";
    colo_schema *g = compile(schema);
    char buf[4096];
    for (int it = 0; it < 200; it++) {
        json_t *doc = walk(g, buf, sizeof buf);
        /* the schema's rules, checked on the parsed document */
        assert_true(json_is_object(doc));
        assert_true(json_is_integer(json_object_get(doc, "id")));
        json_t *tags = json_object_get(doc, "tags");
        assert_true(json_is_array(tags) && json_array_size(tags) <= 4);
        size_t i;
        json_t *t;
        json_array_foreach(tags, i, t)
        {
            assert_true(json_is_string(t));
            assert_non_null(strchr("abc", json_string_value(t)[0]));
            assert_int_equal(strlen(json_string_value(t)), 1);
        }
        json_t *k = json_object_get(doc, "kind");
        assert_true(json_is_null(k) || json_is_number(json_object_get(k, "v")));
        const char *code = json_string_value(json_object_get(doc, "code"));
        assert_non_null(code);
        assert_true(strlen(code) >= 2 && strlen(code) <= 4 && strspn(code, "abcdef") == strlen(code));
        json_t *s = json_object_get(doc, "s");
        if (s)
            assert_true(json_is_string(s) && strlen(json_string_value(s)) <= 5 * 4);
        json_decref(doc);
    }
    colo_schema_free(g);
    /* json_object: any object */
    colo_schema *any = colo_schema_any_object();
    assert_non_null(any);
    assert_int_equal(run(any, "{\"a\":[1,{\"b\":null}]}"), 1);
    assert_int_equal(run(any, "[1]"), 0);
    for (int it = 0; it < 50; it++)
        json_decref(walk(any, buf, sizeof buf));
    colo_schema_free(any);
}

/* A writer that never wants to stop still stops: on every schema of the
 * sets in tests/data (the ordinary ones set no length), a walk that takes
 * any byte but one that closes a string, an array or an object whenever it
 * can reaches a whole document, in bounded bytes, that parses. Before the
 * default bounds it wrote one string or array for ever. */
static void test_every_walk_ends(void **state)
{
    (void)state;
    static const char *const sets[] = {"tests/data/json_schemas_ordinary.json", "tests/data/json_schemas.json"};
    char alphabet[97] = "\n"; /* and printable ASCII */
    for (int ch = 0x20; ch < 0x7F; ch++)
        alphabet[ch - 0x1F] = (char)ch;
    enum { CAP = 1 << 17 };
    char *buf = malloc(CAP);
    assert_non_null(buf);
    for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", COLO_SOURCE_DIR, sets[si]);
        json_error_t je;
        json_t *cases = json_load_file(path, 0, &je);
        if (!cases)
            fail_msg("%s: %s", path, je.text);
        size_t i;
        json_t *c;
        json_array_foreach(cases, i, c)
        {
            char *text = json_dumps(json_object_get(c, "schema"), JSON_COMPACT);
            assert_non_null(text);
            colo_schema *g = compile(text);
            colo_schema_state s;
            colo_schema_state_init(g, &s);
            size_t n = 0;
            while (!colo_schema_done(&s)) {
                char keep[sizeof alphabet], close[4];
                int nk = 0, nc = 0;
                for (const char *a = alphabet; *a; a++)
                    if (colo_schema_accepts(g, &s, a, 1)) {
                        if (strchr("\"]}", *a))
                            close[nc++] = *a;
                        else
                            keep[nk++] = *a;
                    }
                if (!nk && !nc)
                    fail_msg("%s: stuck after %.*s", json_string_value(json_object_get(c, "name")), (int)n, buf);
                if (n + 1 >= CAP)
                    fail_msg("%s: no end after %zu bytes", json_string_value(json_object_get(c, "name")), n);
                buf[n] = nk ? keep[rnd() % (unsigned)nk] : close[rnd() % (unsigned)nc];
                assert_true(colo_schema_feed(g, &s, &buf[n], 1));
                n++;
            }
            buf[n] = 0;
            json_t *doc = json_loads(buf, 0, &je);
            if (!doc)
                fail_msg("%s: unparsable %s (%s)", json_string_value(json_object_get(c, "name")), buf, je.text);
            json_decref(doc);
            colo_schema_free(g);
            free(text);
        }
        json_decref(cases);
    }
    free(buf);
}

/* response_format json_object: the answer's first token is the object's
 * brace, never whitespace (nor anything else), and nothing follows the
 * closing one. */
static void test_json_object_start(void **state)
{
    (void)state;
    static const char *const toks[] = {"{", " {", "\n{", "\n", " ", "\t", "{\"", "{\n", "[", "\"a\"", "}", "\r\n"};
    enum { V = sizeof toks / sizeof *toks };
    const char *bytes[V];
    uint16_t lens[V];
    for (int i = 0; i < V; i++)
        bytes[i] = toks[i], lens[i] = (uint16_t)strlen(toks[i]);
    colo_schema_vocab *v = colo_schema_vocab_create(bytes, lens, NULL, V);
    assert_non_null(v);
    colo_schema *any = colo_schema_any_object();
    assert_non_null(any);
    uint8_t allowed[V];
    colo_schema_state s;
    colo_schema_state_init(any, &s);
    assert_int_equal(colo_schema_mask(any, &s, v, allowed), 3);
    for (int i = 0; i < V; i++)
        if (allowed[i] != (toks[i][0] == '{'))
            fail_msg("token '%s': allowed %d first", toks[i], allowed[i]);
    assert_true(colo_schema_feed(any, &s, "{}", 2));
    assert_true(colo_schema_done(&s));
    assert_int_equal(colo_schema_mask(any, &s, v, allowed), 0);
    colo_schema_vocab_free(v);
    colo_schema_free(any);
}

/* The vocabulary mask (with its shortcuts) allows exactly the tokens the
 * automaton accepts, at every state of random walks, for a vocabulary of
 * every single byte and random strings of structural, plain and UTF-8 bytes. */
static void test_mask_matches_automaton(void **state)
{
    (void)state;
    enum { V = 3000 };
    static char buf[V][8];
    const char *bytes[V];
    uint16_t lens[V];
    bool special[V];
    static const char alphabet[] = " \n\"{}[],:-.0123456789eEtrufalsnbcdxyz\\#";
    static const char *const utf8[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xed\xa0\x80", "\xc3"};
    for (int i = 0; i < V; i++) {
        int n = 0;
        if (i < 256)
            buf[i][n++] = (char)i;
        else {
            int len = 1 + (int)(rnd() % 6);
            while (n < len) {
                if (rnd() % 8 == 0) {
                    const char *u = utf8[rnd() % 5];
                    size_t ul = strlen(u);
                    if (n + (int)ul > 7)
                        break;
                    memcpy(buf[i] + n, u, ul);
                    n += (int)ul;
                } else {
                    buf[i][n++] = alphabet[rnd() % (sizeof alphabet - 1)];
                }
            }
        }
        bytes[i] = buf[i];
        lens[i] = (uint16_t)n;
        special[i] = i == 300; /* never allowed */
    }
    colo_schema_vocab *v = colo_schema_vocab_create(bytes, lens, special, V);
    assert_non_null(v);
    static const char *const schemas[] = {
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":3},\"b\":{\"enum\":[\"x\",1,true]},"
        "\"c\":{\"type\":\"array\",\"items\":{\"type\":\"number\"},\"maxItems\":2},\"d\":{\"anyOf\":[{\"type\":\"null\"},"
        "{\"type\":\"string\",\"pattern\":\"^[a-c]+$\"}]},\"e\":{}},\"required\":[\"a\",\"c\"]}",
        NULL, /* any object */
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":\"array\"},\"c\":{}}}",
        NULL,
    };
    /* the last two with bounds that random walks reach */
    colo_schema_options tight = {.default_max_length = 3, .default_max_items = 2};
    uint8_t *allowed = malloc(V);
    assert_non_null(allowed);
    for (int si = 0; si < 4; si++) {
        const colo_schema_options *opt = si >= 2 ? &tight : NULL;
        char err[256] = "";
        colo_schema *g = schemas[si] ? colo_schema_compile_opts(schemas[si], strlen(schemas[si]), opt, err, sizeof err)
                                     : colo_schema_any_object_opts(opt);
        if (!g)
            fail_msg("refused %s: %s", schemas[si] ? schemas[si] : "any object", err);
        for (int walkn = 0; walkn < 20; walkn++) {
            colo_schema_state s;
            colo_schema_state_init(g, &s);
            for (int step = 0; step < 60 && !colo_schema_done(&s); step++) {
                int n = colo_schema_mask(g, &s, v, allowed), count = 0, pick = -1;
                for (int i = 0; i < V; i++) {
                    bool want = !special[i] && colo_schema_accepts(g, &s, bytes[i], lens[i]);
                    if (want != (allowed[i] != 0))
                        fail_msg("token %d (%.*s): mask %d, automaton %d", i, (int)lens[i], bytes[i], allowed[i],
                                 want);
                    count += want;
                    if (want && (pick < 0 || rnd() % (unsigned)count == 0))
                        pick = i;
                }
                assert_int_equal(n, count);
                assert_true(pick >= 0);
                assert_true(colo_schema_feed(g, &s, bytes[pick], lens[pick]));
            }
        }
        colo_schema_free(g);
    }
    free(allowed);
    colo_schema_vocab_free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_object_properties),
        cmocka_unit_test(test_enums_arrays_numbers),
        cmocka_unit_test(test_number_bounds),
        cmocka_unit_test(test_whitespace),
        cmocka_unit_test(test_default_bounds),
        cmocka_unit_test(test_pattern_room),
        cmocka_unit_test(test_json_object_start),
        cmocka_unit_test(test_every_walk_ends),
        cmocka_unit_test(test_anyof_refs_nullable),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_pattern_nesting),
        cmocka_unit_test(test_random_walks),
        cmocka_unit_test(test_mask_matches_automaton),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
