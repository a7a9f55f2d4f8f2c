/* models/sample/json_schema_impl.h: the compiled schema's tables, shared by the
 * compiler (json_schema_compile.c, json_schema_pattern.c) and the automaton
 * (json_schema.c). Private to those files. */
#ifndef COLO_MODELS_JSON_SCHEMA_IMPL_H
#define COLO_MODELS_JSON_SCHEMA_IMPL_H

#include "models/sample/json_schema.h"

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
#define MAX_PATTERN_POS 62
#define PAT_INIT (1ull << 63)
#define PAT_FAR 0xFFFF /* no end can be reached */

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
    uint16_t dist[MAX_PATTERN_POS]; /* fewest characters from each position to an end (PAT_FAR: none) */
    int shortest;                   /* characters of the shortest match (PAT_FAR: none) */
} pattern;

typedef struct node {
    uint8_t kind;
    int n;            /* properties, alternatives or literals */
    int first;        /* index of the first in g->props, g->alts or g->lits */
    uint64_t required; /* object: bit i = property i is required */
    int items;        /* array: the items' node */
    int min, max;     /* array: items; string: characters (max -1: none; a default when the schema sets none) */
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
    colo_schema_options opt; /* what it was compiled with */
};

/* The pattern's position automaton from a regular expression (the subset
 * models/sample/json_schema.h names); false with *why (a phrase: "is too long",
 * "uses an escape colo does not support"...) when it cannot. */
bool colo_schema_pattern_build(pattern *pt, const char *src, const char **why);

#endif
