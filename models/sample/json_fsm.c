/* JSON prefix recognizer (RFC 8259), byte by byte. */
#include "models/sample/json_fsm.h"

#include <string.h>

enum {
    M_VALUE,        /* a value (the top level: an object) */
    M_KEY_OR_CLOSE, /* after '{': a key or '}' */
    M_KEY,          /* after ',' in an object */
    M_COLON,        /* after a key */
    M_VALUE_OR_CLOSE, /* after '[': a value or ']' */
    M_AFTER,        /* after a value in a container: ',' or the closing bracket */
    M_STRING,       /* inside a string (sub: 1 when it is a key) */
    M_NUMBER,       /* inside a number (sub: its state) */
    M_LITERAL,      /* inside true, false or null */
    M_DONE,         /* the document is complete */
};

/* number states */
enum { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

static const char *const literals[] = {"true", "false", "null"};

void colo_json_fsm_init(colo_json_fsm *s)
{
    memset(s, 0, sizeof *s);
    s->mode = M_VALUE;
}

void colo_json_fsm_init_value(colo_json_fsm *s)
{
    colo_json_fsm_init(s);
    s->any_root = 1;
}

void colo_json_fsm_set_limits(colo_json_fsm *s, uint16_t max_chars, uint16_t max_items)
{
    s->max_chars = max_chars;
    s->max_items = max_items;
}

bool colo_json_fsm_done(const colo_json_fsm *s) { return s->mode == M_DONE; }

bool colo_json_fsm_in_plain_string(const colo_json_fsm *s)
{
    return s->mode == M_STRING && !(s->sub & 2) && !s->hex_left && !s->utf8_left;
}

bool colo_json_fsm_complete(const colo_json_fsm *s)
{
    if (s->mode == M_DONE)
        return true;
    return s->mode == M_NUMBER && s->depth == 0 &&
           (s->sub == N_ZERO || s->sub == N_INT || s->sub == N_FRAC || s->sub == N_EXP);
}

static bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
static bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* A value ended: back to its container, or done at the top. */
static void value_done(colo_json_fsm *s) { s->mode = s->depth ? M_AFTER : M_DONE; }

static bool open(colo_json_fsm *s, unsigned char c)
{
    if (s->depth >= COLO_JSON_FSM_MAX_DEPTH)
        return false;
    s->commas[s->depth] = 0;
    s->stack[s->depth++] = c;
    s->mode = c == '{' ? M_KEY_OR_CLOSE : M_VALUE_OR_CLOSE;
    return true;
}

static bool close(colo_json_fsm *s, unsigned char c)
{
    if (c != '}' && c != ']')
        return false;
    if (!s->depth || s->stack[s->depth - 1] != (c == '}' ? '{' : '['))
        return false;
    s->depth--;
    value_done(s);
    return true;
}

/* The first byte of a value. */
static bool begin_value(colo_json_fsm *s, unsigned char c)
{
    if (s->depth == 0 && c != '{' && !s->any_root)
        return false; /* json_object: the document is an object */
    if (c == '{' || c == '[')
        return open(s, c);
    if (c == '"') {
        s->mode = M_STRING, s->sub = 0, s->str_chars = 0;
        return true;
    }
    if (c == '-' || is_digit(c)) {
        s->mode = M_NUMBER, s->sub = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT;
        s->num_len = s->sub == N_INT;
        return true;
    }
    for (int i = 0; i < 3; i++)
        if (c == (unsigned char)literals[i][0]) {
            s->mode = M_LITERAL, s->lit = (uint8_t)i, s->lit_pos = 1;
            return true;
        }
    return false;
}

static bool string_byte(colo_json_fsm *s, unsigned char c)
{
    if (s->hex_left) { /* \uXXXX, not a surrogate (D800-DFFF: the character is written as UTF-8) */
        if (!is_hex(c))
            return false;
        if (s->hex_left == 3 && s->lit && strchr("89abcdefABCDEF", c))
            return false;
        s->lit = s->hex_left == 4 && (c == 'd' || c == 'D');
        s->hex_left--;
        return true;
    }
    if (s->utf8_left) {
        if (!colo_utf8_cont_ok(c, s->utf8_range))
            return false;
        s->utf8_range = 0;
        s->utf8_left--;
        return true;
    }
    if (s->sub & 2) { /* after a backslash (counted) */
        s->sub &= (uint8_t)~2;
        if (c == 'u') {
            s->hex_left = 4;
            return true;
        }
        return strchr("\"\\/bfnrt", c) != NULL && c != 0;
    }
    if (c == '"') {
        if (s->sub & 1)
            s->mode = M_COLON;
        else
            value_done(s);
        s->sub = 0;
        return true;
    }
    if (c < 0x20 || (s->max_chars && s->str_chars >= s->max_chars))
        return false;
    if (c == '\\')
        s->sub |= 2;
    else if (c >= 0x80) {
        int k = colo_utf8_lead(c, &s->utf8_range);
        if (!k)
            return false;
        s->utf8_left = (uint8_t)k;
    }
    s->str_chars++;
    return true;
}

/* One byte of a number; *ended when c is not part of it (then c is
 * handled after the number). */
static bool number_byte(colo_json_fsm *s, unsigned char c, bool *ended)
{
    *ended = false;
    if (is_digit(c) && s->sub != N_ZERO && s->sub != N_MINUS) { /* num_len: digits of the part being written */
        if (s->sub == N_DOT || s->sub == N_E || s->sub == N_ESIGN)
            s->num_len = 0; /* a part begins */
        int most = s->sub == N_INT                          ? COLO_JSON_MAX_INT_DIGITS
                   : s->sub == N_DOT || s->sub == N_FRAC    ? COLO_JSON_MAX_FRAC_DIGITS
                                                            : COLO_JSON_MAX_EXP_DIGITS;
        if (++s->num_len > most)
            return false;
    }
    switch (s->sub) {
    case N_MINUS:
        if (!is_digit(c))
            return false;
        s->sub = c == '0' ? N_ZERO : N_INT;
        s->num_len = 1;
        return true;
    case N_ZERO:
    case N_INT:
        if (is_digit(c) && s->sub == N_INT)
            return true;
        if (c == '.') {
            s->sub = N_DOT;
            return true;
        }
        if (c == 'e' || c == 'E') {
            s->sub = N_E;
            return true;
        }
        break;
    case N_DOT:
        if (!is_digit(c))
            return false;
        s->sub = N_FRAC;
        return true;
    case N_FRAC:
        if (is_digit(c))
            return true;
        if (c == 'e' || c == 'E') {
            s->sub = N_E;
            return true;
        }
        break;
    case N_E:
        if (c == '+' || c == '-') {
            s->sub = N_ESIGN;
            return true;
        }
        if (!is_digit(c))
            return false;
        s->sub = N_EXP;
        return true;
    case N_ESIGN:
        if (!is_digit(c))
            return false;
        s->sub = N_EXP;
        return true;
    case N_EXP:
        if (is_digit(c))
            return true;
        break;
    }
    *ended = true; /* a complete number followed by c */
    value_done(s);
    return true;
}

static bool feed_byte(colo_json_fsm *s, unsigned char c)
{
    if (s->mode == M_STRING)
        return string_byte(s, c);
    if (s->mode == M_LITERAL) {
        const char *l = literals[s->lit];
        if (c != (unsigned char)l[s->lit_pos])
            return false;
        if (!l[++s->lit_pos])
            value_done(s);
        return true;
    }
    if (s->mode == M_NUMBER) {
        bool ended;
        if (!number_byte(s, c, &ended))
            return false;
        if (!ended)
            return true;
    }
    if (is_ws(c)) { /* nothing before or after the document */
        if (s->mode == M_DONE || (s->mode == M_VALUE && s->depth == 0))
            return false;
        return colo_json_ws_step(&s->ws, c);
    }
    s->ws = 0;
    switch (s->mode) {
    case M_VALUE: return begin_value(s, c);
    case M_KEY_OR_CLOSE:
        if (c == '}')
            return close(s, c);
        /* fall through */
    case M_KEY:
        if (c != '"')
            return false;
        s->mode = M_STRING, s->sub = 1, s->str_chars = 0;
        return true;
    case M_COLON:
        if (c != ':')
            return false;
        s->mode = M_VALUE;
        return true;
    case M_VALUE_OR_CLOSE:
        if (c == ']')
            return close(s, c);
        return begin_value(s, c);
    case M_AFTER:
        if (c == ',') { /* one more member or item, when the bound leaves room */
            if (s->max_items && s->commas[s->depth - 1] + 1 >= s->max_items)
                return false;
            s->commas[s->depth - 1]++;
            s->mode = s->stack[s->depth - 1] == '{' ? M_KEY : M_VALUE;
            return true;
        }
        return close(s, c);
    default: return false; /* M_DONE: nothing after the document */
    }
}

bool colo_json_fsm_feed(colo_json_fsm *s, const char *bytes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!feed_byte(s, (unsigned char)bytes[i]))
            return false;
    return true;
}
