/* linear (y = x W^T + b) on the CPU. Chunks split the output columns (W
 * rows), so each worker reads a disjoint part of W, once.
 *
 * Paths, by the weight type, the CPU and the number of rows m of x:
 * - gemm_q8 (block formats on CPUs with AVX512-VNNI or AVX2, any m,
 *   prefill and decode alike, unless the stream wants exact activations):
 *   an op queued first rounds x to two 8-bit digits per block of 32 and
 *   packs it in groups of 16 rows, then gemm_q8.c multiplies it by the
 *   weight rows, unpacked to bytes COLO_CPU_GEMM_Q8_ROWS at a time. A row's
 *   result does not depend on the other rows, on m or on the CPU's
 *   instruction set.
 * - int8 (every block format elsewhere, m < colo_cpu_int8_max_rows, or m <
 *   colo_cpu_int8_max_decode_rows in a decode step (colo_stream_set_decode),
 *   unless the stream wants exact activations): an op queued first
 *   quantizes each row of x to one 8-bit digit per block into the stream's
 *   scratch, once (blocks of 32 with a scale each; for the K-quants blocks
 *   of 256 with one scale and sums per 16); then each weight row, in its
 *   file format, is dotted with up to COLO_CPU_DOT_ROWS rows of x at a time
 *   by integer products (dot.c, dot_k.c).
 * - float chains (m < FLOAT_DOT_MAX_ROWS): weight rows are read as F32 or
 *   F16 directly, or expanded to per-thread scratch, by colo_cpu_gemv_chain.
 * - tiles (the rest: exact prefill): TILE_ROWS weight rows at a time are
 *   expanded to F32 scratch, packed, and multiplied by colo_cpu_gemm_f32.
 * Both of the last two compute every output as one FMA chain over k in
 * order (gemm_f32.c), so a row's result does not depend on the other rows,
 * their count or the path: F32 and F16 weights give a row the same bits in
 * a decode step and in a prefill.
 * In a mixed step (colo_stream_set_decode_rows) off gemm_q8, the decode
 * rows and the prefill rows are two products, each on its own path, so a
 * decode row gets the bits a decode step of the same rows gives it; on
 * gemm_q8 one product gives every row those bits. */
#include "kernels/cpu/cpu_kernels.h"

#include <string.h>

/* Rows of x below which quantized weights take the int8 path where gemm_q8
 * does not serve them (see cpu_kernels.h). Only single rows by default:
 * there, multi-row products (prefill) keep exact F32 activations. */
int colo_cpu_int8_max_rows = 2;
/* The same in decode steps, where each row is one sequence's token: up to 8
 * rows round to 8 bits, as each would alone. Expanding every weight
 * to F32 for the tile path costs as much as the products themselves at that size (a
 * 4-row step took 6.5x a 1-row one); from about 16 rows the tiles win. */
int colo_cpu_int8_max_decode_rows = 9;
/* Rows from which gemm_q8 serves a product: every row count, so that a
 * row's bits never depend on its batch (its narrow kernel serves a few
 * rows about as fast as the int8 dot products; docs/BENCHMARKS.md, "Prefill
 * on 8-bit digits"). */
int colo_cpu_q8_min_rows = 1;
/* Rows of x below which float weights are read row by row (no packing). */
#define FLOAT_DOT_MAX_ROWS 9
#define TILE_ROWS 64
/* The int8 path: weight rows per tile, and x rows a tile meets at most. */
#define INT8_TILE_ROWS 16
#define INT8_GROUP_ROWS 32

typedef struct {
    const void *w;
    colo_dtype w_type;
    const float *bias;
    const float *x;
    float *y;
    int x_stride, y_stride, m, n, k;
    const colo_blk_q8x *xq; /* (m, k / 32) x quantized by the op queued before, or NULL */
    const colo_blk_q8k *xk; /* (m, k / 256) the same for the K-quants, or NULL */
    const colo_q8_xblk *xv; /* x packed for gemm_q8, or NULL */
    bool pack_in_chunk;     /* gemm_q8 with xv NULL: each chunk packs x itself (pack_here) */
    const float *up;        /* with pack_in_chunk: x is the gate of x and up (swiglu; geglu when tanh_gelu) */
    bool tanh_gelu;
} linear_args;

static void linear_int8(const linear_args *a, int64_t r0, int64_t r1)
{
    size_t row_bytes = colo_dtype_row_bytes(a->w_type, a->k);
    colo_cpu_vec_dot_fn dot = colo_cpu_vec_dot_for(a->w_type);
    colo_cpu_vec_dot_k_fn dot_k = colo_cpu_vec_dot_k_for(a->w_type);
    size_t nb = (size_t)a->k / 32, nbk = (size_t)a->k / 256;
    /* A tile of weight rows meets each group of x rows in turn (the tile
     * stays in L1 across the groups), and its outputs gather in buf, then go
     * to y as runs of INT8_TILE_ROWS floats rather than one float per row of
     * y each (rows n floats apart). Thread CPU time per block and x row at
     * 4096 x 4096, 8 to 16 rows: 0.83-0.91 ns against 0.89-1.19 ns when each
     * weight row met every x row before the next. Each output's instruction
     * sequence is unchanged (x rows in the same groups of 4). */
    float buf[INT8_GROUP_ROWS][INT8_TILE_ROWS];
    for (int i0 = 0; i0 < a->m; i0 += INT8_GROUP_ROWS) {
        int mg = a->m - i0 < INT8_GROUP_ROWS ? a->m - i0 : INT8_GROUP_ROWS;
        for (int64_t t0 = r0; t0 < r1; t0 += INT8_TILE_ROWS) {
            int nt = (int)(r1 - t0 < INT8_TILE_ROWS ? r1 - t0 : INT8_TILE_ROWS);
            for (int i = 0; i < mg; i += COLO_CPU_DOT_ROWS) {
                int nr = mg - i < COLO_CPU_DOT_ROWS ? mg - i : COLO_CPU_DOT_ROWS;
                for (int t = 0; t < nt; t++) {
                    float out[COLO_CPU_DOT_ROWS];
                    const void *wr = (const unsigned char *)a->w + (size_t)(t0 + t) * row_bytes;
                    if (a->xk)
                        dot_k(a->k, wr, a->xk + (size_t)(i0 + i) * nbk, nbk, nr, out);
                    else
                        dot(a->k, wr, a->xq + (size_t)(i0 + i) * nb, nb, nr, out);
                    for (int j = 0; j < nr; j++)
                        buf[i + j][t] = out[j];
                }
            }
            for (int i = 0; i < mg; i++) {
                float *y = a->y + (int64_t)(i0 + i) * a->y_stride + t0;
                for (int t = 0; t < nt; t++)
                    y[t] = buf[i][t] + (a->bias ? a->bias[t0 + t] : 0.0f);
            }
        }
    }
}

static void linear_float_dots(const linear_args *a, int64_t r0, int64_t r1)
{
    size_t row_bytes = colo_dtype_row_bytes(a->w_type, a->k);
    const unsigned char *w = (const unsigned char *)a->w;
    if (a->w_type == COLO_F32 || a->w_type == COLO_F16) {
        colo_cpu_gemv_chain(a->m, (int)(r1 - r0), a->k, a->x, a->x_stride, w + (size_t)r0 * row_bytes, row_bytes,
                            a->w_type == COLO_F16, a->y + r0, a->y_stride);
    } else {
        float *tile = colo_cpu_scratch(1, (size_t)TILE_ROWS * (size_t)a->k * sizeof(float));
        if (!tile) {
            colo_cpu_task_fail(COLO_ENOMEM);
            return;
        }
        for (int64_t t0 = r0; t0 < r1; t0 += TILE_ROWS) {
            int rows = (int)(r1 - t0 < TILE_ROWS ? r1 - t0 : TILE_ROWS);
            for (int r = 0; r < rows; r++)
                colo_dequantize_row(a->w_type, w + (size_t)(t0 + r) * row_bytes, tile + (size_t)r * a->k, a->k);
            colo_cpu_gemv_chain(a->m, rows, a->k, a->x, a->x_stride, tile, (size_t)a->k * sizeof(float), false,
                                a->y + t0, a->y_stride);
        }
    }
    if (a->bias)
        for (int i = 0; i < a->m; i++)
            for (int64_t r = r0; r < r1; r++)
                a->y[(int64_t)i * a->y_stride + r] += a->bias[r];
}

static void linear_tiles(const linear_args *a, int64_t r0, int64_t r1)
{
    size_t row_bytes = colo_dtype_row_bytes(a->w_type, a->k);
    float *tile = NULL;
    float *packed = colo_cpu_scratch(0, colo_cpu_gemm_packed_floats(TILE_ROWS, a->k) * sizeof(float));
    if (a->w_type != COLO_F32)
        tile = colo_cpu_scratch(1, (size_t)TILE_ROWS * (size_t)a->k * sizeof(float));
    if (!packed || (a->w_type != COLO_F32 && !tile)) {
        colo_cpu_task_fail(COLO_ENOMEM);
        return;
    }
    for (int64_t t0 = r0; t0 < r1; t0 += TILE_ROWS) {
        int rows = (int)(r1 - t0 < TILE_ROWS ? r1 - t0 : TILE_ROWS);
        const float *wt;
        if (tile) {
            for (int r = 0; r < rows; r++)
                colo_dequantize_row(a->w_type, (const unsigned char *)a->w + (size_t)(t0 + r) * row_bytes,
                                    tile + (size_t)r * a->k, a->k);
            wt = tile;
        } else {
            wt = (const float *)a->w + (size_t)t0 * a->k;
        }
        colo_cpu_gemm_pack(wt, a->k, rows, a->k, packed);
        colo_cpu_gemm_f32(a->m, rows, a->k, a->x, a->x_stride, packed, a->y + t0, a->y_stride);
    }
    if (a->bias)
        for (int i = 0; i < a->m; i++)
            for (int64_t r = r0; r < r1; r++)
                a->y[(int64_t)i * a->y_stride + r] += a->bias[r];
}

/* At most this many rows of x (a decode step's, or a speculative step's
 * verification of a draft), gemm_q8's chunks each pack x themselves into
 * their thread's scratch instead of after an op of its own: packing up to
 * 16 rows costs less than the synchronisation of the workers an op costs,
 * and a decode step then runs one op per product, not two (and its norms
 * and gated activations inside them). Every chunk packs the same bits, so
 * the outputs are unchanged. 16, not 4: a step of 5 to 16 rows took 11 to
 * 26 % longer with the ops apart (docs/BENCHMARKS.md). */
#define PACK_IN_CHUNK_ROWS 16

/* x (m <= PACK_IN_CHUNK_ROWS, k) packed for gemm_q8 into this thread's
 * scratch (slot 1, which the gemm_q8 path does not otherwise use); NULL,
 * and the op failed, when out of memory. */
static const colo_q8_xblk *pack_here(const float *x, int x_stride, int m, int k)
{
    colo_q8_xblk *xp = colo_cpu_scratch(1, colo_cpu_gemm_q8_x_bytes(m, k));
    if (!xp) {
        colo_cpu_task_fail(COLO_ENOMEM);
        return NULL;
    }
    colo_cpu_gemm_q8_pack_x(x, x_stride, m, k, 0, (m + COLO_CPU_GEMM_Q8_GROUP - 1) / COLO_CPU_GEMM_Q8_GROUP, xp);
    return xp;
}

/* pack_here of the gated x: swiglu (geglu) of gate and up (m, k), formed
 * in this thread's scratch (slot 2, free in a product's chunk). */
static const colo_q8_xblk *pack_gated_here(const float *gate, const float *up, bool tanh_gelu, int m, int k)
{
    float *x = colo_cpu_scratch(2, (size_t)m * k * sizeof(float));
    if (!x) {
        colo_cpu_task_fail(COLO_ENOMEM);
        return NULL;
    }
    colo_cpu_glu_range(gate, up, x, 0, (int64_t)m * k, tanh_gelu);
    return pack_here(x, k, m, k);
}

/* Rows [r0, r1) on gemm_q8. */
static void linear_q8(const linear_args *a, int64_t r0, int64_t r1)
{
    const colo_q8_xblk *xv = a->xv                     ? a->xv
                             : a->up                   ? pack_gated_here(a->x, a->up, a->tanh_gelu, a->m, a->k)
                                                       : pack_here(a->x, a->x_stride, a->m, a->k);
    void *scratch = colo_cpu_scratch(0, colo_cpu_gemm_q8_scratch_bytes(a->k));
    if (!xv || !scratch) {
        if (!scratch)
            colo_cpu_task_fail(COLO_ENOMEM);
        return;
    }
    colo_cpu_gemm_q8(a->w, a->w_type, r0, r1, a->k, xv, a->m, a->bias, a->y, a->y_stride, scratch);
}

/* Chunk c of nc over n rows in whole runs of COLO_CPU_GEMM_Q8_ROWS. */
static void q8_chunk_range(int64_t n, int c, int nc, int64_t *r0, int64_t *r1)
{
    const int64_t unit = COLO_CPU_GEMM_Q8_ROWS;
    colo_chunk_range((n + unit - 1) / unit, c, nc, r0, r1);
    *r0 *= unit;
    *r1 = *r1 * unit < n ? *r1 * unit : n;
}

static void linear_task(const void *p, int chunk, int n_chunks)
{
    const linear_args *a = p;
    int64_t r0, r1;
    if (a->xv || a->pack_in_chunk) {
        q8_chunk_range(a->n, chunk, n_chunks, &r0, &r1);
        if (r0 < r1)
            linear_q8(a, r0, r1);
        return;
    }
    colo_chunk_range(a->n, chunk, n_chunks, &r0, &r1);
    if (r0 == r1)
        return;
    if (a->xq || a->xk)
        linear_int8(a, r0, r1);
    else if (a->m < FLOAT_DOT_MAX_ROWS)
        linear_float_dots(a, r0, r1);
    else
        linear_tiles(a, r0, r1);
}

typedef struct {
    const float *x;
    int x_stride, k, m;
    colo_blk_q8x *out;
    colo_blk_q8k *out_k; /* instead of out, for the K-quants */
} quant_args;

static void quantize_task(const void *p, int chunk, int n_chunks)
{
    const quant_args *q = p;
    int64_t lo, hi;
    colo_chunk_range(q->m, chunk, n_chunks, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        if (q->out_k)
            colo_cpu_quantize_q8k(q->x + i * q->x_stride, q->out_k + (size_t)i * (size_t)(q->k / 256), q->k);
        if (q->out)
            colo_cpu_quantize_q8x(q->x + i * q->x_stride, q->out + (size_t)i * (size_t)(q->k / 32), q->k);
    }
}

/* Whether linear takes gemm_q8 for m rows of weights of type t. */
static bool q8_path(colo_stream *s, colo_dtype t, int m)
{
    return m >= colo_cpu_q8_min_rows && !colo_cpu_exact(s) && colo_cpu_gemm_q8_cpu() &&
           colo_cpu_gemm_q8_has(t);
}

typedef struct {
    const float *x;
    int x_stride, m, k;
    colo_q8_xblk *xp;
} pack_args;

static void pack_task(const void *p, int chunk, int n_chunks)
{
    const pack_args *q = p;
    int64_t g0, g1;
    colo_chunk_range((q->m + COLO_CPU_GEMM_Q8_GROUP - 1) / COLO_CPU_GEMM_Q8_GROUP, chunk, n_chunks, &g0, &g1);
    if (g0 < g1)
        colo_cpu_gemm_q8_pack_x(q->x, q->x_stride, q->m, q->k, (int)g0, (int)g1, q->xp);
}

/* Queues the packing of x (m, k) for gemm_q8 into the stream's scratch. */
static colo_status pack_x(colo_stream *s, const float *x, int x_stride, int m, int k, colo_q8_xblk **xp)
{
    *xp = colo_cpu_stream_scratch(s, colo_cpu_gemm_q8_x_bytes(m, k));
    if (!*xp)
        return COLO_ENOMEM;
    pack_args q = {x, x_stride, m, k, *xp};
    return colo_cpu_launch(s, pack_task, &q, sizeof q, (m + COLO_CPU_GEMM_Q8_GROUP - 1) / COLO_CPU_GEMM_Q8_GROUP);
}

/* Whether [p, p + n floats) and [q, q + n2 floats) overlap. */
static bool overlap(const float *p, int64_t n, const float *q, int64_t n2)
{
    return (uintptr_t)p < (uintptr_t)(q + n2) && (uintptr_t)q < (uintptr_t)(p + n);
}

/* Chunks of a product that packs x in each chunk (a decode step's): each
 * chunk streams at least DECODE_CHUNK_BYTES of weights, or there is one per
 * worker. Such a product is short (tens of microseconds) and bound by the
 * memory's speed, so a chunk more is a pack of x and a pass through the
 * pool's lock more, and buys no balance the workers need; a large one (an
 * output projection) keeps colo_cpu_chunks' split. */
#define DECODE_CHUNK_BYTES ((size_t)1 << 20)

static int decode_chunks(colo_stream *s, size_t w_bytes, int64_t n, int m, int k)
{
    int nc = colo_cpu_chunks(s, (n + COLO_CPU_GEMM_Q8_ROWS - 1) / COLO_CPU_GEMM_Q8_ROWS,
                             2.0 * m * k * COLO_CPU_GEMM_Q8_ROWS);
    int64_t by_bytes = (int64_t)(w_bytes / DECODE_CHUNK_BYTES);
    int threads = colo_cpu_stream_threads(s);
    if (by_bytes < threads)
        by_bytes = threads;
    return nc > by_bytes ? (int)by_bytes : nc;
}

/* Queues x's packing and sets *xv (a field of args) to it, or for at most
 * PACK_IN_CHUNK_ROWS rows of an x that no output overwrites (y_end: the
 * outputs' [start, end) ranges, n_y of them) sets *in_chunk instead; then
 * launches fn over n weight rows on gemm_q8. */
static colo_status launch_q8(colo_stream *s, const float *x, int x_stride, int m, int k, const colo_q8_xblk **xv,
                             bool *in_chunk, const float *(*y_range)[2], int n_y, colo_cpu_task_fn fn,
                             const void *args, size_t args_size, int64_t n, size_t w_bytes)
{
    bool here = m <= PACK_IN_CHUNK_ROWS;
    int64_t x_len = (int64_t)(m - 1) * x_stride + k;
    for (int i = 0; i < n_y && here; i++)
        here = !overlap(x, x_len, y_range[i][0], y_range[i][1] - y_range[i][0]);
    if (here) {
        *in_chunk = true;
    } else {
        colo_q8_xblk *xp;
        colo_status st = pack_x(s, x, x_stride, m, k, &xp);
        if (st != COLO_OK)
            return st;
        *xv = xp;
    }
    int nc = here ? decode_chunks(s, w_bytes, n, m, k)
                  : colo_cpu_chunks(s, (n + COLO_CPU_GEMM_Q8_ROWS - 1) / COLO_CPU_GEMM_Q8_ROWS,
                                    2.0 * m * k * COLO_CPU_GEMM_Q8_ROWS);
    return colo_cpu_launch(s, fn, args, args_size, nc < 1 ? 1 : nc);
}

/* Whether linear takes the int8 path for m rows of weights of type t. */
static bool int8_path(colo_stream *s, colo_dtype t, int m)
{
    int int8_rows = colo_stream_decode(s) ? colo_cpu_int8_max_decode_rows : colo_cpu_int8_max_rows;
    return m < int8_rows && (colo_cpu_vec_dot_k_for(t) || colo_cpu_vec_dot_for(t)) && !colo_cpu_exact(s);
}

/* Queues the quantization of x (m, k) into the stream's scratch: to blocks
 * of 32 when want_q8x, to K-quant blocks when want_q8k (both: one after the
 * other in the scratch). */
static colo_status quantize_x(colo_stream *s, const float *x, int x_stride, int m, int k, bool want_q8x,
                              bool want_q8k, colo_blk_q8x **xq, colo_blk_q8k **xk)
{
    size_t bytes_k = want_q8k ? ((size_t)m * (size_t)(k / 256) * sizeof(colo_blk_q8k) + 63) & ~(size_t)63 : 0;
    size_t bytes_x = want_q8x ? (size_t)m * (size_t)(k / 32) * sizeof(colo_blk_q8x) : 0;
    unsigned char *buf = colo_cpu_stream_scratch(s, bytes_k + bytes_x);
    if (!buf)
        return COLO_ENOMEM;
    *xk = want_q8k ? (colo_blk_q8k *)buf : NULL;
    *xq = want_q8x ? (colo_blk_q8x *)(buf + bytes_k) : NULL;
    quant_args q = {x, x_stride, k, m, *xq, *xk};
    return colo_cpu_launch(s, quantize_task, &q, sizeof q, colo_cpu_chunks(s, m, 4.0 * k * (want_q8x + want_q8k)));
}

/* A mixed step (colo_stream_set_decode_rows): its first d rows are
 * products of a decode step of d rows, the others a prefill's. *d gets the
 * decode rows when m rows split so (0 < d < m), else 0. */
static bool mixed_rows(colo_stream *s, int m, int *d)
{
    *d = colo_stream_decode_rows(s);
    if (*d > 0 && *d < m)
        return true;
    *d = 0;
    return false;
}

colo_status colo_cpu_linear(colo_stream *s, const void *w, colo_dtype w_type, const float *bias, const float *x,
                            int x_stride, float *y, int y_stride, int m, int n, int k)
{
    int d;
    /* On gemm_q8 a decode row gets the same bits in any product: no split. */
    if (!q8_path(s, w_type, m) && mixed_rows(s, m, &d)) {
        int xs = x_stride ? x_stride : k, ys = y_stride ? y_stride : n;
        colo_stream_set_decode(s, true);
        colo_status st = colo_cpu_linear(s, w, w_type, bias, x, xs, y, ys, d, n, k);
        colo_stream_set_decode(s, false);
        if (st == COLO_OK)
            st = colo_cpu_linear(s, w, w_type, bias, x + (size_t)d * xs, xs, y + (size_t)d * ys, ys, m - d, n, k);
        colo_stream_set_decode_rows(s, d);
        return st;
    }
    linear_args a = {w, w_type, bias, x, y, x_stride ? x_stride : k, y_stride ? y_stride : n, m, n, k, NULL, NULL,
                     NULL, false, NULL, false};
    if (q8_path(s, w_type, m)) {
        const float *yr[1][2] = {{y, y + (int64_t)(m - 1) * a.y_stride + n}};
        return launch_q8(s, x, a.x_stride, m, k, &a.xv, &a.pack_in_chunk, yr, 1, linear_task, &a, sizeof a, n,
                         colo_dtype_row_bytes(w_type, k) * (size_t)n);
    }
    if (int8_path(s, w_type, m)) {
        /* x is quantized once, by an op of its own, into the stream's scratch. */
        bool k_quant = colo_cpu_vec_dot_k_for(w_type) != NULL;
        colo_blk_q8x *xq;
        colo_blk_q8k *xk;
        colo_status st = quantize_x(s, x, a.x_stride, m, k, !k_quant, k_quant, &xq, &xk);
        if (st != COLO_OK)
            return st;
        a.xq = xq, a.xk = xk;
    }
    int nc = colo_cpu_chunks(s, n, 2.0 * m * k);
    /* Tiles: keep chunks at least a tile tall. */
    if (!a.xq && !a.xk && m >= FLOAT_DOT_MAX_ROWS && nc > (n + TILE_ROWS - 1) / TILE_ROWS)
        nc = (n + TILE_ROWS - 1) / TILE_ROWS;
    return colo_cpu_launch(s, linear_task, &a, sizeof a, nc < 1 ? 1 : nc);
}

colo_status colo_cpu_linear_glu(colo_stream *s, const void *w, colo_dtype w_type, const float *bias, float *gate,
                                const float *up, bool tanh_gelu, float *y, int m, int n, int k)
{
    /* In each chunk where it packs x itself: a decode step's gate and down
     * projection in one op; otherwise the two ops. */
    int64_t x_len = (int64_t)m * k, y_len = (int64_t)m * n;
    if (q8_path(s, w_type, m) && m <= PACK_IN_CHUNK_ROWS && !overlap(gate, x_len, y, y_len) &&
        !overlap(up, x_len, y, y_len)) {
        linear_args a = {w, w_type, bias, gate, y, k, n, m, n, k, NULL, NULL, NULL, true, up, tanh_gelu};
        int nc = decode_chunks(s, colo_dtype_row_bytes(w_type, k) * (size_t)n, n, m, k);
        return colo_cpu_launch(s, linear_task, &a, sizeof a, nc < 1 ? 1 : nc);
    }
    colo_status st = tanh_gelu ? colo_cpu_geglu(s, gate, up, gate, x_len) : colo_cpu_swiglu(s, gate, up, gate, x_len);
    return st == COLO_OK ? colo_cpu_linear(s, w, w_type, bias, gate, 0, y, 0, m, n, k) : st;
}

/* Several products of one x on the int8 path: x quantized once (to each
 * activation format the weights need), then one op whose chunks split the
 * weight rows of all products together. */
typedef struct {
    const float *x;
    int x_stride, m, k, n_out;
    const colo_blk_q8x *xq;
    const colo_blk_q8k *xk;
    const colo_q8_xblk *xv;
    bool pack_in_chunk; /* as linear_args' */
    colo_linear_out out[COLO_LINEAR_MULTI_MAX];
    /* add_rmsnorm_multi (pro_w set): x is formed in each chunk as
     * add_rmsnorm's y of these, chunk 0 writing x_out */
    const float *pro_x, *pro_h, *pro_w_pre, *pro_w;
    float *pro_x_out;
    float pro_eps;
} multi_args;
_Static_assert(sizeof(multi_args) <= COLO_CPU_TASK_ARGS_MAX, "multi_args must fit a task's arguments");

/* add_rmsnorm_multi's rows of x, formed in this thread's scratch (slot 2,
 * free in a product's chunk) by add_rmsnorm's arithmetic; x_out written
 * where write_x. NULL, and the op failed, when out of memory. */
static const float *add_norm_here(const multi_args *a, bool write_x)
{
    size_t rn = (size_t)a->m * a->k;
    float *y = colo_cpu_scratch(2, 3 * rn * sizeof(float));
    if (!y) {
        colo_cpu_task_fail(COLO_ENOMEM);
        return NULL;
    }
    float *h = y + rn, *x = h + rn;
    for (int i = 0; i < a->m; i++) {
        size_t o = (size_t)i * a->k;
        colo_cpu_add_rms_row(a->pro_x + o, a->pro_h + o, a->pro_w_pre, a->pro_w, write_x ? a->pro_x_out + o : x + o,
                             h + o, y + o, a->k, a->pro_eps);
    }
    return y;
}

static void linear_multi_task(const void *p, int chunk, int n_chunks)
{
    const multi_args *a = p;
    int64_t total = 0;
    for (int i = 0; i < a->n_out; i++)
        total += a->out[i].n;
    int64_t r0, r1, base = 0;
    colo_chunk_range(total, chunk, n_chunks, &r0, &r1);
    if (a->xv || a->pack_in_chunk) { /* in runs of COLO_CPU_GEMM_Q8_ROWS within each product */
        int64_t units = 0;
        for (int i = 0; i < a->n_out; i++)
            units += (a->out[i].n + COLO_CPU_GEMM_Q8_ROWS - 1) / COLO_CPU_GEMM_Q8_ROWS;
        colo_chunk_range(units, chunk, n_chunks, &r0, &r1);
        const colo_q8_xblk *xv = a->xv;
        const float *x = a->x;
        if (a->pro_w && (r0 < r1 || chunk == 0) && !(x = add_norm_here(a, chunk == 0)))
            return;
        if (r0 < r1 && !xv && !(xv = pack_here(x, a->pro_w ? a->k : a->x_stride, a->m, a->k)))
            return;
        for (int i = 0; i < a->n_out && base < r1; i++) {
            const colo_linear_out *o = &a->out[i];
            int64_t nu = (o->n + COLO_CPU_GEMM_Q8_ROWS - 1) / COLO_CPU_GEMM_Q8_ROWS;
            int64_t lo = r0 > base ? r0 - base : 0, hi = r1 - base < nu ? r1 - base : nu;
            base += nu;
            if (lo >= hi)
                continue;
            linear_args la = {o->w, o->w_type, o->bias, a->x, o->y, a->x_stride, o->y_stride ? o->y_stride : o->n,
                              a->m, o->n, a->k, NULL, NULL, xv, false, NULL, false};
            int64_t hi_row = hi * COLO_CPU_GEMM_Q8_ROWS;
            linear_q8(&la, lo * COLO_CPU_GEMM_Q8_ROWS, hi_row < o->n ? hi_row : o->n);
        }
        return;
    }
    for (int i = 0; i < a->n_out && base < r1; base += a->out[i].n, i++) {
        const colo_linear_out *o = &a->out[i];
        int64_t lo = r0 > base ? r0 - base : 0, hi = r1 - base < o->n ? r1 - base : o->n;
        if (lo >= hi)
            continue;
        bool k_quant = colo_cpu_vec_dot_k_for(o->w_type) != NULL;
        linear_args la = {o->w,       o->w_type, o->bias, a->x, o->y, a->x_stride, o->y_stride ? o->y_stride : o->n,
                          a->m,       o->n,      a->k,    k_quant ? NULL : a->xq, k_quant ? a->xk : NULL, NULL, false, NULL, false};
        linear_int8(&la, lo, hi);
    }
}

/* Fills a for the n_out (<= COLO_LINEAR_MULTI_MAX) products; returns their
 * weight rows in all. */
static int64_t multi_init(multi_args *a, const float *x, int x_stride, int m, int k, const colo_linear_out *out,
                          int n_out)
{
    *a = (multi_args){.x = x, .x_stride = x_stride ? x_stride : k, .m = m, .k = k, .n_out = n_out};
    int64_t total = 0;
    for (int i = 0; i < n_out; i++)
        a->out[i] = out[i], total += out[i].n;
    return total;
}

colo_status colo_cpu_linear_multi(colo_stream *s, const float *x, int x_stride, int m, int k,
                                  const colo_linear_out *out, int n_out)
{
    int d;
    bool q8 = n_out <= COLO_LINEAR_MULTI_MAX;
    for (int i = 0; i < n_out && q8; i++)
        q8 = q8_path(s, out[i].w_type, m);
    if (!q8 && mixed_rows(s, m, &d) && n_out <= COLO_LINEAR_MULTI_MAX) {
        int xs = x_stride ? x_stride : k;
        colo_stream_set_decode(s, true);
        colo_status st = colo_cpu_linear_multi(s, x, xs, d, k, out, n_out);
        colo_stream_set_decode(s, false);
        colo_linear_out rest[COLO_LINEAR_MULTI_MAX];
        for (int i = 0; i < n_out; i++) {
            rest[i] = out[i];
            int ys = out[i].y_stride ? out[i].y_stride : out[i].n;
            rest[i].y = out[i].y + (size_t)d * ys;
            rest[i].y_stride = ys;
        }
        if (st == COLO_OK)
            st = colo_cpu_linear_multi(s, x + (size_t)d * xs, xs, m - d, k, rest, n_out);
        colo_stream_set_decode_rows(s, d);
        return st;
    }
    if (q8) {
        multi_args a;
        int64_t total = multi_init(&a, x, x_stride, m, k, out, n_out);
        const float *yr[COLO_LINEAR_MULTI_MAX][2];
        size_t w_bytes = 0;
        for (int i = 0; i < n_out; i++) {
            w_bytes += colo_dtype_row_bytes(out[i].w_type, k) * (size_t)out[i].n;
            int ys = out[i].y_stride ? out[i].y_stride : out[i].n;
            yr[i][0] = out[i].y, yr[i][1] = out[i].y + (int64_t)(m - 1) * ys + out[i].n;
        }
        return launch_q8(s, x, a.x_stride, m, k, &a.xv, &a.pack_in_chunk, yr, n_out,
                         linear_multi_task, &a, sizeof a, total, w_bytes);
    }
    bool int8 = n_out <= COLO_LINEAR_MULTI_MAX, want_q8x = false, want_q8k = false;
    for (int i = 0; i < n_out && int8; i++) {
        int8 = int8_path(s, out[i].w_type, m);
        if (colo_cpu_vec_dot_k_for(out[i].w_type))
            want_q8k = true;
        else
            want_q8x = true;
    }
    if (!int8)
        return colo_linear_each(colo_cpu_linear, s, x, x_stride, m, k, out, n_out);
    multi_args a;
    int64_t total = multi_init(&a, x, x_stride, m, k, out, n_out);
    colo_blk_q8x *xq;
    colo_blk_q8k *xk;
    colo_status st = quantize_x(s, x, a.x_stride, m, k, want_q8x, want_q8k, &xq, &xk);
    if (st != COLO_OK)
        return st;
    a.xq = xq, a.xk = xk;
    return colo_cpu_launch(s, linear_multi_task, &a, sizeof a, colo_cpu_chunks(s, total, 2.0 * m * k));
}

colo_status colo_cpu_add_rmsnorm_multi(colo_stream *s, const float *x, float *h, const float *w_pre, const float *w,
                                       float *x_out, float *y, int rows, int n, float eps, const colo_linear_out *out,
                                       int n_out)
{
    /* In each chunk: at most PACK_IN_CHUNK_ROWS rows on gemm_q8, whose
     * outputs overwrite none of what the chunks read, nor x_out h */
    bool fused = rows <= PACK_IN_CHUNK_ROWS && n_out <= COLO_LINEAR_MULTI_MAX;
    int64_t len = (int64_t)rows * n;
    fused = fused && !overlap(x_out, len, h, len);
    size_t w_bytes = 0;
    int64_t total = 0;
    for (int i = 0; i < n_out && fused; i++) {
        int ys = out[i].y_stride ? out[i].y_stride : out[i].n;
        int64_t yl = (int64_t)(rows - 1) * ys + out[i].n;
        fused = q8_path(s, out[i].w_type, rows) && !overlap(out[i].y, yl, x, len) && !overlap(out[i].y, yl, h, len) &&
                !overlap(out[i].y, yl, x_out, len);
        w_bytes += colo_dtype_row_bytes(out[i].w_type, n) * (size_t)out[i].n;
        total += out[i].n;
    }
    if (!fused) {
        colo_status st = colo_cpu_add_rmsnorm(s, x, h, w_pre, w, x_out, y, rows, n, eps);
        return st == COLO_OK ? colo_cpu_linear_multi(s, y, 0, rows, n, out, n_out) : st;
    }
    multi_args a;
    multi_init(&a, y, n, rows, n, out, n_out);
    a.pack_in_chunk = true;
    a.pro_x = x, a.pro_h = h, a.pro_w_pre = w_pre, a.pro_w = w, a.pro_x_out = x_out, a.pro_eps = eps;
    int nc = decode_chunks(s, w_bytes, total, rows, n);
    return colo_cpu_launch(s, linear_multi_task, &a, sizeof a, nc < 1 ? 1 : nc);
}
