/* JSON Schema -> a byte-level pushdown automaton (models/json_schema.h).
 *
 * The compiled schema is a table of nodes. A state is a set of branches
 * (one per anyOf alternative still possible), each a stack of frames: the
 * node being written and how far. A byte is fed to every branch; a branch
 * that cannot take it dies, an anyOf met on the way splits one. */
#include "models/json_schema.h"

#include "runtime/status.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    K_OBJECT,
    K_ARRAY,
    K_STRING,
    K_INTEGER,
    K_NUMBER,
    K_LITERAL,    /* enum, const, boolean, null: one of a few exact texts */
    K_ANYOF,
    K_ANY,        /* any value (a schema with no constraint) */
    K_ANY_OBJECT, /* any object */
    K_ROOT,       /* the frame under the document */
};

#define ROOT_NODE 0xFFFF
#define MAX_NUMBER_BYTES 24
#define MAX_PATTERN_POS 62
#define PAT_INIT (1ull << 63)

typedef struct prop {
    char *name; /* as written in JSON, without the quotes */
    size_t len;
    int node;
} prop;

typedef struct lit {
    char *text; /* compact JSON */
    size_t len;
} lit;

typedef struct pattern {
    int n_pos;
    uint64_t cls[MAX_PATTERN_POS][2]; /* ASCII bytes each position matches */
    uint64_t follow[MAX_PATTERN_POS];
    uint64_t first, last;
    bool nullable;
} pattern;

typedef struct node {
    uint8_t kind;
    int n;            /* properties, alternatives or literals */
    int first;        /* index of the first in g->props, g->alts or g->lits */
    uint64_t required; /* object: bit i = property i is required */
    int items;        /* array: the items' node */
    int min, max;     /* array: items; string: characters (max -1: none) */
    int pattern;      /* string: index into g->pats, or -1 */
} node;

struct colo_schema {
    node *nodes;
    int n_nodes, cap_nodes;
    prop *props;
    int n_props, cap_props;
    int *alts;
    int n_alts, cap_alts;
    lit *lits;
    int n_lits, cap_lits;
    pattern *pats;
    int n_pats, cap_pats;
    int root;
};

/* ---- compiling ----------------------------------------------------------------- */

typedef struct comp {
    colo_schema *g;
    json_t *doc;
    char *err;
    size_t errlen;
    const char *refs[COLO_SCHEMA_MAX_DEPTH * 2]; /* $refs being expanded (recursion check) */
    int n_refs;
    int depth;
    int list_depth; /* the depth of a schema whose 'type' is a list (its keywords serve several types) */
} comp;

static bool grow(void **p, int *cap, int need, size_t size)
{
    if (need <= *cap)
        return true;
    int c = *cap ? *cap * 2 : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q)
        return false;
    *p = q;
    *cap = c;
    return true;
}

static int new_node(comp *c, uint8_t kind)
{
    colo_schema *g = c->g;
    if (g->n_nodes >= COLO_SCHEMA_MAX_NODES) {
        colo_set_err(c->err, c->errlen, "the schema is too large (more than %d nodes)", COLO_SCHEMA_MAX_NODES);
        return -1;
    }
    if (!grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes)) {
        colo_set_err(c->err, c->errlen, "out of memory");
        return -1;
    }
    node *nd = &g->nodes[g->n_nodes];
    memset(nd, 0, sizeof *nd);
    nd->kind = kind;
    nd->max = -1;
    nd->items = -1;
    nd->pattern = -1;
    return g->n_nodes++;
}

static int fail(comp *c, const char *path, const char *fmt, const char *what)
{
    char msg[320];
    snprintf(msg, sizeof msg, fmt, what);
    colo_set_err(c->err, c->errlen, "%s at %s", msg, path);
    return -1;
}

static bool add_lit(comp *c, json_t *v)
{
    colo_schema *g = c->g;
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!t || !grow((void **)&g->lits, &g->cap_lits, g->n_lits + 1, sizeof *g->lits)) {
        free(t);
        colo_set_err(c->err, c->errlen, "out of memory");
        return false;
    }
    g->lits[g->n_lits++] = (lit){t, strlen(t)};
    return true;
}

static bool type_matches(const char *type, json_t *v)
{
    if (!strcmp(type, "object"))
        return json_is_object(v);
    if (!strcmp(type, "array"))
        return json_is_array(v);
    if (!strcmp(type, "string"))
        return json_is_string(v);
    if (!strcmp(type, "integer"))
        return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == (double)(long long)json_real_value(v));
    if (!strcmp(type, "number"))
        return json_is_number(v);
    if (!strcmp(type, "boolean"))
        return json_is_boolean(v);
    if (!strcmp(type, "null"))
        return json_is_null(v);
    return false;
}

static int compile_node(comp *c, json_t *s, const char *path);

static const char *const ignored_keys[] = {"title", "description", "default", "examples", "$schema", "$id",
                                           "$comment", "strict", "$defs", "definitions", NULL};

static bool key_in(const char *k, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (!strcmp(k, list[i]))
            return true;
    return false;
}

/* Checks s uses only the keywords of its type (and the annotations). */
static int check_keys(comp *c, json_t *s, const char *path, const char *const *allowed)
{
    static const char *const any_type[] = {"type", "properties", "required", "additionalProperties", "items",
                                           "minItems", "maxItems", "minLength", "maxLength", "pattern",
                                           "enum", "const", NULL};
    if (c->list_depth == c->depth)
        allowed = any_type;
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v)
    {
        (void)v;
        if (!key_in(k, ignored_keys) && !key_in(k, allowed)) {
            char what[80];
            snprintf(what, sizeof what, "%.60s", k);
            return fail(c, path, "unsupported keyword '%s'", what);
        }
    }
    return 0;
}

static int get_count(comp *c, json_t *s, const char *key, const char *path, int dflt, int *out)
{
    json_t *v = json_object_get(s, key);
    *out = dflt;
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 100000)
        return fail(c, path, "'%s' must be an integer from 0 to 100000", key);
    *out = (int)json_integer_value(v);
    return 0;
}

/* ---- patterns: a regular expression to a position automaton (Glushkov) ---- */

typedef struct rx {
    const char *p, *end;
    pattern *pat;
    const char *why;
} rx;

typedef struct rset {
    uint64_t first, last;
    bool nullable;
} rset;

static void cls_set(uint64_t cls[2], int b)
{
    if (b >= 0x20 && b < 0x7F && b != '"' && b != '\\')
        cls[b >> 6] |= 1ull << (b & 63);
}

static void cls_range(uint64_t cls[2], int a, int b)
{
    for (int x = a; x <= b; x++)
        cls_set(cls, x);
}

/* \d \w \s and their negations, or a literal escape; false when unknown. */
static bool rx_escape(char e, uint64_t cls[2])
{
    uint64_t t[2] = {0, 0};
    switch (e) {
    case 'd': case 'D': cls_range(t, '0', '9'); break;
    case 'w': case 'W': cls_range(t, '0', '9'), cls_range(t, 'a', 'z'), cls_range(t, 'A', 'Z'), cls_set(t, '_'); break;
    case 's': case 'S': cls_set(t, ' '); break;
    default:
        if (strchr(".-^$*+?()[]{}|/\\\"", e) && e) { /* a literal */
            cls_set(cls, (unsigned char)e);
            return true;
        }
        return false;
    }
    if (e >= 'A' && e <= 'Z') {
        uint64_t all[2] = {0, 0};
        cls_range(all, 0x20, 0x7E);
        t[0] = all[0] & ~t[0], t[1] = all[1] & ~t[1];
    }
    cls[0] |= t[0], cls[1] |= t[1];
    return true;
}

static bool rx_new_pos(rx *r, const uint64_t cls[2], rset *out)
{
    pattern *pt = r->pat;
    if (pt->n_pos >= MAX_PATTERN_POS) {
        r->why = "is too long (at most 62 character positions once repetitions are counted)";
        return false;
    }
    int p = pt->n_pos++;
    pt->cls[p][0] = cls[0], pt->cls[p][1] = cls[1];
    pt->follow[p] = 0;
    out->first = out->last = 1ull << p;
    out->nullable = false;
    return true;
}

static bool rx_alt(rx *r, rset *out);

/* One atom (a repetition builds it again from its text). */
static bool rx_atom(rx *r, rset *out)
{
    uint64_t cls[2] = {0, 0};
    char ch = *r->p++;
    if (ch == '(') {
        if (r->p + 1 < r->end && r->p[0] == '?' && r->p[1] == ':')
            r->p += 2;
        else if (r->p < r->end && r->p[0] == '?') {
            r->why = "uses a group construct other than (?:...)";
            return false;
        }
        if (!rx_alt(r, out))
            return false;
        if (r->p >= r->end || *r->p != ')') {
            r->why = "has an unclosed group";
            return false;
        }
        r->p++;
        return true;
    }
    if (ch == '[') {
        bool neg = r->p < r->end && *r->p == '^';
        if (neg)
            r->p++;
        bool firstc = true;
        while (r->p < r->end && (*r->p != ']' || firstc)) {
            firstc = false;
            int a = (unsigned char)*r->p++;
            if (a == '\\') {
                if (r->p >= r->end || !rx_escape(*r->p, cls)) {
                    r->why = "uses an escape colo does not support";
                    return false;
                }
                r->p++;
                continue;
            }
            if (a >= 0x80) {
                r->why = "has a non-ASCII character";
                return false;
            }
            if (r->p + 1 < r->end && r->p[0] == '-' && r->p[1] != ']') {
                int b = (unsigned char)r->p[1];
                r->p += 2;
                if (b < a || b >= 0x80) {
                    r->why = "has a bad range";
                    return false;
                }
                cls_range(cls, a, b);
            } else {
                cls_set(cls, a);
            }
        }
        if (r->p >= r->end) {
            r->why = "has an unclosed class";
            return false;
        }
        r->p++;
        if (neg) {
            uint64_t all[2] = {0, 0};
            cls_range(all, 0x20, 0x7E);
            cls[0] = all[0] & ~cls[0], cls[1] = all[1] & ~cls[1];
        }
    } else if (ch == '.') {
        cls_range(cls, 0x20, 0x7E);
    } else if (ch == '\\') {
        if (r->p >= r->end || !rx_escape(*r->p, cls)) {
            r->why = "uses an escape colo does not support";
            return false;
        }
        r->p++;
    } else if (strchr("*+?{})|", ch)) {
        r->why = "has a quantifier or bracket out of place";
        return false;
    } else if ((unsigned char)ch >= 0x80) {
        r->why = "has a non-ASCII character";
        return false;
    } else {
        cls_set(cls, (unsigned char)ch);
    }
    if (!cls[0] && !cls[1]) {
        r->why = "needs a character colo writes only escaped (a quote, a backslash or a control character)";
        return false;
    }
    return rx_new_pos(r, cls, out);
}

static void rx_link(pattern *pt, uint64_t from, uint64_t to)
{
    for (int p = 0; p < pt->n_pos; p++)
        if (from >> p & 1)
            pt->follow[p] |= to;
}

static void rx_cat(pattern *pt, rset *a, const rset *b)
{
    rx_link(pt, a->last, b->first);
    a->first = a->nullable ? a->first | b->first : a->first;
    a->last = b->nullable ? a->last | b->last : b->last;
    a->nullable = a->nullable && b->nullable;
}

static bool rx_repeat(rx *r, rset *out)
{
    const char *start = r->p;
    rset a;
    if (!rx_atom(r, &a))
        return false;
    const char *atom_end = r->p;
    while (r->p < r->end && strchr("*+?{", *r->p)) {
        int lo, hi;
        char q = *r->p++;
        if (q == '*' || q == '+' || q == '?') {
            lo = q == '+' ? 1 : 0;
            hi = q == '?' ? 1 : -1;
        } else {
            char *e;
            lo = (int)strtol(r->p, &e, 10);
            if (e == r->p) {
                r->why = "has a bad {m,n}";
                return false;
            }
            hi = lo;
            if (*e == ',') {
                char *e2;
                hi = (int)strtol(e + 1, &e2, 10);
                if (e2 == e + 1)
                    hi = -1;
                e = e2;
            }
            if (*e != '}' || lo < 0 || lo > 62 || (hi >= 0 && (hi < lo || hi > 62))) {
                r->why = "has a bad {m,n}";
                return false;
            }
            r->p = e + 1;
        }
        if (r->p < r->end && *r->p == '?')
            r->p++; /* lazy: the same language */
        if (lo == 1 && hi == -1) { /* + */
            rx_link(r->pat, a.last, a.first);
            continue;
        }
        if (lo == 0 && hi == -1) { /* * */
            rx_link(r->pat, a.last, a.first);
            a.nullable = true;
            continue;
        }
        if (lo == 0 && hi == 1) { /* ? */
            a.nullable = true;
            continue;
        }
        /* {m,n}: the atom again and again (only directly after an atom) */
        if (atom_end != r->p - 1 && r->p[-1] != '}') {
            r->why = "has a repetition of a repetition";
            return false;
        }
        rset acc = {0, 0, true};
        int copies = hi < 0 ? (lo ? lo : 1) : hi;
        for (int i = 0; i < copies; i++) {
            rset b;
            if (i == 0)
                b = a;
            else {
                rx sub = {start, atom_end, r->pat, NULL};
                if (!rx_atom(&sub, &b)) {
                    r->why = sub.why;
                    return false;
                }
            }
            if (hi < 0 && i == copies - 1)
                rx_link(r->pat, b.last, b.first), b.nullable = lo == 0 || b.nullable;
            if (i >= lo)
                b.nullable = true;
            rx_cat(r->pat, &acc, &b);
        }
        a = acc;
        if (copies == 0)
            a = (rset){0, 0, true};
    }
    *out = a;
    return true;
}

static bool rx_seq(rx *r, rset *out)
{
    rset acc = {0, 0, true};
    while (r->p < r->end && *r->p != '|' && *r->p != ')') {
        if (*r->p == '^' || *r->p == '$') {
            r->why = "uses ^ or $ other than at its ends";
            return false;
        }
        rset b;
        if (!rx_repeat(r, &b))
            return false;
        rx_cat(r->pat, &acc, &b);
    }
    *out = acc;
    return true;
}

static bool rx_alt(rx *r, rset *out)
{
    if (!rx_seq(r, out))
        return false;
    while (r->p < r->end && *r->p == '|') {
        r->p++;
        rset b;
        if (!rx_seq(r, &b))
            return false;
        out->first |= b.first, out->last |= b.last, out->nullable |= b.nullable;
    }
    return true;
}

static int compile_pattern(comp *c, const char *src, const char *path)
{
    colo_schema *g = c->g;
    if (!grow((void **)&g->pats, &g->cap_pats, g->n_pats + 1, sizeof *g->pats)) {
        colo_set_err(c->err, c->errlen, "out of memory");
        return -1;
    }
    pattern *pt = &g->pats[g->n_pats];
    memset(pt, 0, sizeof *pt);
    size_t len = strlen(src);
    bool start_anchor = len && src[0] == '^';
    bool end_anchor = len > (size_t)start_anchor && src[len - 1] == '$' && (len < 2 || src[len - 2] != '\\');
    rx r = {src + start_anchor, src + len - end_anchor, pt, NULL};
    uint64_t any[2] = {0, 0};
    cls_range(any, 0x20, 0x7E);
    rset acc = {0, 0, true}, b;
    if (!start_anchor) { /* a search: anything before */
        if (!rx_new_pos(&r, any, &b))
            goto bad;
        rx_link(pt, b.last, b.first);
        b.nullable = true;
        rx_cat(pt, &acc, &b);
    }
    if (!rx_alt(&r, &b))
        goto bad;
    if (r.p != r.end) {
        r.why = "has an unmatched ')'";
        goto bad;
    }
    rx_cat(pt, &acc, &b);
    if (!end_anchor) {
        if (!rx_new_pos(&r, any, &b))
            goto bad;
        rx_link(pt, b.last, b.first);
        b.nullable = true;
        rx_cat(pt, &acc, &b);
    }
    pt->first = acc.first, pt->last = acc.last, pt->nullable = acc.nullable;
    return g->n_pats++;

bad:;
    char what[200];
    snprintf(what, sizeof what, "pattern '%.60s' %s", src, r.why ? r.why : "is not supported");
    return fail(c, path, "%s", what);
}

/* ---- schema nodes ----------------------------------------------------------------- */

static int compile_object(comp *c, json_t *s, const char *path)
{
    static const char *const allowed[] = {"type", "properties", "required", "additionalProperties", NULL};
    if (check_keys(c, s, path, allowed) < 0)
        return -1;
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (addl && !json_is_boolean(addl))
        return fail(c, path, "%s", "unsupported keyword 'additionalProperties' (only false is supported)");
    if (!props) {
        if (req && json_array_size(req))
            return fail(c, path, "%s", "'required' names properties the schema does not define");
        if (addl && json_is_false(addl)) { /* the empty object */
            int id = new_node(c, K_OBJECT);
            return id;
        }
        return new_node(c, K_ANY_OBJECT);
    }
    if (!json_is_object(props))
        return fail(c, path, "%s", "'properties' must be an object");
    if (req && !json_is_array(req))
        return fail(c, path, "%s", "'required' must be an array of names");
    size_t n = json_object_size(props);
    if (n > COLO_SCHEMA_MAX_PROPS)
        return fail(c, path, "more than %s properties", "64");
    int id = new_node(c, K_OBJECT);
    if (id < 0)
        return -1;
    colo_schema *g = c->g;
    int first = g->n_props;
    if (!grow((void **)&g->props, &g->cap_props, g->n_props + (int)n, sizeof *g->props)) {
        colo_set_err(c->err, c->errlen, "out of memory");
        return -1;
    }
    g->n_props += (int)n;
    g->nodes[id].first = first;
    g->nodes[id].n = (int)n;
    int i = 0;
    const char *k;
    json_t *v;
    for (int j = 0; j < (int)n; j++)
        g->props[first + j] = (prop){NULL, 0, -1};
    json_object_foreach(props, k, v)
    {
        json_t *ks = json_string(k);
        char *enc = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
        json_decref(ks);
        if (!enc) {
            colo_set_err(c->err, c->errlen, "out of memory");
            return -1;
        }
        size_t el = strlen(enc);
        memmove(enc, enc + 1, el - 2);
        enc[el - 2] = 0;
        g->props[first + i].name = enc;
        g->props[first + i].len = el - 2;
        char sub[256];
        snprintf(sub, sizeof sub, "%s/properties/%.80s", path, k);
        int child = compile_node(c, v, sub);
        if (child < 0)
            return -1;
        g->props[first + i].node = child;
        i++;
    }
    size_t ri;
    json_t *r;
    json_array_foreach(req, ri, r)
    {
        if (!json_is_string(r))
            return fail(c, path, "%s", "'required' must be an array of names");
        int found = -1;
        i = 0;
        json_object_foreach(props, k, v)
        {
            if (!strcmp(k, json_string_value(r)))
                found = i;
            i++;
        }
        if (found < 0) {
            char what[120];
            snprintf(what, sizeof what, "'required' names '%.60s', which is not in 'properties'", json_string_value(r));
            return fail(c, path, "%s", what);
        }
        g->nodes[id].required |= 1ull << found;
    }
    return id;
}

static int compile_array(comp *c, json_t *s, const char *path)
{
    static const char *const allowed[] = {"type", "items", "minItems", "maxItems", NULL};
    if (check_keys(c, s, path, allowed) < 0)
        return -1;
    int lo, hi;
    if (get_count(c, s, "minItems", path, 0, &lo) < 0 || get_count(c, s, "maxItems", path, -1, &hi) < 0)
        return -1;
    if (hi >= 0 && hi < lo)
        return fail(c, path, "%s", "'maxItems' is less than 'minItems'");
    json_t *items = json_object_get(s, "items");
    int id = new_node(c, K_ARRAY);
    if (id < 0)
        return -1;
    int child;
    if (items) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s/items", path);
        child = compile_node(c, items, sub);
    } else {
        child = new_node(c, K_ANY);
    }
    if (child < 0)
        return -1;
    node *nd = &c->g->nodes[id];
    nd->items = child;
    nd->min = lo;
    nd->max = hi;
    return id;
}

static int compile_string(comp *c, json_t *s, const char *path)
{
    static const char *const allowed[] = {"type", "minLength", "maxLength", "pattern", NULL};
    if (check_keys(c, s, path, allowed) < 0)
        return -1;
    int lo, hi;
    if (get_count(c, s, "minLength", path, 0, &lo) < 0 || get_count(c, s, "maxLength", path, -1, &hi) < 0)
        return -1;
    if (hi >= 0 && hi < lo)
        return fail(c, path, "%s", "'maxLength' is less than 'minLength'");
    json_t *pat = json_object_get(s, "pattern");
    int pi = -1;
    if (pat) {
        if (!json_is_string(pat))
            return fail(c, path, "%s", "'pattern' must be a string");
        if ((pi = compile_pattern(c, json_string_value(pat), path)) < 0)
            return -1;
    }
    int id = new_node(c, K_STRING);
    if (id < 0)
        return -1;
    node *nd = &c->g->nodes[id];
    nd->min = lo, nd->max = hi, nd->pattern = pi;
    return id;
}

static int compile_literals(comp *c, json_t *s, const char *path, const char *type)
{
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    json_t *vals = en;
    json_t *one = NULL;
    if (cn) {
        one = json_array();
        if (!one || json_array_append(one, cn)) {
            json_decref(one);
            colo_set_err(c->err, c->errlen, "out of memory");
            return -1;
        }
        vals = one;
    }
    int id = -1;
    if (!json_is_array(vals) || json_array_size(vals) == 0) {
        fail(c, path, "%s", "'enum' must be a non-empty array");
        goto out;
    }
    if (json_array_size(vals) > COLO_SCHEMA_MAX_PROPS) {
        fail(c, path, "%s", "'enum' has more than 64 values");
        goto out;
    }
    if ((id = new_node(c, K_LITERAL)) < 0)
        goto out;
    c->g->nodes[id].first = c->g->n_lits;
    size_t i;
    json_t *v;
    json_array_foreach(vals, i, v)
    {
        if (en && cn && !json_equal(v, cn))
            continue;
        if (type && !type_matches(type, v))
            continue;
        if (!add_lit(c, v)) {
            id = -1;
            goto out;
        }
        c->g->nodes[id].n++;
    }
    if (c->g->nodes[id].n == 0)
        id = fail(c, path, "%s", "no value of 'enum'/'const' fits the schema's type");
out:
    json_decref(one);
    return id;
}

static int compile_typed(comp *c, json_t *s, const char *path, const char *type)
{
    static const char *const scalar[] = {"type", NULL};
    if (json_object_get(s, "enum") || json_object_get(s, "const")) {
        static const char *const allowed[] = {"type", "enum", "const", NULL};
        if (check_keys(c, s, path, allowed) < 0)
            return -1;
        return compile_literals(c, s, path, type);
    }
    if (!type) {
        if (json_object_get(s, "properties"))
            type = "object";
        else if (json_object_get(s, "items"))
            type = "array";
        else {
            static const char *const none[] = {NULL};
            if (check_keys(c, s, path, none) < 0)
                return -1;
            return new_node(c, K_ANY);
        }
    }
    if (!strcmp(type, "object"))
        return compile_object(c, s, path);
    if (!strcmp(type, "array"))
        return compile_array(c, s, path);
    if (!strcmp(type, "string"))
        return compile_string(c, s, path);
    if (check_keys(c, s, path, scalar) < 0)
        return -1;
    if (!strcmp(type, "integer"))
        return new_node(c, K_INTEGER);
    if (!strcmp(type, "number"))
        return new_node(c, K_NUMBER);
    if (!strcmp(type, "boolean") || !strcmp(type, "null")) {
        int id = new_node(c, K_LITERAL);
        if (id < 0)
            return -1;
        c->g->nodes[id].first = c->g->n_lits;
        json_t *t = json_true(), *f = json_false(), *nl = json_null();
        bool ok = !strcmp(type, "null") ? add_lit(c, nl) : add_lit(c, t) && add_lit(c, f);
        if (!ok)
            return -1;
        c->g->nodes[id].n = !strcmp(type, "null") ? 1 : 2;
        return id;
    }
    char what[80];
    snprintf(what, sizeof what, "%.60s", type);
    return fail(c, path, "unknown type '%s'", what);
}

static int compile_alts(comp *c, json_t *list, const char *path, const char *key, json_t *s)
{
    size_t n = json_array_size(list);
    if (!json_is_array(list) || n == 0)
        return fail(c, path, "'%s' must be a non-empty array", key);
    if (n > COLO_SCHEMA_MAX_BRANCHES)
        return fail(c, path, "'%s' has more than 8 alternatives", key);
    int *ids = calloc(n, sizeof *ids);
    if (!ids) {
        colo_set_err(c->err, c->errlen, "out of memory");
        return -1;
    }
    int id = -1;
    for (size_t i = 0; i < n; i++) {
        char sub[256];
        json_t *item = json_array_get(list, i);
        if (s) { /* a list of types: the schema with each type in turn */
            if (!json_is_string(item)) {
                fail(c, path, "%s", "'type' must be a name or a list of names");
                goto out;
            }
            snprintf(sub, sizeof sub, "%s", path);
            int saved = c->list_depth;
            c->list_depth = c->depth;
            ids[i] = compile_typed(c, s, sub, json_string_value(item));
            c->list_depth = saved;
        } else {
            snprintf(sub, sizeof sub, "%s/%s/%zu", path, key, i);
            ids[i] = compile_node(c, item, sub);
        }
        if (ids[i] < 0)
            goto out;
    }
    colo_schema *g = c->g;
    if ((id = new_node(c, K_ANYOF)) < 0)
        goto out;
    if (!grow((void **)&g->alts, &g->cap_alts, g->n_alts + (int)n, sizeof *g->alts)) {
        colo_set_err(c->err, c->errlen, "out of memory");
        id = -1;
        goto out;
    }
    g->nodes[id].first = g->n_alts;
    g->nodes[id].n = (int)n;
    for (size_t i = 0; i < n; i++)
        g->alts[g->n_alts++] = ids[i];
out:
    free(ids);
    return id;
}

static int compile_ref(comp *c, json_t *s, const char *path)
{
    json_t *ref = json_object_get(s, "$ref");
    static const char *const allowed[] = {"$ref", NULL};
    if (check_keys(c, s, path, allowed) < 0)
        return -1;
    if (!json_is_string(ref))
        return fail(c, path, "%s", "'$ref' must be a string");
    const char *r = json_string_value(ref);
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i], r))
            return fail(c, path, "recursive $ref '%.80s' (not supported)", r);
    json_t *target = NULL;
    const char *name = NULL;
    if (!strncmp(r, "#/$defs/", 8))
        target = json_object_get(json_object_get(c->doc, "$defs"), name = r + 8);
    else if (!strncmp(r, "#/definitions/", 14))
        target = json_object_get(json_object_get(c->doc, "definitions"), name = r + 14);
    else if (!strcmp(r, "#"))
        return fail(c, path, "%s", "recursive $ref '#' (not supported)");
    if (!name)
        return fail(c, path, "$ref '%.80s' (only #/$defs/NAME and #/definitions/NAME are supported)", r);
    if (!target)
        return fail(c, path, "$ref '%.80s' names no definition", r);
    if (c->n_refs >= (int)(sizeof c->refs / sizeof *c->refs))
        return fail(c, path, "%s", "$refs nested too deep");
    c->refs[c->n_refs++] = r;
    char sub[256];
    snprintf(sub, sizeof sub, "%.200s", r);
    int id = compile_node(c, target, sub);
    c->n_refs--;
    return id;
}

static int compile_node(comp *c, json_t *s, const char *path)
{
    if (json_is_true(s))
        return new_node(c, K_ANY);
    if (!json_is_object(s))
        return fail(c, path, "%s", "a schema must be an object");
    if (++c->depth > COLO_SCHEMA_MAX_DEPTH - 2) {
        c->depth--;
        return fail(c, path, "the schema nests deeper than %s levels", "22");
    }
    int id;
    json_t *type = json_object_get(s, "type");
    if (json_object_get(s, "$ref"))
        id = compile_ref(c, s, path);
    else if (json_object_get(s, "anyOf")) {
        static const char *const allowed[] = {"anyOf", NULL};
        id = check_keys(c, s, path, allowed) < 0 ? -1 : compile_alts(c, json_object_get(s, "anyOf"), path, "anyOf", NULL);
    } else if (json_is_array(type))
        id = json_array_size(type) == 1 ? compile_typed(c, s, path, json_string_value(json_array_get(type, 0)))
                                        : compile_alts(c, type, path, "type", s);
    else if (type && !json_is_string(type))
        id = fail(c, path, "%s", "'type' must be a name or a list of names");
    else if (type && !strcmp(json_string_value(type), "null") && json_object_get(s, "enum"))
        id = compile_typed(c, s, path, "null");
    else
        id = compile_typed(c, s, path, type ? json_string_value(type) : NULL);
    c->depth--;
    return id;
}

static colo_schema *schema_new(void)
{
    return calloc(1, sizeof(colo_schema));
}

colo_schema *colo_schema_compile(const char *text, size_t len, char *err, size_t errlen)
{
    json_error_t je;
    json_t *doc = json_loadb(text, len, 0, &je);
    if (!doc) {
        colo_set_err(err, errlen, "not JSON: %s", je.text);
        return NULL;
    }
    colo_schema *g = schema_new();
    if (!g) {
        json_decref(doc);
        colo_set_err(err, errlen, "out of memory");
        return NULL;
    }
    comp c = {.g = g, .doc = doc, .err = err, .errlen = errlen};
    int root = compile_node(&c, doc, "#");
    if (root >= 0) {
        bool object = true;
        const node *r = &g->nodes[root];
        if (r->kind == K_ANYOF) { /* alternatives that are all objects */
            for (int i = 0; i < r->n; i++) {
                uint8_t k = g->nodes[g->alts[r->first + i]].kind;
                object &= k == K_OBJECT || k == K_ANY_OBJECT;
            }
        } else
            object = r->kind == K_OBJECT || r->kind == K_ANY_OBJECT;
        if (!object) {
            colo_set_err(err, errlen, "the root must be an object (\"type\":\"object\") at #");
            root = -1;
        }
    }
    json_decref(doc);
    if (root < 0) {
        colo_schema_free(g);
        return NULL;
    }
    g->root = root;
    return g;
}

colo_schema *colo_schema_any_object(void)
{
    colo_schema *g = schema_new();
    if (!g)
        return NULL;
    comp c = {.g = g};
    if ((g->root = new_node(&c, K_ANY_OBJECT)) < 0) {
        colo_schema_free(g);
        return NULL;
    }
    return g;
}

void colo_schema_free(colo_schema *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n_props; i++)
        free(g->props[i].name);
    for (int i = 0; i < g->n_lits; i++)
        free(g->lits[i].text);
    free(g->nodes);
    free(g->props);
    free(g->alts);
    free(g->lits);
    free(g->pats);
    free(g);
}

/* ---- running ----------------------------------------------------------------------- */

enum {
    P_OPEN,      /* nothing of the node yet */
    O_FIRST,     /* after '{' */
    O_KEY,       /* in a key: mask = candidates, n = bytes matched */
    O_COLON,
    O_VALUE,     /* after ':' (and while the value is written) */
    O_AFTER,     /* after a value */
    O_NEXT,      /* after ',' */
    A_FIRST,     /* after '[' (and while the first item is written) */
    A_AFTER,
    A_NEXT,      /* after ',' (and while the item is written) */
    S_BODY,      /* in a string */
    N_BODY,      /* in a number: aux = its state */
    L_BODY,      /* in a literal: mask = candidates, n = bytes matched */
    Y_BODY,      /* in an any value (the branch's json_fsm) */
    R_START,
    R_DONE,
};

/* number states (as in json_fsm.c) */
enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

typedef struct set {
    colo_schema_state *s;
} set;

static bool is_ws(unsigned c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static bool is_digit(unsigned c) { return c >= '0' && c <= '9'; }
static bool is_hex(unsigned c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static void branch_copy(colo_schema_branch *d, const colo_schema_branch *s)
{
    d->depth = s->depth;
    d->ws = s->ws;
    if (s->depth && s->f[s->depth - 1].phase == Y_BODY)
        d->any = s->any;
    memcpy(d->f, s->f, (size_t)s->depth * sizeof *s->f);
}

static void emit(colo_schema_state *out, const colo_schema_branch *b)
{
    if (out->n < COLO_SCHEMA_MAX_BRANCHES)
        branch_copy(&out->b[out->n++], b);
}

static const node *frame_node(const colo_schema *g, const colo_schema_frame *f)
{
    return f->node == ROOT_NODE ? NULL : &g->nodes[f->node];
}

static void step(const colo_schema *g, colo_schema_branch *b, unsigned c, colo_schema_state *out);

/* Starts node id on b with its first byte c. */
static void enter(const colo_schema *g, colo_schema_branch *b, int id, unsigned c, colo_schema_state *out)
{
    const node *nd = &g->nodes[id];
    if (nd->kind == K_ANYOF) {
        for (int i = 0; i < nd->n; i++) {
            colo_schema_branch t;
            branch_copy(&t, b);
            enter(g, &t, g->alts[nd->first + i], c, out);
        }
        return;
    }
    if (b->depth >= COLO_SCHEMA_MAX_DEPTH)
        return;
    colo_schema_frame *f = &b->f[b->depth++];
    memset(f, 0, sizeof *f);
    f->node = (uint16_t)id;
    f->phase = P_OPEN;
    if (nd->kind == K_LITERAL) {
        f->phase = L_BODY;
        f->mask = nd->n >= 64 ? ~0ull : (1ull << nd->n) - 1;
    } else if (nd->kind == K_ANY || nd->kind == K_ANY_OBJECT) {
        f->phase = Y_BODY;
        if (nd->kind == K_ANY)
            colo_json_fsm_init_value(&b->any);
        else
            colo_json_fsm_init(&b->any);
    } else if (nd->kind == K_INTEGER || nd->kind == K_NUMBER) {
        f->phase = N_BODY;
        f->aux = 0xFF; /* nothing yet */
    }
    step(g, b, c, out);
}

/* The frame on top of b finished; its parent takes note. */
static void pop(const colo_schema *g, colo_schema_branch *b)
{
    b->depth--;
    colo_schema_frame *p = &b->f[b->depth - 1];
    const node *pn = frame_node(g, p);
    if (!pn)
        p->phase = R_DONE;
    else if (pn->kind == K_OBJECT)
        p->phase = O_AFTER;
    else { /* array */
        p->i++;
        p->phase = A_AFTER;
    }
}

/* Whether property j of an object can be the next key after i-1. */
static uint64_t key_candidates(const node *nd, int from)
{
    uint64_t m = 0;
    for (int j = from; j < nd->n; j++) {
        m |= 1ull << j;
        if (nd->required >> j & 1)
            break;
    }
    return m;
}

static bool may_close(const node *nd, int from)
{
    return from >= nd->n || !(nd->required >> from);
}

/* i counts the integer part's digits (at most 15, so that the value is
 * exact in a double and fits an int64), mask the exponent's (at most 2). */
static bool number_step(colo_schema_frame *f, unsigned c, bool integer)
{
    uint8_t st = f->aux;
    if (f->n >= MAX_NUMBER_BYTES)
        return false;
    switch (st) {
    case 0xFF:
        if (c == '-')
            st = N_MINUS;
        else if (is_digit(c))
            st = c == '0' ? N_ZERO : N_INT, f->i = 1;
        else
            return false;
        break;
    case N_MINUS:
        if (!is_digit(c))
            return false;
        st = c == '0' ? N_ZERO : N_INT, f->i = 1;
        break;
    case N_ZERO:
    case N_INT:
        if (is_digit(c) && st == N_INT) {
            if (++f->i > 15)
                return false;
            break;
        }
        if (!integer && c == '.')
            st = N_DOT;
        else if (!integer && (c == 'e' || c == 'E'))
            st = N_E;
        else
            return false;
        break;
    case N_DOT:
        if (!is_digit(c))
            return false;
        st = N_FRAC;
        break;
    case N_FRAC:
        if (c == 'e' || c == 'E')
            st = N_E;
        else if (!is_digit(c))
            return false;
        break;
    case N_E:
        if (c == '+' || c == '-')
            st = N_ESIGN;
        else if (is_digit(c))
            st = N_EXP, f->mask = 1;
        else
            return false;
        break;
    case N_ESIGN:
        if (!is_digit(c))
            return false;
        st = N_EXP, f->mask = 1;
        break;
    case N_EXP:
        if (!is_digit(c) || ++f->mask > 2)
            return false;
        break;
    default: return false;
    }
    f->aux = st;
    f->n++;
    return true;
}

static bool number_complete(uint8_t st) { return st == N_ZERO || st == N_INT || st == N_FRAC || st == N_EXP; }

/* string escapes in aux: bit 3 = after a backslash, bits 0-2 = \u digits
 * left, bits 4-5 = UTF-8 continuation bytes left, bit 6 = a \u escape began
 * with d */
static bool string_step(const colo_schema *g, const node *nd, colo_schema_frame *f, unsigned c, bool *closed)
{
    *closed = false;
    unsigned hex = f->aux & 7, esc = f->aux >> 3 & 1, u8 = f->aux >> 4 & 3;
    if (hex) { /* not a surrogate (D800-DFFF): bit 6 = the first digit was d */
        if (!is_hex(c) || (hex == 3 && (f->aux & 0x40) && strchr("89abcdefABCDEF", (int)c)))
            return false;
        bool d = hex == 4 && (c == 'd' || c == 'D');
        f->aux = (uint8_t)((f->aux & ~0x47u) | (hex - 1) | (d ? 0x40u : 0));
        return true;
    }
    if (u8) {
        if (!colo_utf8_cont_ok(c, (uint8_t)f->i))
            return false;
        f->i = 0; /* (a string's frame keeps the range of its next continuation byte in i) */
        f->aux = (uint8_t)((f->aux & ~0x30u) | ((u8 - 1) << 4));
        return true;
    }
    if (esc) {
        f->aux &= (uint8_t)~8u;
        if (c == 'u') {
            if (nd->min > 0) /* a surrogate pair would count as two characters */
                return false;
            f->aux |= 4;
            return true;
        }
        return c && strchr("\"\\/bfnrt", (int)c) != NULL;
    }
    if (c == '"') {
        if (f->n < nd->min)
            return false;
        if (nd->pattern >= 0) {
            const pattern *pt = &g->pats[nd->pattern];
            bool acc = (f->mask & pt->last & ~PAT_INIT) || ((f->mask & PAT_INIT) && pt->nullable);
            if (!acc)
                return false;
        }
        *closed = true;
        return true;
    }
    if (nd->max >= 0 && f->n >= nd->max)
        return false;
    if (nd->pattern >= 0) { /* printable ASCII, unescaped, through the pattern's automaton */
        if (c < 0x20 || c >= 0x7F || c == '\\')
            return false;
        const pattern *pt = &g->pats[nd->pattern];
        uint64_t from = f->mask & PAT_INIT ? pt->first : 0, next = 0;
        for (int p = 0; p < pt->n_pos; p++)
            if (f->mask >> p & 1)
                from |= pt->follow[p];
        for (int p = 0; p < pt->n_pos; p++)
            if ((from >> p & 1) && (pt->cls[p][c >> 6] >> (c & 63) & 1))
                next |= 1ull << p;
        if (!next)
            return false;
        f->mask = next;
        f->n++;
        return true;
    }
    if (c == '\\') {
        f->aux |= 8;
        f->n++;
        return true;
    }
    if (c < 0x20)
        return false;
    if (c >= 0x80) {
        uint8_t range;
        unsigned k = (unsigned)colo_utf8_lead(c, &range);
        if (!k)
            return false;
        f->i = range;
        f->aux = (uint8_t)((f->aux & ~0x30u) | (k << 4));
    }
    f->n++;
    return true;
}

/* Feeds c to branch b (which it may change), adding what survives to out. */
static void step(const colo_schema *g, colo_schema_branch *b, unsigned c, colo_schema_state *out)
{
    for (;;) {
        colo_schema_frame *f = &b->f[b->depth - 1];
        const node *nd = frame_node(g, f);
        bool between = f->phase == O_FIRST || f->phase == O_COLON || f->phase == O_VALUE || f->phase == O_AFTER ||
                       f->phase == O_NEXT || f->phase == A_FIRST || f->phase == A_AFTER || f->phase == A_NEXT;
        if (between) {
            if (is_ws(c)) {
                if (++b->ws > COLO_JSON_MAX_WS)
                    return;
                emit(out, b);
                return;
            }
            b->ws = 0;
        }
        switch (f->phase) {
        case R_START:
            enter(g, b, g->root, c, out);
            return;
        case R_DONE:
            return;
        case P_OPEN:
            if (nd->kind == K_OBJECT && c == '{')
                f->phase = O_FIRST;
            else if (nd->kind == K_ARRAY && c == '[')
                f->phase = A_FIRST;
            else if (nd->kind == K_STRING && c == '"') {
                f->phase = S_BODY;
                f->mask = PAT_INIT;
            } else
                return;
            emit(out, b);
            return;
        case O_FIRST:
        case O_NEXT:
            if (c == '"') {
                f->mask = key_candidates(nd, f->i);
                if (!f->mask)
                    return;
                f->phase = O_KEY;
                f->n = 0;
                emit(out, b);
                return;
            }
            if (c == '}' && f->phase == O_FIRST && may_close(nd, 0)) {
                pop(g, b);
                emit(out, b);
            }
            return;
        case O_KEY: {
            uint64_t keep = 0;
            for (int j = 0; j < nd->n; j++) {
                if (!(f->mask >> j & 1))
                    continue;
                const prop *p = &g->props[nd->first + j];
                if (c == '"' && p->len == f->n) {
                    f->i = (uint16_t)j;
                    f->phase = O_COLON;
                    emit(out, b);
                    return;
                }
                if (f->n < p->len && (unsigned char)p->name[f->n] == c)
                    keep |= 1ull << j;
            }
            if (!keep)
                return;
            f->mask = keep;
            f->n++;
            emit(out, b);
            return;
        }
        case O_COLON:
            if (c != ':')
                return;
            f->phase = O_VALUE;
            emit(out, b);
            return;
        case O_VALUE:
            enter(g, b, g->props[nd->first + f->i].node, c, out);
            return;
        case O_AFTER:
            if (c == ',' && f->i + 1 < nd->n) {
                f->i++;
                f->phase = O_NEXT;
                emit(out, b);
            } else if (c == '}' && may_close(nd, f->i + 1)) {
                pop(g, b);
                emit(out, b);
            }
            return;
        case A_FIRST:
            if (c == ']') {
                if (nd->min == 0) {
                    pop(g, b);
                    emit(out, b);
                }
                return;
            }
            if (nd->max == 0)
                return;
            enter(g, b, nd->items, c, out);
            return;
        case A_NEXT:
            enter(g, b, nd->items, c, out);
            return;
        case A_AFTER:
            if (c == ',' && (nd->max < 0 || f->i < nd->max)) {
                f->phase = A_NEXT;
                emit(out, b);
            } else if (c == ']' && f->i >= nd->min) {
                pop(g, b);
                emit(out, b);
            }
            return;
        case S_BODY: {
            bool closed;
            if (!string_step(g, nd, f, c, &closed))
                return;
            if (closed)
                pop(g, b);
            emit(out, b);
            return;
        }
        case N_BODY:
            if (number_step(f, c, nd->kind == K_INTEGER)) {
                emit(out, b);
                return;
            }
            if (f->aux == 0xFF || !number_complete(f->aux))
                return;
            pop(g, b); /* c follows the number */
            continue;
        case L_BODY: {
            uint64_t keep = 0;
            bool complete = false;
            for (int j = 0; j < nd->n; j++) {
                if (!(f->mask >> j & 1))
                    continue;
                const lit *l = &g->lits[nd->first + j];
                if (f->n < l->len && (unsigned char)l->text[f->n] == c)
                    keep |= 1ull << j;
                complete |= l->len == f->n;
            }
            if (keep) {
                f->mask = keep;
                f->n++;
                emit(out, b);
                return;
            }
            if (!complete)
                return;
            pop(g, b);
            continue;
        }
        case Y_BODY: {
            colo_json_fsm t = b->any;
            if (colo_json_fsm_feed(&t, (const char *)&(char){(char)c}, 1)) {
                b->any = t;
                if (colo_json_fsm_done(&b->any))
                    pop(g, b);
                emit(out, b);
                return;
            }
            if (!colo_json_fsm_complete(&b->any))
                return;
            pop(g, b);
            continue;
        }
        default: return;
        }
    }
}

void colo_schema_state_init(const colo_schema *g, colo_schema_state *s)
{
    (void)g;
    s->n = 1;
    colo_schema_branch *b = &s->b[0];
    b->depth = 1;
    b->ws = 0;
    memset(&b->f[0], 0, sizeof b->f[0]);
    b->f[0].node = ROOT_NODE;
    b->f[0].phase = R_START;
}

void colo_schema_state_copy(colo_schema_state *dst, const colo_schema_state *src)
{
    dst->n = src->n;
    for (int i = 0; i < src->n; i++)
        branch_copy(&dst->b[i], &src->b[i]);
}

/* (The root is an object, so a document never ends on a number or literal
 * waiting for the byte after it.) */
bool colo_schema_done(const colo_schema_state *s)
{
    for (int i = 0; i < s->n; i++)
        if (s->b[i].depth == 1 && s->b[i].f[0].phase == R_DONE)
            return true;
    return false;
}

static bool feed_into(const colo_schema *g, const colo_schema_state *in, colo_schema_state *out, unsigned c)
{
    out->n = 0;
    for (int i = 0; i < in->n; i++) {
        colo_schema_branch b;
        branch_copy(&b, &in->b[i]);
        step(g, &b, c, out);
    }
    return out->n > 0;
}

bool colo_schema_feed(const colo_schema *g, colo_schema_state *s, const char *bytes, size_t n)
{
    colo_schema_state tmp;
    for (size_t i = 0; i < n; i++) {
        if (!feed_into(g, s, &tmp, (unsigned char)bytes[i])) {
            s->n = 0;
            return false;
        }
        colo_schema_state_copy(s, &tmp);
    }
    return true;
}

bool colo_schema_accepts(const colo_schema *g, const colo_schema_state *s, const char *bytes, size_t n)
{
    colo_schema_state a, b;
    const colo_schema_state *cur = s;
    colo_schema_state *next = &a;
    for (size_t i = 0; i < n; i++) {
        if (!feed_into(g, cur, next, (unsigned char)bytes[i]))
            return false;
        cur = next;
        next = next == &a ? &b : &a;
    }
    return true;
}

/* ---- the mask over a vocabulary ---------------------------------------------------- */

struct colo_schema_vocab {
    int n;
    char **bytes;
    uint16_t *len;
    int32_t *plain; /* characters, when the token is plain string text; -1 when not (or special) */
};

void colo_schema_vocab_free(colo_schema_vocab *v)
{
    if (!v)
        return;
    if (v->bytes)
        for (int i = 0; i < v->n; i++)
            free(v->bytes[i]);
    free(v->bytes);
    free(v->len);
    free(v->plain);
    free(v);
}

/* Characters of b when it is whole UTF-8 text with no quote, backslash
 * or control character; -1 otherwise. */
static int32_t plain_chars(const unsigned char *b, size_t n)
{
    int32_t chars = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = b[i];
        size_t k;
        if (c < 0x20 || c == '"' || c == '\\' || c == 0x7F)
            return -1;
        uint8_t range = 0;
        if (c < 0x80)
            k = 1;
        else if (!(k = (size_t)colo_utf8_lead(c, &range) + 1) || k == 1)
            return -1;
        if (i + k > n)
            return -1;
        for (size_t j = 1; j < k; j++, range = 0)
            if (!colo_utf8_cont_ok(b[i + j], range))
                return -1;
        i += k;
        chars++;
    }
    return chars;
}

colo_schema_vocab *colo_schema_vocab_create(const char *const *bytes, const uint16_t *lens, const bool *special,
                                            int n)
{
    colo_schema_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    v->n = n;
    v->bytes = calloc((size_t)n, sizeof *v->bytes);
    v->len = calloc((size_t)n, sizeof *v->len);
    v->plain = calloc((size_t)n, sizeof *v->plain);
    if (!v->bytes || !v->len || !v->plain)
        goto out_free;
    for (int i = 0; i < n; i++) {
        v->plain[i] = -1;
        if ((special && special[i]) || !lens[i])
            continue; /* len 0: never allowed */
        if (!(v->bytes[i] = malloc(lens[i])))
            goto out_free;
        memcpy(v->bytes[i], bytes[i], lens[i]);
        v->len[i] = lens[i];
        v->plain[i] = plain_chars((const unsigned char *)bytes[i], lens[i]);
    }
    return v;

out_free:
    colo_schema_vocab_free(v);
    return NULL;
}

/* Characters a plain token may still add when s is one branch inside a
 * string that takes any plain text (no pattern, no escape pending); -1
 * when s is not. */
static long plain_room(const colo_schema *g, const colo_schema_state *s)
{
    if (s->n != 1)
        return -1;
    const colo_schema_branch *b = &s->b[0];
    const colo_schema_frame *f = &b->f[b->depth - 1];
    if (f->phase == S_BODY) {
        const node *nd = frame_node(g, f);
        if (f->aux || nd->pattern >= 0)
            return -1;
        return nd->max < 0 ? 1L << 30 : nd->max - f->n;
    }
    if (f->phase == Y_BODY && colo_json_fsm_in_plain_string(&b->any))
        return 1L << 30;
    return -1;
}

/* At most this many allowed first bytes get a table of allowed second
 * bytes (between tokens: whitespace, then a quote or a bracket). */
#define MASK_SECOND_MAX 8

int colo_schema_mask(const colo_schema *g, const colo_schema_state *s, const colo_schema_vocab *v, uint8_t *allowed)
{
    bool first[256];
    int n_first = 0;
    for (int c = 0; c < 256; c++) {
        char ch = (char)c;
        first[c] = colo_schema_accepts(g, s, &ch, 1);
        n_first += first[c];
    }
    /* second[k][c]: whether byte c may follow the k-th allowed first byte */
    static _Thread_local bool second[MASK_SECOND_MAX][256];
    int8_t slot[256];
    memset(slot, -1, sizeof slot);
    if (n_first <= MASK_SECOND_MAX) {
        int k = 0;
        for (int b = 0; b < 256; b++) {
            if (!first[b])
                continue;
            colo_schema_state after;
            colo_schema_state_copy(&after, s);
            char ch = (char)b;
            colo_schema_feed(g, &after, &ch, 1);
            for (int c = 0; c < 256; c++) {
                char c2 = (char)c;
                second[k][c] = colo_schema_accepts(g, &after, &c2, 1);
            }
            slot[b] = (int8_t)k++;
        }
    }
    long room = plain_room(g, s);
    int count = 0;
    for (int i = 0; i < v->n; i++) {
        bool ok;
        const unsigned char *t = (const unsigned char *)v->bytes[i];
        if (!v->len[i] || !first[t[0]])
            ok = false;
        else if (room >= 0 && v->plain[i] >= 0)
            ok = v->plain[i] <= room;
        else if (v->len[i] == 1)
            ok = true;
        else if (slot[t[0]] >= 0 && !second[slot[t[0]]][t[1]])
            ok = false;
        else
            ok = v->len[i] == 2 && slot[t[0]] >= 0 ? true : colo_schema_accepts(g, s, v->bytes[i], v->len[i]);
        allowed[i] = ok;
        count += ok;
    }
    return count;
}
