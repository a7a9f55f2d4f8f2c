/* A string's pattern: a regular expression to a position automaton
 * (Glushkov's construction) over printable ASCII, at most 62 positions, so
 * that a state is one 64-bit set (models/sample/json_schema_impl.h). */
#include "models/sample/json_schema_impl.h"

#include <stdlib.h>
#include <string.h>

/* Groups nest at most this deep: the parser recurses once per group, and
 * a pattern comes from a client. */
#define MAX_PATTERN_NESTING 32

typedef struct rx {
    const char *p, *end;
    pattern *pat;
    const char *why;
    int depth; /* groups open around the parser's position */
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
        if (r->depth >= MAX_PATTERN_NESTING) {
            r->why = "nests groups too deeply (at most 32 levels)";
            return false;
        }
        r->depth++;
        bool ok = rx_alt(r, out);
        r->depth--;
        if (!ok)
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
                rx sub = {start, atom_end, r->pat, NULL, r->depth};
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

/* dist[p]: the fewest characters from position p to an end (PAT_FAR:
 * none), by relaxing follow edges until nothing changes; shortest: of a
 * whole match. A position whose class is empty is never entered. */
static void pattern_distances(pattern *pt)
{
    uint64_t usable = 0;
    for (int p = 0; p < pt->n_pos; p++) {
        pt->dist[p] = pt->last >> p & 1 ? 0 : PAT_FAR;
        if (pt->cls[p][0] | pt->cls[p][1])
            usable |= 1ull << p;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (int p = 0; p < pt->n_pos; p++)
            for (int q = 0; q < pt->n_pos; q++)
                if ((pt->follow[p] & usable) >> q & 1 && pt->dist[q] + 1 < pt->dist[p]) {
                    pt->dist[p] = (uint16_t)(pt->dist[q] + 1);
                    changed = true;
                }
    }
    pt->shortest = pt->nullable ? 0 : PAT_FAR;
    for (int q = 0; q < pt->n_pos; q++)
        if ((pt->first & usable) >> q & 1 && pt->dist[q] + 1 < pt->shortest)
            pt->shortest = pt->dist[q] + 1;
}

bool colo_schema_pattern_build(pattern *pt, const char *src, const char **why)
{
    memset(pt, 0, sizeof *pt);
    size_t len = strlen(src);
    bool start_anchor = len && src[0] == '^';
    bool end_anchor = len > (size_t)start_anchor && src[len - 1] == '$' && (len < 2 || src[len - 2] != '\\');
    rx r = {src + start_anchor, src + len - end_anchor, pt, NULL, 0};
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
    pattern_distances(pt);
    return true;

bad:
    *why = r.why ? r.why : "is not supported";
    return false;
}
