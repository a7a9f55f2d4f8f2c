/* models/sample/json_schema.h: a JSON Schema compiled to a byte-level pushdown
 * automaton, for constrained decoding (response_format json_schema, forced
 * tool calls).
 *
 * colo_schema_compile reads the subset of JSON Schema that OpenAI's strict
 * mode accepts: type (a name or a list of names), object properties /
 * required / additionalProperties (false or absent: no other property is
 * ever written), array items / minItems / maxItems, string minLength /
 * maxLength / pattern (a regular expression of literals, classes, '.',
 * groups, '|', and the quantifiers ? * + {m,n}; such a string is written in
 * printable ASCII without escapes), integer, number, boolean, null, enum,
 * const, anyOf, and $ref into #/$defs or #/definitions (not recursive).
 * Annotations (title, description, default, examples, $schema, $id,
 * $comment, strict) are ignored. Anything else is refused with the
 * keyword and where it is ("unsupported keyword 'patternProperties' at
 * #/properties/x"). The root must be an object (or an anyOf of objects).
 *
 * What the automaton lets through is always a prefix of a document that
 * validates against the schema, and every such prefix can be completed:
 * properties come in the schema's order (an optional one may be left
 * out), keys are written exactly as the schema names them. So that a
 * document ends, everything a model could repeat is bounded
 * (models/sample/json_fsm.h has the numbers):
 * - whitespace: none before or after the document; between two tokens
 *   nothing, one space, or one newline and at most COLO_JSON_MAX_INDENT
 *   spaces;
 * - numbers: at most COLO_JSON_MAX_INT_DIGITS digits before the point,
 *   with no leading zero, COLO_JSON_MAX_FRAC_DIGITS after it,
 *   COLO_JSON_MAX_EXP_DIGITS in the exponent;
 * - a string with no maxLength: at most options.default_max_length
 *   characters (or its minLength, or its pattern's shortest match, when
 *   more); an array with no maxItems: at most options.default_max_items
 *   items (or its minItems); a value the schema leaves open (json_object,
 *   {}) takes both bounds for its strings and its objects' and arrays'
 *   members.
 *
 * A compiled schema is immutable (share it between threads); a state is a
 * value (copy it with colo_schema_state_copy) that one thread feeds. */
#ifndef COLO_MODELS_JSON_SCHEMA_H
#define COLO_MODELS_JSON_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "models/sample/json_fsm.h"

#define COLO_SCHEMA_MAX_DEPTH 24    /* nesting of the document */
#define COLO_SCHEMA_MAX_BRANCHES 8  /* anyOf alternatives followed at once */
#define COLO_SCHEMA_MAX_PROPS 64    /* properties of one object, values of one enum */
#define COLO_SCHEMA_MAX_NODES 4096

typedef struct colo_schema colo_schema;

/* The bounds a schema leaves open (0: none; at most 65535). */
#define COLO_SCHEMA_DEFAULT_MAX_LENGTH 256 /* characters of a string */
#define COLO_SCHEMA_DEFAULT_MAX_ITEMS 16   /* items of an array, members of an open object */

typedef struct colo_schema_options {
    int default_max_length; /* characters of a string whose schema sets no maxLength */
    int default_max_items;  /* items of an array whose schema sets no maxItems, members of an any-object */
} colo_schema_options;

#define COLO_SCHEMA_OPTIONS_DEFAULT \
    ((colo_schema_options){COLO_SCHEMA_DEFAULT_MAX_LENGTH, COLO_SCHEMA_DEFAULT_MAX_ITEMS})

typedef struct colo_schema_frame {
    uint16_t node;  /* index into the schema's nodes (or the root) */
    uint8_t phase;  /* where in the node (json_schema.c) */
    uint8_t aux;    /* string escapes, number state */
    uint16_t i;     /* object: the property; array: items so far */
    uint16_t n;     /* bytes or characters so far */
    uint64_t mask;  /* key or enum candidates; a pattern's automaton states */
} colo_schema_frame;

typedef struct colo_schema_branch {
    uint8_t depth;
    uint8_t ws;          /* whitespace bytes in a row */
    colo_json_fsm any;   /* the value of a schema that allows anything */
    colo_schema_frame f[COLO_SCHEMA_MAX_DEPTH];
} colo_schema_branch;

typedef struct colo_schema_state {
    int n; /* live branches; 0: dead */
    colo_schema_branch b[COLO_SCHEMA_MAX_BRANCHES];
} colo_schema_state;

/* Compiles the schema text (JSON). NULL with a message in err ("unsupported
 * keyword 'x' at #/properties/y", "not JSON: ...") when it cannot. The
 * caller frees it with colo_schema_free. */
colo_schema *colo_schema_compile(const char *json, size_t len, char *err, size_t errlen);
/* The same with other bounds for what the schema leaves open (NULL: the
 * defaults, as colo_schema_compile). */
colo_schema *colo_schema_compile_opts(const char *json, size_t len, const colo_schema_options *opt, char *err,
                                      size_t errlen);
/* A schema that accepts any JSON object (response_format json_object),
 * within the default bounds; _opts: within opt's (NULL: the defaults). */
colo_schema *colo_schema_any_object(void);
colo_schema *colo_schema_any_object_opts(const colo_schema_options *opt);
void colo_schema_free(colo_schema *g);

void colo_schema_state_init(const colo_schema *g, colo_schema_state *s);
/* Copies only what is in use of src. */
void colo_schema_state_copy(colo_schema_state *dst, const colo_schema_state *src);
/* Feeds n bytes; false (s then dead) when no valid document can follow. */
bool colo_schema_feed(const colo_schema *g, colo_schema_state *s, const char *bytes, size_t n);
/* Whether n bytes could follow s (s is not changed). */
bool colo_schema_accepts(const colo_schema *g, const colo_schema_state *s, const char *bytes, size_t n);
/* True when the bytes so far are a whole document. */
bool colo_schema_done(const colo_schema_state *s);

/* A model's vocabulary as the mask reads it: each token's bytes, and
 * whether it is text that can sit unescaped inside a JSON string (then how
 * many characters it is). Immutable once made. */
typedef struct colo_schema_vocab colo_schema_vocab;

/* From n tokens' bytes (bytes[i], lens[i]; a special token or one of no
 * bytes is never allowed). The arrays are copied. NULL when out of memory. */
colo_schema_vocab *colo_schema_vocab_create(const char *const *bytes, const uint16_t *lens, const bool *special,
                                            int n);
void colo_schema_vocab_free(colo_schema_vocab *v);

/* allowed[i] = 1 for every token whose bytes can follow s, else 0; the
 * count allowed. Work per call: one step per possible first byte, then
 * only the tokens that start with an allowed byte are tried, and inside a
 * string (no pattern) tokens of plain text are allowed by their length
 * alone. */
int colo_schema_mask(const colo_schema *g, const colo_schema_state *s, const colo_schema_vocab *v, uint8_t *allowed);

#endif
