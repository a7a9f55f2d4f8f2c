#include "models/format/progress.h"

#include <stdio.h>
#include <unistd.h>

void colo_progress_begin(colo_progress *p, const char *what, uint64_t total, uint64_t min_total)
{
    *p = (colo_progress){.what = what, .total = total, .shown_pct = -1};
    p->on = total > 0 && total >= min_total && isatty(STDERR_FILENO);
    colo_progress_add(p, 0);
}

void colo_progress_add(colo_progress *p, uint64_t n)
{
    p->done += n;
    if (!p->on)
        return;
    int pct = (int)((p->done > p->total ? p->total : p->done) * 100 / p->total);
    if (pct == p->shown_pct)
        return;
    p->shown_pct = pct;
    fprintf(stderr, "\r%s: %3d%%", p->what, pct);
    fflush(stderr);
}

void colo_progress_end(colo_progress *p)
{
    if (!p->on)
        return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    p->on = false;
}
