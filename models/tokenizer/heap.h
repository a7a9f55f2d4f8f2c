/* models/tokenizer/heap.h: a binary min-heap over an array of a value type, as
 * static functions generated per use (the merge candidates of the BPE and
 * SentencePiece tokenizers):
 *
 *   COLO_HEAP_DEFINE(heap, cand, cand_before)
 *
 * defines heap_push(cand *h, int *n, cand c) and cand heap_pop(cand *h,
 * int *n) (n > 0), ordered by bool cand_before(const cand *, const cand *),
 * which must be a strict order (the first popped is the one before all). */
#ifndef COLO_MODELS_HEAP_H
#define COLO_MODELS_HEAP_H

#define COLO_HEAP_DEFINE(prefix, T, before)                                                                        \
    static void prefix##_push(T *h, int *n, T c)                                                                  \
    {                                                                                                              \
        int i = (*n)++;                                                                                            \
        while (i > 0 && before(&c, &h[(i - 1) / 2])) {                                                            \
            h[i] = h[(i - 1) / 2];                                                                                 \
            i = (i - 1) / 2;                                                                                       \
        }                                                                                                          \
        h[i] = c;                                                                                                  \
    }                                                                                                              \
    static T prefix##_pop(T *h, int *n)                                                                           \
    {                                                                                                              \
        T top = h[0], last = h[--*n];                                                                              \
        int i = 0;                                                                                                 \
        for (;;) {                                                                                                 \
            int c = 2 * i + 1;                                                                                     \
            if (c >= *n)                                                                                           \
                break;                                                                                             \
            if (c + 1 < *n && before(&h[c + 1], &h[c]))                                                            \
                c++;                                                                                               \
            if (!before(&h[c], &last))                                                                             \
                break;                                                                                             \
            h[i] = h[c];                                                                                           \
            i = c;                                                                                                 \
        }                                                                                                          \
        if (*n > 0)                                                                                                \
            h[i] = last;                                                                                           \
        return top;                                                                                                \
    }

#endif
