#include "batching/continuous.h"

#include <stdlib.h>

struct colo_continuous {
    colo_continuous_config cfg;
    colo_block_allocator al;
    colo_seq *running;    /* admission order, oldest first */
    colo_seq *waiting[4]; /* per level (level_of: the batch class, then each priority), FIFO */
    int n_running;
    int n_waiting;
    uint64_t next_order;
    uint64_t n_preemptions;
    uint64_t prefix_queries, prefix_hit_tokens;
    int batch_rows, batch_tokens; /* what a step may give the batch class now (colo_continuous_set_batch_share) */
    double batch_floor;  /* colo_continuous_set_batch_floor */
    double batch_credit; /* [-1, 1]: the floor's account, in steps: each step while the batch has
                          * work adds the floor, each step that holds its work takes 1 */
    uint64_t n_floor_steps;
};

colo_continuous *colo_continuous_create(const colo_continuous_config *cfg, const colo_block_allocator *alloc)
{
    if (!cfg || !alloc || cfg->block_size <= 0 || cfg->max_running <= 0 ||
        cfg->max_step_tokens < cfg->max_running || cfg->total_blocks <= 0)
        return NULL;
    colo_continuous *cb = calloc(1, sizeof *cb);
    if (!cb)
        return NULL;
    cb->cfg = *cfg;
    if (cb->cfg.batch_step_tokens <= 0)
        cb->cfg.batch_step_tokens = cfg->max_step_tokens / 16 > 0 ? cfg->max_step_tokens / 16 : 1;
    cb->batch_rows = cfg->max_running;
    cb->batch_tokens = cb->cfg.batch_step_tokens;
    cb->al = *alloc;
    return cb;
}

void colo_continuous_destroy(colo_continuous *cb)
{
    if (!cb)
        return;
    COLO_ASSERT(cb->n_running == 0 && cb->n_waiting == 0);
    free(cb);
}

static int blocks_for(const colo_continuous *cb, int n_tokens)
{
    return (n_tokens + cb->cfg.block_size - 1) / cb->cfg.block_size;
}

static int prio_level(colo_priority p) { return p == COLO_PRIO_HIGH ? 2 : p == COLO_PRIO_LOW ? 0 : 1; }

/* A sequence's level: the batch class (0) below every priority. */
static int level_of(const colo_seq *s) { return s->batch ? 0 : 1 + prio_level(s->priority); }

static void list_remove(colo_seq **head, colo_seq *s)
{
    for (colo_seq **pp = head; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            s->next = NULL;
            return;
        }
    }
}

static void list_append(colo_seq **head, colo_seq *s)
{
    colo_seq **pp = head;
    while (*pp)
        pp = &(*pp)->next;
    s->next = NULL;
    *pp = s;
}

colo_status colo_continuous_add(colo_continuous *cb, colo_seq *s)
{
    if (s->n_tokens <= 0 || s->n_tokens > s->cap)
        return COLO_EINVAL;
    int need = blocks_for(cb, s->n_tokens);
    if (need > s->max_blocks || need > cb->cfg.total_blocks)
        return COLO_EINVAL;
    s->n_cached = 0;
    s->n_blocks = 0;
    s->n_published = 0;
    s->n_prompt = s->n_tokens;
    s->state = COLO_SEQ_WAITING;
    list_append(&cb->waiting[level_of(s)], s);
    cb->n_waiting++;
    return COLO_OK;
}

static void release_blocks(colo_continuous *cb, colo_seq *s)
{
    if (s->n_blocks)
        cb->al.free(cb->al.ctx, s->blocks, s->n_blocks);
    s->n_blocks = 0;
    s->n_cached = 0;
    s->n_published = 0;
}

/* Lowest priority first, then the most recently admitted. */
static colo_seq *pick_victim(colo_continuous *cb)
{
    colo_seq *v = NULL;
    for (colo_seq *s = cb->running; s; s = s->next)
        if (!v || level_of(s) < level_of(v) || (level_of(s) == level_of(v) && s->admit_order > v->admit_order))
            v = s;
    return v;
}

static void preempt(colo_continuous *cb, colo_seq *v)
{
    list_remove(&cb->running, v);
    cb->n_running--;
    release_blocks(cb, v);
    v->state = COLO_SEQ_WAITING;
    v->n_preempted++;
    v->n_prompt = v->n_tokens; /* readmitted, all its text is computed by a prefill */
    /* Back to the head of its level: it was admitted before everyone waiting there. */
    colo_seq **head = &cb->waiting[level_of(v)];
    v->next = *head;
    *head = v;
    cb->n_waiting++;
    cb->n_preemptions++;
}

/* Drops v's entry from the work planned so far, if any; returns its tokens. */
static int unplan(colo_continuous_work *work, int *n_work, const colo_seq *v)
{
    for (int i = 0; i < *n_work; i++) {
        if (work[i].seq == v) {
            int n = work[i].n;
            work[i] = work[--*n_work];
            return n;
        }
    }
    return 0;
}

/* Grows s's blocks to cover its known tokens, preempting others if needed.
 * False when s itself was preempted or stopped. */
static bool ensure_blocks(colo_continuous *cb, colo_seq *s, colo_continuous_work *work, int *n_work, int *budget,
                          colo_seq **stopped, int *n_stopped)
{
    for (;;) {
        int need = blocks_for(cb, s->n_tokens) - s->n_blocks;
        if (need <= 0)
            return true;
        if (blocks_for(cb, s->n_tokens) > s->max_blocks) {
            goto stop;
        }
        colo_status st = cb->al.alloc(cb->al.ctx, need, s->blocks + s->n_blocks);
        if (st == COLO_OK) {
            s->n_blocks += need;
            return true;
        }
        if (st == COLO_EAGAIN)
            return false; /* memory guaranteed to this model is on its way back: wait */
        colo_seq *v = pick_victim(cb);
        if (v == s && cb->n_running == 1) {
            if (cb->al.n_free(cb->al.ctx) >= need)
                return false; /* the cache has the ids, the device not the memory now: wait */
            goto stop; /* alone and still too big: it has outgrown the cache */
        }
        *budget += unplan(work, n_work, v);
        preempt(cb, v);
        if (v == s)
            return false;
    }
stop:
    list_remove(&cb->running, s);
    cb->n_running--;
    release_blocks(cb, s);
    s->state = COLO_SEQ_DONE;
    stopped[(*n_stopped)++] = s;
    return false;
}

/* Extends the planned decodes by their drafts: what the step's budget
 * leaves, in blocks free now, oldest entry first. */
static void plan_drafts(colo_continuous *cb, colo_continuous_work *work, int n_work, int budget)
{
    int left = cb->cfg.max_draft_tokens < budget ? cb->cfg.max_draft_tokens : budget;
    for (int i = 0; i < n_work && left > 0; i++) {
        colo_continuous_work *w = &work[i];
        colo_seq *s = w->seq;
        w->n_draft = 0;
        if (s->n_draft <= 0 || w->n != 1 || !w->logits || w->start + 1 != s->n_tokens)
            continue;
        int want = s->n_draft < left ? s->n_draft : left;
        if (s->n_tokens + want > s->cap)
            want = s->cap - s->n_tokens;
        int need = blocks_for(cb, s->n_tokens + want) - s->n_blocks;
        if (need > 0 && s->n_blocks + need > s->max_blocks)
            need = s->max_blocks - s->n_blocks;
        while (need > 0 && cb->al.alloc(cb->al.ctx, need, s->blocks + s->n_blocks) != COLO_OK)
            need--; /* fewer blocks, a shorter draft */
        if (need > 0)
            s->n_blocks += need;
        int room = s->n_blocks * cb->cfg.block_size - s->n_tokens;
        w->n_draft = want < room ? want : room;
        if (w->n_draft < 0)
            w->n_draft = 0;
        left -= w->n_draft;
    }
}

/* Whether a sequence of the other classes runs or waits to be admitted:
 * the step is then theirs, and plans no batch work unless the floor says
 * (colo_continuous_set_batch_floor). */
static bool others_want_step(const colo_continuous *cb)
{
    for (int lvl = 1; lvl < 4; lvl++)
        if (cb->waiting[lvl])
            return true;
    for (const colo_seq *s = cb->running; s; s = s->next)
        if (!s->batch)
            return true;
    return false;
}

/* Whether a batch sequence waits to be admitted or has tokens to compute. */
static bool batch_has_work(const colo_continuous *cb)
{
    if (cb->waiting[0])
        return true;
    for (const colo_seq *s = cb->running; s; s = s->next)
        if (s->batch && s->n_tokens > s->n_cached)
            return true;
    return false;
}

/* Preempts the most recently admitted running batch sequence, dropping its
 * planned work; false when none runs. */
static bool yield_batch(colo_continuous *cb, colo_continuous_work *work, int *n_work, int *budget)
{
    colo_seq *v = NULL;
    for (colo_seq *s = cb->running; s; s = s->next)
        if (s->batch && (!v || s->admit_order > v->admit_order))
            v = s;
    if (!v)
        return false;
    *budget += unplan(work, n_work, v);
    preempt(cb, v);
    return true;
}

/* The running sequences' work: pass 0 every decode (the batch's unless
 * quiet), pass 1 the other classes' prefill chunks, pass 2 the batch's
 * (unless quiet, within *batch_left), each oldest first. The running list
 * may shrink under preemption, so it is walked by admission order. */
static int plan_running(colo_continuous *cb, colo_continuous_work *work, int *budget, int *batch_left, bool quiet,
                        colo_seq **stopped, int *n_stopped)
{
    int n_work = 0, batch_rows = cb->batch_rows;
    for (int pass = 0; pass < 3; pass++) {
        uint64_t after = 0;
        bool first = true;
        for (;;) {
            colo_seq *s = NULL;
            for (colo_seq *r = cb->running; r; r = r->next)
                if ((first || r->admit_order > after) && (!s || r->admit_order < s->admit_order))
                    s = r;
            if (!s)
                break;
            first = false;
            after = s->admit_order;
            int pending = s->n_tokens - s->n_cached;
            bool decoding = pending == 1;
            if (pending <= 0 || decoding != (pass == 0))
                continue;
            if (s->batch ? quiet || pass == 1 || (pass == 0 && batch_rows <= 0) : pass == 2)
                continue;
            if (!ensure_blocks(cb, s, work, &n_work, budget, stopped, n_stopped))
                continue;
            int n = pending < *budget ? pending : *budget;
            if (pass == 2 && n > *batch_left)
                n = *batch_left;
            if (n <= 0)
                continue;
            work[n_work++] = (colo_continuous_work){s, s->n_cached, n, s->n_cached + n == s->n_tokens, 0};
            *budget -= n;
            if (pass == 2)
                *batch_left -= n;
            if (pass == 0 && s->batch)
                batch_rows--;
        }
    }
    return n_work;
}

int colo_continuous_plan(colo_continuous *cb, colo_continuous_work *work, colo_seq **stopped, int *n_stopped)
{
    int budget = cb->cfg.max_step_tokens, batch_left = cb->batch_tokens;
    bool quiet = others_want_step(cb), owed = cb->batch_floor > 0 && batch_has_work(cb), floor_step = false;
    if (owed) { /* the batch's work joins the others' steps only while its own steps fall short */
        cb->batch_credit += cb->batch_floor;
        if (cb->batch_credit > 1)
            cb->batch_credit = 1;
        floor_step = quiet && cb->batch_credit >= 1 - 1e-9; /* (a tenth added ten times is short of 1) */
        if (floor_step)
            quiet = false;
    }
    *n_stopped = 0;
    int n_work = plan_running(cb, work, &budget, &batch_left, quiet, stopped, n_stopped);

    /* Admission: strict priority, FIFO within a level; no skipping ahead of a
     * sequence that does not fit, so large prompts are not starved. A
     * sequence above the batch class takes the place and the blocks of
     * running batch sequences when it needs them. */
    for (int lvl = 3; lvl >= 0; lvl--) {
        while (cb->waiting[lvl] && budget > 0) {
            if (lvl == 0 && (quiet || batch_left <= 0))
                goto out_drafts;
            if (cb->n_running >= cb->cfg.max_running && !(lvl > 0 && yield_batch(cb, work, &n_work, &budget)))
                break;
            colo_seq *s = cb->waiting[lvl];
            /* The longest cached prefix, in whole blocks, short of the
             * blocks that hold the last two tokens: at least two are
             * computed, so that the step computes them as a prefill (a
             * product of several rows) and the logits are those the whole
             * prompt's prefill gives; one row alone may be rounded to 8
             * bits (a decode product), which can change a greedy token. */
            uint64_t key = 0;
            int max_hit = s->n_tokens >= 2 ? (s->n_tokens - 2) / cb->cfg.block_size : 0;
            int hit = cb->al.match ? cb->al.match(cb->al.ctx, s->root_key, s->tokens, s->n_tokens, max_hit, s->blocks, &key) : 0;
            int need = blocks_for(cb, s->n_tokens) - hit;
            colo_status st;
            while ((st = cb->al.alloc(cb->al.ctx, need, s->blocks + hit)) == COLO_ENOMEM && lvl > 0 &&
                   yield_batch(cb, work, &n_work, &budget))
                ;
            if (st != COLO_OK) {
                if (hit)
                    cb->al.free(cb->al.ctx, s->blocks, hit);
                goto out_drafts;
            }
            s->n_blocks = hit + need;
            s->n_cached = hit * cb->cfg.block_size;
            s->n_published = hit;
            s->last_key = key;
            if (cb->al.match) {
                cb->prefix_queries++;
                cb->prefix_hit_tokens += (uint64_t)s->n_cached;
            }
            if (!s->n_preempted) /* (a readmission finds its own blocks: not what the client saved) */
                s->n_hit = s->n_cached;
            cb->waiting[lvl] = s->next;
            cb->n_waiting--;
            s->state = COLO_SEQ_RUNNING;
            s->admit_order = ++cb->next_order;
            list_append(&cb->running, s);
            cb->n_running++;
            int pending = s->n_tokens - s->n_cached;
            int n = pending < budget ? pending : budget;
            if (lvl == 0 && n > batch_left)
                n = batch_left;
            work[n_work++] = (colo_continuous_work){s, s->n_cached, n, s->n_cached + n == s->n_tokens, 0};
            budget -= n;
            if (lvl == 0)
                batch_left -= n;
        }
        if (cb->waiting[lvl])
            break; /* a higher level is waiting: lower levels wait behind it */
    }
out_drafts:
    if (owed) {
        bool held = false;
        for (int i = 0; i < n_work && !held; i++)
            held = work[i].seq->batch;
        if (held) { /* else the credit stays, and a floor step is tried again at the next */
            cb->batch_credit -= 1;
            if (cb->batch_credit < -1)
                cb->batch_credit = -1;
            cb->n_floor_steps += floor_step;
        }
    }
    if (cb->cfg.max_draft_tokens > 0)
        plan_drafts(cb, work, n_work, budget);
    return n_work;
}

void colo_continuous_set_batch_floor(colo_continuous *cb, double share)
{
    cb->batch_floor = share > 0 && share < 1 ? share : 0;
}

uint64_t colo_continuous_n_floor_steps(const colo_continuous *cb) { return cb->n_floor_steps; }

void colo_continuous_set_batch_share(colo_continuous *cb, int rows, int tokens)
{
    cb->batch_rows = rows < 1 ? 1 : rows > cb->cfg.max_running ? cb->cfg.max_running : rows;
    cb->batch_tokens = tokens < 1 ? 1 : tokens > cb->cfg.batch_step_tokens ? cb->cfg.batch_step_tokens : tokens;
}

void colo_continuous_get_batch_share(const colo_continuous *cb, int *rows, int *tokens)
{
    *rows = cb->batch_rows;
    *tokens = cb->batch_tokens;
}

void colo_continuous_settle(colo_continuous *cb, colo_seq *s, int n_kept)
{
    if (s->state != COLO_SEQ_RUNNING)
        return;
    s->n_cached += n_kept;
    COLO_ASSERT(s->n_cached <= s->n_tokens);
    int keep = blocks_for(cb, s->n_tokens);
    if (s->n_blocks > keep) {
        cb->al.free(cb->al.ctx, s->blocks + keep, s->n_blocks - keep);
        s->n_blocks = keep;
    }
}

int colo_continuous_shed(colo_continuous *cb, int n_blocks)
{
    int freed = 0;
    while (freed < n_blocks && cb->running) {
        colo_seq *v = pick_victim(cb);
        freed += v->n_blocks;
        preempt(cb, v);
    }
    return freed;
}

void colo_continuous_commit(colo_continuous *cb, const colo_continuous_work *work, int n_work)
{
    int bs = cb->cfg.block_size;
    for (int i = 0; i < n_work; i++) {
        colo_seq *s = work[i].seq;
        s->n_cached = work[i].start + work[i].n;
        if (!cb->al.publish)
            continue;
        int full = (s->n_cached < s->n_prompt ? s->n_cached : s->n_prompt) / bs;
        for (; s->n_published < full && s->n_published < s->n_blocks; s->n_published++)
            s->last_key = cb->al.publish(cb->al.ctx, s->blocks[s->n_published], s->last_key,
                                         s->tokens + (size_t)s->n_published * bs);
    }
}

colo_status colo_continuous_fork(colo_continuous *cb, colo_seq *parent, colo_seq *child, int32_t *copy_src, int32_t *copy_dst,
                         int *copy_rows)
{
    *copy_rows = 0;
    if (parent->state != COLO_SEQ_RUNNING || !cb->al.share || child->max_blocks < parent->n_blocks ||
        child->cap < parent->n_tokens)
        return COLO_EINVAL;
    int bs = cb->cfg.block_size;
    int full = parent->n_cached / bs, rows = parent->n_cached % bs;
    child->n_tokens = parent->n_tokens;
    child->n_cached = 0;
    child->n_blocks = 0;
    child->n_published = 0;
    child->n_prompt = parent->n_prompt;
    child->n_preempted = 0;
    child->n_hit = parent->n_hit;
    child->next = NULL;
    if (cb->n_running < cb->cfg.max_running &&
        (!rows || cb->al.alloc(cb->al.ctx, 1, child->blocks + full) == COLO_OK)) {
        cb->al.share(cb->al.ctx, parent->blocks, full);
        for (int b = 0; b < full; b++)
            child->blocks[b] = parent->blocks[b];
        child->n_blocks = full + (rows ? 1 : 0);
        child->n_cached = parent->n_cached;
        child->n_published = parent->n_published; /* (only full blocks are published) */
        child->last_key = parent->last_key;
        child->root_key = parent->root_key;
        child->state = COLO_SEQ_RUNNING;
        child->admit_order = ++cb->next_order;
        list_append(&cb->running, child);
        cb->n_running++;
        if (rows) {
            *copy_src = parent->blocks[full];
            *copy_dst = child->blocks[full];
            *copy_rows = rows;
        }
        return COLO_OK;
    }
    child->state = COLO_SEQ_WAITING; /* computed once admitted (its prompt may be cached) */
    list_append(&cb->waiting[level_of(child)], child);
    cb->n_waiting++;
    return COLO_OK;
}

uint64_t colo_continuous_prefix_queries(const colo_continuous *cb) { return cb->prefix_queries; }
uint64_t colo_continuous_prefix_hit_tokens(const colo_continuous *cb) { return cb->prefix_hit_tokens; }

void colo_continuous_remove(colo_continuous *cb, colo_seq *s)
{
    if (s->state == COLO_SEQ_RUNNING) {
        list_remove(&cb->running, s);
        cb->n_running--;
    } else if (s->state == COLO_SEQ_WAITING) {
        list_remove(&cb->waiting[level_of(s)], s);
        cb->n_waiting--;
    }
    release_blocks(cb, s);
    s->state = COLO_SEQ_DONE;
}

int colo_continuous_n_running(const colo_continuous *cb) { return cb->n_running; }
int colo_continuous_n_waiting(const colo_continuous *cb) { return cb->n_waiting; }
uint64_t colo_continuous_n_preemptions(const colo_continuous *cb) { return cb->n_preemptions; }
