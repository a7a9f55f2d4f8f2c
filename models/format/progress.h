/* models/format/progress.h: a percentage on the terminal for long work (loading or
 * writing a model of several GiB). It is drawn on stderr, rewritten in place
 * with '\r', only when stderr is a terminal and the work is large; in logs
 * and pipes it prints nothing. One thread updates a given progress. */
#ifndef COLO_MODELS_PROGRESS_H
#define COLO_MODELS_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct colo_progress {
    const char *what; /* "loading model.gguf"; not copied */
    uint64_t total, done;
    int shown_pct;    /* last percentage drawn, -1 before the first */
    bool on;
} colo_progress;

/* Shows progress over total units (bytes) when stderr is a terminal and
 * total >= min_total. */
void colo_progress_begin(colo_progress *p, const char *what, uint64_t total, uint64_t min_total);
/* n more units done; redraws when the percentage changes. */
void colo_progress_add(colo_progress *p, uint64_t n);
/* Clears the line (the caller reports the result its own way). */
void colo_progress_end(colo_progress *p);

#endif
