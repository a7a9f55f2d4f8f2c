/* models/sample/json_fsm.h: a recognizer of JSON prefixes, byte by byte, for
 * constrained decoding (response_format json_object): feeding bytes keeps
 * it in a state from which a valid JSON document can still follow, or
 * reports that none can. The top-level value must be an object.
 *
 * The state is a small value type (copy it to try a token's bytes without
 * committing them). So that a model cannot stall in endless whitespace,
 * digits, text or brackets, what it takes is bounded:
 * - whitespace: none before or after the document; between two tokens
 *   nothing, one space, or one newline followed by at most
 *   COLO_JSON_MAX_INDENT spaces (no tab, no carriage return);
 * - numbers: at most COLO_JSON_MAX_INT_DIGITS digits before the point (no
 *   leading zero: "0", "-0", "12", never "012"), COLO_JSON_MAX_FRAC_DIGITS
 *   after it and COLO_JSON_MAX_EXP_DIGITS in the exponent, so that an
 *   integer fits an int64 and a number stays a finite double;
 * - nesting: COLO_JSON_FSM_MAX_DEPTH;
 * - strings (keys too) and containers only as colo_json_fsm_set_limits
 *   asks (none after init). */
#ifndef COLO_MODELS_JSON_FSM_H
#define COLO_MODELS_JSON_FSM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/utf8.h"

#define COLO_JSON_FSM_MAX_DEPTH 32
#define COLO_JSON_MAX_INDENT 16     /* spaces after the newline between two tokens */
#define COLO_JSON_MAX_INT_DIGITS 16 /* digits before a number's point */
#define COLO_JSON_MAX_FRAC_DIGITS 16 /* digits after it */
#define COLO_JSON_MAX_EXP_DIGITS 2  /* digits of its exponent */

typedef struct colo_json_fsm {
    uint8_t mode;                       /* what comes next (json_fsm.c) */
    uint8_t sub;                        /* inside a string, number or literal */
    uint8_t depth;
    uint8_t ws;                         /* whitespace since the last token (colo_json_ws_step) */
    uint8_t utf8_left;                  /* continuation bytes a string's character still needs */
    uint8_t utf8_range;                 /* the range of the next one (colo_utf8_cont_ok) */
    uint8_t hex_left;                   /* \u digits still to come */
    uint8_t lit;                        /* literal: which (t, f, n) and how far */
    uint8_t lit_pos;
    uint8_t num_len;                    /* digits of the number's part being written */
    uint8_t any_root;                   /* the top-level value may be of any type */
    uint16_t str_chars;                 /* characters of the string being written */
    uint16_t max_chars;                 /* characters of a string at most (0: no bound) */
    uint16_t max_items;                 /* members of an object, items of an array at most (0: no bound) */
    uint8_t stack[COLO_JSON_FSM_MAX_DEPTH]; /* '{' or '[' */
    uint16_t commas[COLO_JSON_FSM_MAX_DEPTH]; /* of each open container so far */
} colo_json_fsm;

/* Whitespace between two tokens: nothing, one space, or one newline and
 * at most COLO_JSON_MAX_INDENT spaces. *ws is what came since the last
 * token (0: nothing, 1: a space, 2 + k: a newline and k spaces); false
 * when c cannot come next (*ws then unchanged). */
static inline bool colo_json_ws_step(uint8_t *ws, unsigned c)
{
    if (c == '\n' && *ws == 0) {
        *ws = 2;
        return true;
    }
    if (c != ' ' || *ws == 1 || *ws >= 2 + COLO_JSON_MAX_INDENT)
        return false;
    *ws = *ws ? (uint8_t)(*ws + 1) : 1;
    return true;
}

void colo_json_fsm_init(colo_json_fsm *s);
/* The same, for a document that may be any value (a number, a string...). */
void colo_json_fsm_init_value(colo_json_fsm *s);
/* Bounds every string (keys too) to max_chars characters (an escape is
 * one) and every object and array to max_items members or items; 0: no
 * bound. Call it after init, before the first byte. */
void colo_json_fsm_set_limits(colo_json_fsm *s, uint16_t max_chars, uint16_t max_items);
/* Feeds n bytes; false (s then undefined) when no valid document can
 * follow them. */
bool colo_json_fsm_feed(colo_json_fsm *s, const char *bytes, size_t n);
/* True when the bytes so far are a whole document (an object). */
bool colo_json_fsm_done(const colo_json_fsm *s);
/* True when the bytes so far are a whole document, or one that a byte
 * other than a digit, '.', 'e' or a sign would end (a top-level number). */
bool colo_json_fsm_complete(const colo_json_fsm *s);
/* True inside a string with no escape or character pending: any text
 * without a quote, backslash or control character may follow. */
bool colo_json_fsm_in_plain_string(const colo_json_fsm *s);

#endif
