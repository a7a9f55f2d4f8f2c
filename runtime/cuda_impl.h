/* runtime/cuda_impl.h: what the CUDA backend shares with kernels/cuda.
 * Backend-private: only runtime/backend_cuda.c and kernels/cuda include it.
 * C-compatible (the kernels include it from C++ through extern "C"). */
#ifndef COLO_RUNTIME_CUDA_IMPL_H
#define COLO_RUNTIME_CUDA_IMPL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "runtime/backend_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Turns a CUDA error into a status, logging the call, file and line. Errors
 * that poison the context (illegal address, launch failure, device assert,
 * ...) return COLO_EFATAL and mark the device failed; allocation errors
 * return COLO_ENOMEM; everything else COLO_EDEVICE. */
colo_status colo_cuda_status(cudaError_t e, const char *call, const char *file, int line);
colo_status colo_cublas_status(cublasStatus_t e, const char *call, const char *file, int line);

#define COLO_CUDA_CHECK(call)                                                                             \
    ({                                                                                                    \
        cudaError_t e_ = (call);                                                                          \
        e_ == cudaSuccess ? COLO_OK : colo_cuda_status(e_, #call, __FILE__, __LINE__);                    \
    })
#define COLO_CUBLAS_CHECK(call)                                                                           \
    ({                                                                                                    \
        cublasStatus_t e_ = (call);                                                                       \
        e_ == CUBLAS_STATUS_SUCCESS ? COLO_OK : colo_cublas_status(e_, #call, __FILE__, __LINE__);        \
    })

/* True once an error poisoned this process's CUDA context. */
bool colo_cuda_poisoned(void);

cudaStream_t colo_cuda_stream(const colo_stream *s);
cublasHandle_t colo_cuda_cublas(const colo_stream *s);
/* Per-stream scratch of at least bytes (device memory), grown on demand and
 * kept until the stream is destroyed; NULL with COLO_ENOMEM in *st. Only the
 * stream's owner thread calls it, between ops it queues. */
void *colo_cuda_scratch(colo_stream *s, size_t bytes, colo_status *st);
/* Device int the stream's kernels set (atomicCAS from 0) to a colo_status
 * when they meet bad input (an id out of range); sync returns that status
 * and clears the flag. */
int *colo_cuda_error_flag(colo_stream *s);
/* Records st as the stream's error (the first wins; sync returns it). */
void colo_cuda_stream_fail(colo_stream *s, colo_status st);

#ifdef __cplusplus
}
#endif

#endif
