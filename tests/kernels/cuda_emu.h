/* tests/kernels/cuda_emu.h: enough of CUDA, on the host, to run a kernel's
 * source as written (C++ only): each thread of a block is a host thread,
 * __syncthreads and __syncwarp are a barrier of the whole block (a stronger
 * order than a warp's, which a kernel that calls __syncwarp from every
 * thread the same number of times cannot tell apart), blocks run one after
 * another, and __shared__ variables are the function's statics. What it
 * checks is a kernel's indexing and its use of shared memory and barriers
 * against a host reference; not speed, not device arithmetic (code under
 * __CUDA_ARCH__ takes its host branch). */
#ifndef COLO_TESTS_KERNELS_CUDA_EMU_H
#define COLO_TESTS_KERNELS_CUDA_EMU_H

#include <pthread.h>
#include <stdlib.h>

#include <algorithm>
#include <vector>

using std::min;

struct alignas(16) int4 {
    int x, y, z, w;
};
struct alignas(8) float2 {
    float x, y;
};
static inline float2 make_float2(float a, float b) { return {a, b}; }

struct emu_dim3 {
    unsigned x, y, z;
};
static thread_local emu_dim3 threadIdx, blockIdx;
static emu_dim3 blockDim, gridDim;
static pthread_barrier_t emu_bar;

static inline void __syncthreads() { pthread_barrier_wait(&emu_bar); }
static inline void __syncwarp() { pthread_barrier_wait(&emu_bar); }

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __restrict__
#define __shared__ static

/* Runs f() as the kernel's body on a grid of grid_x x grid_y blocks of
 * `threads` threads (each host thread takes its thread of every block in
 * turn); aborts when a thread cannot start, since those started would wait
 * for it at the first barrier. */
template <typename F> static void emu_launch(unsigned grid_x, unsigned grid_y, unsigned threads, F f)
{
    struct arg {
        F *f;
        unsigned t;
    };
    gridDim = {grid_x, grid_y, 1};
    blockDim = {threads, 1, 1};
    pthread_barrier_init(&emu_bar, NULL, threads);
    std::vector<pthread_t> th(threads);
    std::vector<arg> args(threads);
    unsigned started = 0;
    for (; started < threads; started++) {
        args[started] = {&f, started};
        auto body = [](void *p) -> void * {
            arg *a = (arg *)p;
            threadIdx = {a->t, 0, 0};
            for (unsigned by = 0; by < gridDim.y; by++)
                for (unsigned bx = 0; bx < gridDim.x; bx++) {
                    blockIdx = {bx, by, 0};
                    (*a->f)();
                    pthread_barrier_wait(&emu_bar); /* the block's statics are the next block's */
                }
            return NULL;
        };
        if (pthread_create(&th[started], NULL, body, &args[started]) != 0)
            break;
    }
    if (started < threads)
        abort();
    for (unsigned t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&emu_bar);
}

#endif
