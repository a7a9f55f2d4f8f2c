/* Writes quant_ref.txt: rows quantized by GGML's own quantizers and
 * dequantized by GGML's own dequantizers, for every block type colo reads.
 * Not part of the build; see README.md for how it was compiled and run. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ggml.h"

static uint64_t state = 0x9e3779b97f4a7c15ull;
static double uniform(void)
{
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return ((state >> 11) + 0.5) / 9007199254740992.0;
}

int main(void)
{
    const enum ggml_type types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,
                                    GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    enum { N = 512 };
    float x[N], y[N];
    static unsigned char q[N * 4];
    printf("# type n / input floats / blocks (hex) / dequantized floats (hex floats)\n");
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        /* Normal values, a different spread per 32, an outlier, a zero run. */
        for (int i = 0; i < N; i++) {
            double g = sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform());
            x[i] = (float)(g * (0.02 + 0.1 * ((i / 32) % 7)) + ((i / 64) % 3 == 1 ? 0.05 : 0.0));
        }
        x[77] = 1.5f;
        for (int i = 300; i < 332; i++)
            x[i] = 0;
        size_t bytes = ggml_quantize_chunk(types[t], x, q, 0, 1, N, NULL);
        ggml_get_type_traits(types[t])->to_float(q, y, N);
        printf("%s %d\n", ggml_type_name(types[t]), N);
        for (int i = 0; i < N; i++)
            printf("%a%c", x[i], i + 1 < N ? ' ' : '\n');
        for (size_t i = 0; i < bytes; i++)
            printf("%02x", q[i]);
        printf("\n");
        for (int i = 0; i < N; i++)
            printf("%a%c", y[i], i + 1 < N ? ' ' : '\n');
    }
    return 0;
}
