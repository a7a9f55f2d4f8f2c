/* The JSON Schema automaton (models/sample/json_schema.h): a state is a set of
 * branches (one per anyOf alternative still possible), each a stack of
 * frames: the node being written and how far. A byte is fed to every
 * branch; a branch that cannot take it dies, an anyOf met on the way splits
 * one. Then the vocabulary mask. */
#include "models/sample/json_schema_impl.h"

#include <stdlib.h>
#include <string.h>

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
        colo_json_fsm_set_limits(&b->any, (uint16_t)g->opt.default_max_length, (uint16_t)g->opt.default_max_items);
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

static bool number_complete(uint8_t st) { return st == N_ZERO || st == N_INT || st == N_FRAC || st == N_EXP; }

/* i counts the digits of the part being written: before the point (no
 * leading zero), after it, of the exponent (json_fsm.h's bounds). */
static bool number_step(colo_schema_frame *f, unsigned c, bool integer)
{
    uint8_t st = f->aux;
    switch (st) {
    case 0xFF:
    case N_MINUS:
        if (c == '-' && st == 0xFF)
            st = N_MINUS;
        else if (is_digit(c))
            st = c == '0' ? N_ZERO : N_INT, f->i = 1;
        else
            return false;
        break;
    case N_ZERO:
    case N_INT:
        if (is_digit(c) && st == N_INT) {
            if (++f->i > COLO_JSON_MAX_INT_DIGITS)
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
        st = N_FRAC, f->i = 1;
        break;
    case N_FRAC:
        if (c == 'e' || c == 'E')
            st = N_E;
        else if (!is_digit(c) || ++f->i > COLO_JSON_MAX_FRAC_DIGITS)
            return false;
        break;
    case N_E:
    case N_ESIGN:
        if ((c == '+' || c == '-') && st == N_E)
            st = N_ESIGN;
        else if (is_digit(c))
            st = N_EXP, f->i = 1;
        else
            return false;
        break;
    case N_EXP:
        if (!is_digit(c) || ++f->i > COLO_JSON_MAX_EXP_DIGITS)
            return false;
        break;
    default: return false;
    }
    f->aux = st;
    f->n++;
    return true;
}

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
        if (nd->max >= 0) { /* an end stays within reach of the bound */
            int near = PAT_FAR;
            for (int p = 0; p < pt->n_pos; p++)
                if (next >> p & 1 && pt->dist[p] < near)
                    near = pt->dist[p];
            if (f->n + 1 + near > nd->max)
                return false;
        }
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

/* step's phases inside an object: c after '{' or ',', in a key, before
 * the colon, starting the value, after the value. */
static void object_step(const colo_schema *g, colo_schema_branch *b, colo_schema_frame *f, const node *nd, unsigned c,
                        colo_schema_state *out)
{
    switch (f->phase) {
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
    default: return;
    }
}

/* step's phases inside an array: c after '[', after ',', after an item. */
static void array_step(const colo_schema *g, colo_schema_branch *b, colo_schema_frame *f, const node *nd, unsigned c,
                       colo_schema_state *out)
{
    switch (f->phase) {
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
    default: return;
    }
}

/* step's phase inside a literal (enum, const, true, false, null): true
 * when the literal ended before c, which must then go to the frame below. */
static bool literal_step(const colo_schema *g, colo_schema_branch *b, colo_schema_frame *f, const node *nd,
                         unsigned c, colo_schema_state *out)
{
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
        return false;
    }
    if (!complete)
        return false;
    pop(g, b);
    return true;
}

/* step's phase inside any JSON value: true when the value ended before c,
 * which must then go to the frame below. */
static bool any_step(const colo_schema *g, colo_schema_branch *b, unsigned c, colo_schema_state *out)
{
    colo_json_fsm t = b->any;
    if (colo_json_fsm_feed(&t, (const char *)&(char){(char)c}, 1)) {
        b->any = t;
        if (colo_json_fsm_done(&b->any))
            pop(g, b);
        emit(out, b);
        return false;
    }
    if (!colo_json_fsm_complete(&b->any))
        return false;
    pop(g, b);
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
                if (colo_json_ws_step(&b->ws, c))
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
        case O_KEY:
        case O_COLON:
        case O_VALUE:
        case O_AFTER:
            object_step(g, b, f, nd, c, out);
            return;
        case A_FIRST:
        case A_NEXT:
        case A_AFTER:
            array_step(g, b, f, nd, c, out);
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
        case L_BODY:
            if (!literal_step(g, b, f, nd, c, out))
                return;
            continue;
        case Y_BODY:
            if (!any_step(g, b, c, out))
                return;
            continue;
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
        return b->any.max_chars ? b->any.max_chars - b->any.str_chars : 1L << 30;
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
