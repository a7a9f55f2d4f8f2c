/* models/json_fsm.h: a recognizer of JSON prefixes, byte by byte, for
 * constrained decoding (response_format json_object): feeding bytes keeps
 * it in a state from which a valid JSON document can still follow, or
 * reports that none can. The top-level value must be an object.
 *
 * The state is a small value type (copy it to try a token's bytes without
 * committing them). Whitespace between tokens is limited (a run of at most
 * COLO_JSON_MAX_WS bytes) and nesting to COLO_JSON_FSM_MAX_DEPTH, so that a
 * model cannot stall in endless spaces or brackets; a number has at most
 * 15 digits before its point and 2 in its exponent (so it stays a finite
 * double, and an integer an int64). */
#ifndef COLO_MODELS_JSON_FSM_H
#define COLO_MODELS_JSON_FSM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/utf8.h"

#define COLO_JSON_FSM_MAX_DEPTH 32
#define COLO_JSON_MAX_WS 4

typedef struct colo_json_fsm {
    uint8_t mode;                       /* what comes next (json_fsm.c) */
    uint8_t sub;                        /* inside a string, number or literal */
    uint8_t depth;
    uint8_t ws;                         /* whitespace bytes in a row */
    uint8_t utf8_left;                  /* continuation bytes a string's character still needs */
    uint8_t utf8_range;                 /* the range of the next one (colo_utf8_cont_ok) */
    uint8_t hex_left;                   /* \u digits still to come */
    uint8_t lit;                        /* literal: which (t, f, n) and how far */
    uint8_t lit_pos;
    uint8_t num_len;                    /* digits of a number's integer part or exponent */
    uint8_t any_root;                   /* the top-level value may be of any type */
    uint8_t stack[COLO_JSON_FSM_MAX_DEPTH]; /* '{' or '[' */
} colo_json_fsm;

void colo_json_fsm_init(colo_json_fsm *s);
/* The same, for a document that may be any value (a number, a string...). */
void colo_json_fsm_init_value(colo_json_fsm *s);
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
