/* runtime/cuda_impl.h: what the CUDA backend (runtime/backend_cuda.c) shares
 * with the CUDA kernels (kernels/cuda). Backend-private: nobody else includes
 * it. C-compatible; the kernels include it from C++ (extern "C" below).
 *
 * Errors: every CUDA runtime or cuBLAS call goes through COLO_CHECK_CUDA or
 * COLO_CHECK_CUBLAS, which log the failing call with file and line and turn
 * the error into a colo_status; nothing aborts the process:
 *   - errors that poison the CUDA context (illegal address, launch failure,
 *     device assert, illegal instruction, misaligned address, ECC, ...) give
 *     COLO_EFATAL and mark the current device poisoned (colo_device_poisoned);
 *   - allocation failures give COLO_ENOMEM;
 *   - every other CUDA error and every cuBLAS error gives COLO_EDEVICE
 *     (cuBLAS's own allocation failure: COLO_ENOMEM). */
#ifndef COLO_RUNTIME_CUDA_IMPL_H
#define COLO_RUNTIME_CUDA_IMPL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "runtime/backend_impl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuBLAS's entry points, from its library opened at the first CUDA stream
 * (colo_cublas_open): a process that never creates one does not load it,
 * and cuBLAS's libraries hold about 140 MiB resident from the moment they
 * are loaded, which on a CPU-only host would be a fixed overhead beside
 * server.cpu_memory_bytes. Call them as colo_cublas.create(...) etc. */
#ifdef __cplusplus
#define COLO_CUBLAS_FN(f) decltype(&f)
#else
#define COLO_CUBLAS_FN(f) __typeof__(&f)
#endif
typedef struct colo_cublas_api {
    COLO_CUBLAS_FN(cublasCreate) create;
    COLO_CUBLAS_FN(cublasDestroy) destroy;
    COLO_CUBLAS_FN(cublasSetStream) set_stream;
    COLO_CUBLAS_FN(cublasSetWorkspace) set_workspace;
    COLO_CUBLAS_FN(cublasSetSmCountTarget) set_sm_count_target;
    COLO_CUBLAS_FN(cublasGetStatusName) status_name;
    COLO_CUBLAS_FN(cublasSgemm) sgemm;
    /* spelled out: C++ sees an inline overload of it besides the export */
    cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                              const void *, const void *, cudaDataType, int, long long,
                                              const void *, cudaDataType, int, long long, const void *, void *,
                                              cudaDataType, int, long long, int, cublasComputeType_t,
                                              cublasGemmAlgo_t);
} colo_cublas_api;
extern colo_cublas_api colo_cublas;
/* Opens cuBLAS once per process (thread-safe): COLO_OK, or COLO_EDEVICE
 * with the loader's reason logged, on every call after a failed open. */
colo_status colo_cublas_open(void);

/* Logs and converts a failed call (e != success); see above. */
colo_status colo_cuda_status(cudaError_t e, const char *call, const char *file, int line);
colo_status colo_cublas_status(cublasStatus_t e, const char *call, const char *file, int line);

static inline colo_status colo_cuda_check_(cudaError_t e, const char *call, const char *file, int line)
{
    return e == cudaSuccess ? COLO_OK : colo_cuda_status(e, call, file, line);
}
static inline colo_status colo_cublas_check_(cublasStatus_t e, const char *call, const char *file, int line)
{
    return e == CUBLAS_STATUS_SUCCESS ? COLO_OK : colo_cublas_status(e, call, file, line);
}

/* Evaluate to a colo_status: COLO_OK, or the converted error. */
#define COLO_CHECK_CUDA(call) colo_cuda_check_((call), #call, __FILE__, __LINE__)
#define COLO_CHECK_CUBLAS(call) colo_cublas_check_((call), #call, __FILE__, __LINE__)

/* True once an error poisoned the context of any CUDA device of this process. */
bool colo_cuda_poisoned(void);

/* ---- a stream's CUDA objects (valid for the stream's lifetime) ------------------------ */

/* The stream (on an SM partition: a green context's stream, which kernel
 * launches and cuBLAS take like any other). Both calls also make the
 * stream's device current on the calling thread (the runtime's current
 * device is per thread, and executor threads never chose one), so an op
 * gets its stream or handle before it queues anything else. */
cudaStream_t colo_cuda_stream(const colo_stream *s);
/* The stream's own cuBLAS handle, bound to colo_cuda_stream(s); on a
 * partition its SM count target is the partition's. */
cublasHandle_t colo_cuda_cublas(const colo_stream *s);
/* SMs the stream's kernels may run on: its green-context partition, or every
 * SM of the device. For sizing grids. */
int colo_cuda_stream_sms(const colo_stream *s);
/* The stream, or its device, wants exact F32 activations in matrix
 * products (colo_stream_config / colo_device_config.exact_activations). */
bool colo_cuda_exact(const colo_stream *s);
/* Largest dynamic shared memory a block may opt in to (bytes). */
size_t colo_cuda_max_smem(const colo_stream *s);

/* Per-stream scratch: device memory of at least bytes, owned by the stream
 * and kept until it is destroyed. Grown on demand with cudaMalloc (doubling,
 * from 1 MiB); growing first waits for the stream's queued work, since an op
 * queued earlier may still read the old buffer (while the stream records a
 * graph, it cannot wait: the old buffer is kept until the next sync, once
 * per recording, a second growth fails with COLO_EAGAIN), so the hot path
 * allocates nothing once the largest op has run. Every call may return the same
 * memory: an op uses it for its own temporaries only, and ops queued later
 * on the stream run after it. Returns NULL with *st set (COLO_ENOMEM...) on
 * failure. Only the stream's owner thread calls it, while queuing ops. */
void *colo_cuda_scratch(colo_stream *s, size_t bytes, colo_status *st);

/* Device int that the stream's kernels set (atomicCAS from 0) to a negative
 * colo_status when they meet bad input (an id out of range): the next
 * colo_stream_sync returns that status and clears the flag. */
int *colo_cuda_error_flag(colo_stream *s);
/* Records st as the stream's error (the first one wins; sync returns it). */
void colo_cuda_stream_fail(colo_stream *s, colo_status st);

#ifdef __cplusplus
}
#endif

#endif
