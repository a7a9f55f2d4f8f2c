/* The CUDA backend: one cudaMalloc per buffer, priority streams each with a
 * cuBLAS handle, CUDA events. Linked against the CUDA runtime and cuBLAS
 * dynamically; the driver API is never linked, so the binary starts (and
 * falls back to the CPU) on machines without a driver. */
#include "runtime/cuda_impl.h"
#include "runtime/log.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/ops.h"

typedef struct cuda_dev {
    int ordinal;
    struct cudaDeviceProp prop;
    int prio_least, prio_greatest;
} cuda_dev;

typedef struct cuda_stream {
    cudaStream_t st;
    cublasHandle_t blas;
    void *scratch;
    size_t scratch_bytes;
    int *d_flag; /* set by kernels on bad input */
    int *h_flag; /* pinned copy read at sync */
    colo_status err;
} cuda_stream;

static int g_poisoned;

bool colo_cuda_poisoned(void) { return __atomic_load_n(&g_poisoned, __ATOMIC_ACQUIRE) != 0; }

static bool poisons_context(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
        return true;
    default:
        return false;
    }
}

colo_status colo_cuda_status(cudaError_t e, const char *call, const char *file, int line)
{
    if (e == cudaSuccess)
        return COLO_OK;
    COLO_ERROR("cuda: %s failed: %s (%s) at %s:%d", call, cudaGetErrorName(e), cudaGetErrorString(e), file, line);
    if (poisons_context(e)) {
        if (!__atomic_exchange_n(&g_poisoned, 1, __ATOMIC_ACQ_REL))
            COLO_ERROR("cuda: the context is poisoned; every GPU model is failed until restart");
        return COLO_EFATAL;
    }
    if (e == cudaErrorMemoryAllocation)
        return COLO_ENOMEM;
    return COLO_EDEVICE;
}

colo_status colo_cublas_status(cublasStatus_t e, const char *call, const char *file, int line)
{
    if (e == CUBLAS_STATUS_SUCCESS)
        return COLO_OK;
    COLO_ERROR("cublas: %s failed: status %d at %s:%d", call, (int)e, file, line);
    return e == CUBLAS_STATUS_ALLOC_FAILED ? COLO_ENOMEM : COLO_EDEVICE;
}

bool colo_cuda_device_present(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" error */
        return false;
    }
    return n > 0;
}

cudaStream_t colo_cuda_stream(const colo_stream *s) { return ((cuda_stream *)s->ctx)->st; }
cublasHandle_t colo_cuda_cublas(const colo_stream *s) { return ((cuda_stream *)s->ctx)->blas; }

int *colo_cuda_error_flag(colo_stream *s) { return ((cuda_stream *)s->ctx)->d_flag; }

void colo_cuda_stream_fail(colo_stream *s, colo_status st)
{
    cuda_stream *cs = s->ctx;
    if (cs->err == COLO_OK)
        cs->err = st;
}

void *colo_cuda_scratch(colo_stream *s, size_t bytes, colo_status *st)
{
    cuda_stream *cs = s->ctx;
    *st = COLO_OK;
    if (bytes <= cs->scratch_bytes)
        return cs->scratch;
    size_t want = cs->scratch_bytes ? cs->scratch_bytes : (1u << 20);
    while (want < bytes)
        want *= 2;
    /* Ops queued earlier may still read the old scratch. */
    if ((*st = COLO_CUDA_CHECK(cudaStreamSynchronize(cs->st))) != COLO_OK)
        return NULL;
    cudaFree(cs->scratch);
    cs->scratch = NULL;
    cs->scratch_bytes = 0;
    if ((*st = COLO_CUDA_CHECK(cudaMalloc(&cs->scratch, want))) != COLO_OK)
        return NULL;
    cs->scratch_bytes = want;
    return cs->scratch;
}

static colo_status use_device(colo_device *dev)
{
    return COLO_CUDA_CHECK(cudaSetDevice(((cuda_dev *)dev->ctx)->ordinal));
}

static void cuda_close(colo_device *dev)
{
    free(dev->ctx);
    free(dev);
}

static colo_status cuda_get_info(colo_device *dev, colo_device_info *info)
{
    cuda_dev *cd = dev->ctx;
    memset(info, 0, sizeof *info);
    snprintf(info->name, sizeof info->name, "%.100s (sm_%d%d)", cd->prop.name, cd->prop.major, cd->prop.minor);
    info->kind = COLO_BACKEND_CUDA;
    size_t free_b = 0, total_b = cd->prop.totalGlobalMem;
    colo_status st = use_device(dev);
    if (st == COLO_OK)
        st = COLO_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    info->total_bytes = total_b;
    info->free_bytes = free_b;
    info->prio_least = cd->prio_least;
    info->prio_greatest = cd->prio_greatest;
    info->compute_units = cd->prop.multiProcessorCount;
    info->can_partition = false; /* green contexts: not wired yet */
    return st;
}

static colo_status cuda_buffer_alloc(colo_device *dev, size_t bytes, void **ptr, void **handle, char *err,
                                     size_t errlen)
{
    *handle = NULL;
    colo_status st = use_device(dev);
    if (st == COLO_OK)
        st = COLO_CUDA_CHECK(cudaMalloc(ptr, bytes));
    if (st != COLO_OK)
        colo_set_err(err, errlen, "cuda: cannot allocate %zu bytes (%s)", bytes, colo_status_str(st));
    return st;
}

static void cuda_buffer_free(colo_device *dev, void *ptr, size_t bytes, void *handle)
{
    (void)bytes;
    (void)handle;
    if (use_device(dev) == COLO_OK)
        COLO_CUDA_CHECK(cudaFree(ptr));
}

/* Config priority -> native: low = least, high = greatest, normal between. */
static int native_priority(const cuda_dev *cd, colo_priority p)
{
    if (p == COLO_PRIO_HIGH)
        return cd->prio_greatest;
    if (p == COLO_PRIO_LOW)
        return cd->prio_least;
    return (cd->prio_least + cd->prio_greatest) / 2;
}

static colo_status cuda_stream_init(colo_device *dev, colo_stream *s, const colo_stream_config *cfg, char *err,
                                    size_t errlen)
{
    cuda_dev *cd = dev->ctx;
    if (cfg->unit_count) {
        colo_set_err(err, errlen, "cuda: SM partitions (green contexts) are not available in this build");
        return COLO_EUNSUPPORTED;
    }
    cuda_stream *cs = calloc(1, sizeof *cs);
    if (!cs) {
        colo_set_err(err, errlen, "cuda: out of host memory");
        return COLO_ENOMEM;
    }
    colo_status st = use_device(dev);
    if (st == COLO_OK)
        st = COLO_CUDA_CHECK(
            cudaStreamCreateWithPriority(&cs->st, cudaStreamNonBlocking, native_priority(cd, cfg->priority)));
    if (st != COLO_OK)
        goto out_free;
    if ((st = COLO_CUBLAS_CHECK(cublasCreate(&cs->blas))) != COLO_OK)
        goto out_stream;
    if ((st = COLO_CUBLAS_CHECK(cublasSetStream(cs->blas, cs->st))) != COLO_OK)
        goto out_blas;
    if ((st = COLO_CUDA_CHECK(cudaMalloc((void **)&cs->d_flag, sizeof(int)))) != COLO_OK)
        goto out_blas;
    if ((st = COLO_CUDA_CHECK(cudaMallocHost((void **)&cs->h_flag, sizeof(int)))) != COLO_OK)
        goto out_flag;
    if ((st = COLO_CUDA_CHECK(cudaMemsetAsync(cs->d_flag, 0, sizeof(int), cs->st))) != COLO_OK)
        goto out_host;
    s->ctx = cs;
    return COLO_OK;

out_host:
    cudaFreeHost(cs->h_flag);
out_flag:
    cudaFree(cs->d_flag);
out_blas:
    cublasDestroy(cs->blas);
out_stream:
    cudaStreamDestroy(cs->st);
out_free:
    free(cs);
    colo_set_err(err, errlen, "cuda: cannot create a stream (%s)", colo_status_str(st));
    return st;
}

static void cuda_stream_fini(colo_stream *s)
{
    cuda_stream *cs = s->ctx;
    COLO_CUDA_CHECK(cudaStreamSynchronize(cs->st));
    cublasDestroy(cs->blas);
    cudaStreamDestroy(cs->st);
    cudaFree(cs->scratch);
    cudaFree(cs->d_flag);
    cudaFreeHost(cs->h_flag);
    free(cs);
}

static colo_status cuda_stream_sync(colo_stream *s)
{
    cuda_stream *cs = s->ctx;
    *cs->h_flag = 0;
    colo_status st = COLO_CUDA_CHECK(cudaMemcpyAsync(cs->h_flag, cs->d_flag, sizeof(int), cudaMemcpyDeviceToHost, cs->st));
    if (st == COLO_OK)
        st = COLO_CUDA_CHECK(cudaStreamSynchronize(cs->st));
    if (st == COLO_OK && *cs->h_flag) {
        st = (colo_status)*cs->h_flag;
        st = COLO_CUDA_CHECK(cudaMemsetAsync(cs->d_flag, 0, sizeof(int), cs->st)) == COLO_OK ? st : COLO_EDEVICE;
    }
    if (cs->err != COLO_OK) {
        if (st == COLO_OK)
            st = cs->err;
        cs->err = COLO_OK;
    }
    return st;
}

static colo_status cuda_stream_query(colo_stream *s)
{
    cudaError_t e = cudaStreamQuery(((cuda_stream *)s->ctx)->st);
    if (e == cudaErrorNotReady)
        return COLO_EAGAIN;
    return COLO_CUDA_CHECK(e);
}

static colo_status cuda_memcpy_async(colo_stream *s, void *dst, const void *src, size_t bytes, colo_copy_kind kind)
{
    enum cudaMemcpyKind k = kind == COLO_COPY_H2D   ? cudaMemcpyHostToDevice
                            : kind == COLO_COPY_D2H ? cudaMemcpyDeviceToHost
                                                    : cudaMemcpyDeviceToDevice;
    return COLO_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, colo_cuda_stream(s)));
}

static colo_status cuda_memset_async(colo_stream *s, void *dst, int byte, size_t bytes)
{
    return COLO_CUDA_CHECK(cudaMemsetAsync(dst, byte, bytes, colo_cuda_stream(s)));
}

static colo_status cuda_event_init(colo_device *dev, colo_event *ev, char *err, size_t errlen)
{
    cudaEvent_t e;
    colo_status st = use_device(dev);
    if (st == COLO_OK)
        st = COLO_CUDA_CHECK(cudaEventCreate(&e));
    if (st != COLO_OK) {
        colo_set_err(err, errlen, "cuda: cannot create an event (%s)", colo_status_str(st));
        return st;
    }
    ev->ctx = e;
    return COLO_OK;
}

static void cuda_event_fini(colo_event *ev) { cudaEventDestroy((cudaEvent_t)ev->ctx); }

static colo_status cuda_event_record(colo_event *ev, colo_stream *s)
{
    return COLO_CUDA_CHECK(cudaEventRecord((cudaEvent_t)ev->ctx, colo_cuda_stream(s)));
}

static colo_status cuda_event_query(colo_event *ev)
{
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev->ctx);
    if (e == cudaErrorNotReady)
        return COLO_EAGAIN;
    return COLO_CUDA_CHECK(e);
}

static colo_status cuda_event_sync(colo_event *ev)
{
    return COLO_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)ev->ctx));
}

static colo_status cuda_event_elapsed_ms(colo_event *start, colo_event *end, float *ms)
{
    cudaError_t e = cudaEventElapsedTime(ms, (cudaEvent_t)start->ctx, (cudaEvent_t)end->ctx);
    if (e == cudaErrorNotReady)
        return COLO_EAGAIN;
    return COLO_CUDA_CHECK(e);
}

static const colo_device_vtbl cuda_vtbl = {
    .name = "cuda",
    .close = cuda_close,
    .get_info = cuda_get_info,
    .buffer_alloc = cuda_buffer_alloc,
    .buffer_free = cuda_buffer_free,
    .stream_init = cuda_stream_init,
    .stream_fini = cuda_stream_fini,
    .stream_sync = cuda_stream_sync,
    .stream_query = cuda_stream_query,
    .memcpy_async = cuda_memcpy_async,
    .memset_async = cuda_memset_async,
    .event_init = cuda_event_init,
    .event_fini = cuda_event_fini,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_sync = cuda_event_sync,
    .event_elapsed_ms = cuda_event_elapsed_ms,
};

colo_device *colo_cuda_device_open(const colo_device_config *cfg, char *err, size_t errlen)
{
    colo_device *dev = calloc(1, sizeof *dev);
    cuda_dev *cd = calloc(1, sizeof *cd);
    if (!dev || !cd) {
        colo_set_err(err, errlen, "cuda: out of host memory");
        goto out_free;
    }
    cd->ordinal = cfg ? cfg->cuda_device : 0;
    colo_status st = COLO_CUDA_CHECK(cudaSetDevice(cd->ordinal));
    if (st == COLO_OK)
        st = COLO_CUDA_CHECK(cudaGetDeviceProperties(&cd->prop, cd->ordinal));
    if (st == COLO_OK)
        st = COLO_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&cd->prio_least, &cd->prio_greatest));
    if (st != COLO_OK) {
        colo_set_err(err, errlen, "cuda: cannot open device %d (%s)", cd->ordinal, colo_status_str(st));
        goto out_free;
    }
    dev->vt = &cuda_vtbl;
    dev->ops = &colo_cuda_ops;
    dev->kind = COLO_BACKEND_CUDA;
    dev->ctx = cd;
    COLO_INFO("cuda: device %d: %s, %d SMs, %zu MiB, stream priorities %d..%d", cd->ordinal, cd->prop.name,
              cd->prop.multiProcessorCount, cd->prop.totalGlobalMem >> 20, cd->prio_least, cd->prio_greatest);
    return dev;

out_free:
    free(cd);
    free(dev);
    return NULL;
}
