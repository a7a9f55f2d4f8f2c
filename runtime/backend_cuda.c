/* The CUDA backend: one cudaMalloc per buffer, priority streams each with its
 * own cuBLAS handle, scratch and error flag, CUDA events for timing, and SM
 * partitions through green contexts.
 *
 * Linked against the CUDA runtime and cuBLAS dynamically. The driver API
 * (green contexts) is reached only through cudaGetDriverEntryPoint*, never
 * linked, so the binary starts, and falls back to the CPU, on machines
 * without an NVIDIA driver; cuda.h is included for its types alone. */
#include "runtime/cuda_impl.h"
#include "runtime/log.h"

#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_MAX_DEVICES 64
#define CUDA_MAX_SM_GROUPS 64
#define SCRATCH_MIN_BYTES ((size_t)1 << 20)

/* ---- driver entry points for green contexts (CUDA >= 12.4 driver) ----------------------- */

typedef CUresult (*pfn_cuGetErrorName)(CUresult, const char **);
typedef CUresult (*pfn_cuDeviceGet)(CUdevice *, int);
typedef CUresult (*pfn_cuDeviceGetDevResource)(CUdevice, CUdevResource *, CUdevResourceType);
typedef CUresult (*pfn_cuDevSmResourceSplitByCount)(CUdevResource *, unsigned int *, const CUdevResource *,
                                                    CUdevResource *, unsigned int, unsigned int);
typedef CUresult (*pfn_cuDevResourceGenerateDesc)(CUdevResourceDesc *, CUdevResource *, unsigned int);
typedef CUresult (*pfn_cuGreenCtxCreate)(CUgreenCtx *, CUdevResourceDesc, CUdevice, unsigned int);
typedef CUresult (*pfn_cuGreenCtxDestroy)(CUgreenCtx);
typedef CUresult (*pfn_cuGreenCtxStreamCreate)(CUstream *, CUgreenCtx, unsigned int, int);

/* On-demand device memory (virtual memory management, CUDA >= 10.2 driver). */
typedef CUresult (*pfn_cuDeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
typedef CUresult (*pfn_cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*pfn_cuMemAddressFree)(CUdeviceptr, size_t);
typedef CUresult (*pfn_cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                                    unsigned long long);
typedef CUresult (*pfn_cuMemRelease)(CUmemGenericAllocationHandle);
typedef CUresult (*pfn_cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*pfn_cuMemUnmap)(CUdeviceptr, size_t);
typedef CUresult (*pfn_cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*pfn_cuMemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *,
                                                      CUmemAllocationGranularity_flags);

typedef struct vmm_api {
    pfn_cuMemAddressReserve reserve;
    pfn_cuMemAddressFree address_free;
    pfn_cuMemCreate create;
    pfn_cuMemRelease release;
    pfn_cuMemMap map;
    pfn_cuMemUnmap unmap;
    pfn_cuMemSetAccess set_access;
    bool ok;      /* every entry point found and the device supports it */
    size_t gran;  /* allocation granularity, bytes */
    CUmemAllocationProp prop;
    CUmemAccessDesc access;
} vmm_api;

/* A reserved buffer: address space, and one physical allocation per mapped chunk. */
typedef struct vmm_buf {
    CUdeviceptr base;
    size_t size;                        /* a multiple of gran */
    CUmemGenericAllocationHandle *h;    /* (size / gran) 0 = not mapped */
} vmm_buf;

typedef struct green_api {
    pfn_cuGetErrorName get_error_name;
    pfn_cuDeviceGet device_get;
    pfn_cuDeviceGetDevResource get_dev_resource;
    pfn_cuDevSmResourceSplitByCount split_by_count;
    pfn_cuDevResourceGenerateDesc generate_desc;
    pfn_cuGreenCtxCreate ctx_create;
    pfn_cuGreenCtxDestroy ctx_destroy;
    pfn_cuGreenCtxStreamCreate stream_create;
} green_api;

/* The SM groups of one split of the whole device: groups[i] holds SMs
 * [i * group_sms, (i + 1) * group_sms) in colo's numbering; the remainder
 * (remainder_sms, possibly 0) comes after the last group. */
typedef struct sm_split {
    CUdevice cu_dev;
    unsigned n_groups;
    unsigned group_sms;
    CUdevResource groups[CUDA_MAX_SM_GROUPS];
    CUdevResource remainder;
    unsigned remainder_sms;
} sm_split;

typedef struct cuda_dev {
    int ordinal;
    size_t budget; /* gpu_memory_bytes; 0 = the device's memory */
    bool graphs;   /* cuda_graphs: colo_stream_graph_begin records */
    bool exact;    /* exact_activations: no stream rounds activations */
    struct cudaDeviceProp prop;
    int prio_least, prio_greatest;
    bool can_partition;
    green_api green;
    sm_split split;
    vmm_api vmm;
} cuda_dev;

typedef struct cuda_stream {
    cudaStream_t st;
    cublasHandle_t blas;
    CUgreenCtx green; /* NULL unless the stream runs on an SM partition */
    const green_api *api;
    int sms;          /* SMs the stream may use */
    size_t max_smem;  /* opt-in dynamic shared memory per block */
    void *scratch;
    size_t scratch_bytes;
    void *scratch_retired; /* a scratch replaced while recording: freed once the stream has drained */
    int *d_flag; /* set by kernels on bad input */
    int *h_flag; /* pinned copy read at sync */
    colo_status err;
    bool capturing;                                  /* between graph_begin and graph_end */
    struct {
        int key;
        cudaGraphExec_t exec; /* NULL: none */
    } graphs[COLO_STREAM_GRAPHS];
    int n_graphs, next_graph; /* slots in use; the one a new key replaces next */
    uint64_t graphs_launched;
} cuda_stream;

/* ---- errors ------------------------------------------------------------------------------- */

static int g_poisoned[CUDA_MAX_DEVICES];
static int g_any_poisoned;

bool colo_cuda_poisoned(void) { return __atomic_load_n(&g_any_poisoned, __ATOMIC_ACQUIRE) != 0; }

static bool ordinal_poisoned(int ordinal)
{
    if (ordinal < 0 || ordinal >= CUDA_MAX_DEVICES)
        return colo_cuda_poisoned();
    return __atomic_load_n(&g_poisoned[ordinal], __ATOMIC_ACQUIRE) != 0;
}

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
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContained:
    case cudaErrorLaunchTimeout:
    case cudaErrorMpsClientTerminated:
    case cudaErrorExternalDevice:
#if CUDART_VERSION >= 13000
    case cudaErrorTensorMemoryLeak:
#endif
        return true;
    default:
        return false;
    }
}

static void mark_poisoned(void)
{
    int d = -1;
    /* The runtime keeps the current device on the host: this works on a poisoned context. */
    if (cudaGetDevice(&d) == cudaSuccess && d >= 0 && d < CUDA_MAX_DEVICES) {
        __atomic_store_n(&g_poisoned[d], 1, __ATOMIC_RELEASE);
    } else {
        for (int i = 0; i < CUDA_MAX_DEVICES; i++)
            __atomic_store_n(&g_poisoned[i], 1, __ATOMIC_RELEASE);
    }
    if (!__atomic_exchange_n(&g_any_poisoned, 1, __ATOMIC_ACQ_REL))
        COLO_ERROR("cuda: device %d: the context is poisoned; every GPU model on it fails until restart", d);
}

colo_status colo_cuda_status(cudaError_t e, const char *call, const char *file, int line)
{
    if (e == cudaSuccess)
        return COLO_OK;
    COLO_ERROR("cuda: %s failed: %s (%s) at %s:%d", call, cudaGetErrorName(e), cudaGetErrorString(e), file, line);
    if (poisons_context(e)) {
        mark_poisoned();
        return COLO_EFATAL;
    }
    /* A failed call also leaves its error as the thread's last error, which
     * the next launch check (cudaGetLastError) would report for an innocent
     * op: it is reported here, so clear it. */
    cudaGetLastError();
    /* An error that clearing leaves in place is sticky, whatever its code
     * (an unknown error after a device fault): the context is lost. */
    cudaError_t left = cudaPeekAtLastError();
    if (left != cudaSuccess) {
        COLO_ERROR("cuda: %s stays after clearing: the context is lost", cudaGetErrorName(left));
        mark_poisoned();
        return COLO_EFATAL;
    }
    if (e == cudaErrorMemoryAllocation)
        return COLO_ENOMEM;
    return COLO_EDEVICE;
}

/* ---- cuBLAS, opened at the first stream ---------------------------------------------- */

colo_cublas_api colo_cublas;

#define CUBLAS_STR_(x) #x
#define CUBLAS_STR(x) CUBLAS_STR_(x)
/* The soname of the cuBLAS colo was built against ("libcublas.so.13"): looked
 * up as the dynamic loader would (the program's run path, LD_LIBRARY_PATH,
 * the system's), then in the toolkit's library folder of the build. */
#define CUBLAS_SONAME "libcublas.so." CUBLAS_STR(CUBLAS_VER_MAJOR)
#ifndef COLO_CUDA_LIBRARY_DIR
#define COLO_CUDA_LIBRARY_DIR "/usr/local/cuda/lib64"
#endif

static pthread_once_t cublas_once = PTHREAD_ONCE_INIT;
static bool cublas_loaded;
static char cublas_why[512];

/* dlsym of an entry point by its exported name (cublas_v2.h maps most names
 * to their _v2 symbols, hence the expansion), into colo_cublas.field. */
#define CUBLAS_SYM(field, fn)                                                                                      \
    do {                                                                                                           \
        void *p_ = dlsym(h, CUBLAS_STR(fn));                                                                       \
        if (!p_) {                                                                                                 \
            snprintf(cublas_why, sizeof cublas_why, "%s has no %s", CUBLAS_SONAME, CUBLAS_STR(fn));               \
            return;                                                                                                \
        }                                                                                                          \
        memcpy(&colo_cublas.field, &p_, sizeof p_);                                                                \
    } while (0)

static void cublas_load(void)
{
    void *h = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        char first[256];
        snprintf(first, sizeof first, "%s", dlerror());
        h = dlopen(COLO_CUDA_LIBRARY_DIR "/" CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(cublas_why, sizeof cublas_why, "%s (and in " COLO_CUDA_LIBRARY_DIR ": %s)", first, dlerror());
            return;
        }
    }
    CUBLAS_SYM(create, cublasCreate);
    CUBLAS_SYM(destroy, cublasDestroy);
    CUBLAS_SYM(set_stream, cublasSetStream);
    CUBLAS_SYM(set_workspace, cublasSetWorkspace);
    CUBLAS_SYM(set_sm_count_target, cublasSetSmCountTarget);
    CUBLAS_SYM(status_name, cublasGetStatusName);
    CUBLAS_SYM(sgemm, cublasSgemm);
    CUBLAS_SYM(gemm_strided_batched_ex, cublasGemmStridedBatchedEx);
    cublas_loaded = true; /* the handle stays open for the process's life */
}

colo_status colo_cublas_open(void)
{
    if (pthread_once(&cublas_once, cublas_load) != 0 || !cublas_loaded) {
        COLO_ERROR("cuda: cannot load cuBLAS: %s", cublas_why[0] ? cublas_why : "pthread_once failed");
        return COLO_EDEVICE;
    }
    return COLO_OK;
}

colo_status colo_cublas_status(cublasStatus_t e, const char *call, const char *file, int line)
{
    if (e == CUBLAS_STATUS_SUCCESS)
        return COLO_OK;
    COLO_ERROR("cublas: %s failed: %s (%d) at %s:%d", call, colo_cublas.status_name(e), (int)e, file, line);
    return e == CUBLAS_STATUS_ALLOC_FAILED ? COLO_ENOMEM : COLO_EDEVICE;
}

static colo_status cu_status(const green_api *api, CUresult r, const char *call, const char *file, int line)
{
    if (r == CUDA_SUCCESS)
        return COLO_OK;
    const char *name = NULL;
    if (!api->get_error_name || api->get_error_name(r, &name) != CUDA_SUCCESS || !name)
        name = "?";
    COLO_ERROR("cuda driver: %s failed: %s (%d) at %s:%d", call, name, (int)r, file, line);
    /* The driver's codes of the errors that poison a context are the runtime's. */
    if (poisons_context((cudaError_t)r)) {
        mark_poisoned();
        return COLO_EFATAL;
    }
    return r == CUDA_ERROR_OUT_OF_MEMORY ? COLO_ENOMEM : COLO_EDEVICE;
}
_Static_assert((int)CUDA_ERROR_ILLEGAL_ADDRESS == (int)cudaErrorIllegalAddress &&
                   (int)CUDA_ERROR_LAUNCH_FAILED == (int)cudaErrorLaunchFailure &&
                   (int)CUDA_ERROR_ECC_UNCORRECTABLE == (int)cudaErrorECCUncorrectable &&
                   (int)CUDA_ERROR_CONTAINED == (int)cudaErrorContained,
               "driver and runtime error codes differ");
#define CU_CHECK(api, call) cu_status((api), (call), #call, __FILE__, __LINE__)

bool colo_cuda_device_present(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the "no driver" / "no device" error */
        return false;
    }
    return n > 0;
}

/* ---- the calling thread's device ------------------------------------------------------------ */

/* The runtime keeps a current device per host thread, and kernel launches,
 * cuBLAS calls, allocations and the driver's calls act on that device's
 * primary context. Executor threads never choose one (a thread that never
 * did uses device 0, without a current context for the driver API), so
 * every entry point that touches a device makes it current first. The
 * ordinal this thread last made current is kept here, so that the check on
 * each kernel launch costs one thread-local load. */
static __thread int t_ordinal = -1;

static colo_status bind_ordinal(int ordinal)
{
    if (t_ordinal == ordinal)
        return COLO_OK;
    colo_status st = COLO_CHECK_CUDA(cudaSetDevice(ordinal));
    if (st == COLO_OK)
        t_ordinal = ordinal;
    return st;
}

static colo_status use_device(const colo_device *dev) { return bind_ordinal(((const cuda_dev *)dev->ctx)->ordinal); }

/* Before queuing work on s from whatever thread: a failure shows in the
 * call that follows, which then fails with the device's error. */
static void bind_stream(const colo_stream *s) { (void)use_device(s->dev); }

/* ---- accessors for kernels/cuda ------------------------------------------------------------- */

/* Kernels call these while queuing work, on their stream's thread: they
 * make the stream's device current there first. */
cudaStream_t colo_cuda_stream(const colo_stream *s)
{
    bind_stream(s);
    return ((const cuda_stream *)s->ctx)->st;
}
cublasHandle_t colo_cuda_cublas(const colo_stream *s)
{
    bind_stream(s);
    return ((const cuda_stream *)s->ctx)->blas;
}
int colo_cuda_stream_sms(const colo_stream *s) { return ((const cuda_stream *)s->ctx)->sms; }

bool colo_cuda_exact(const colo_stream *s) { return s->exact || ((const cuda_dev *)s->dev->ctx)->exact; }
size_t colo_cuda_max_smem(const colo_stream *s) { return ((const cuda_stream *)s->ctx)->max_smem; }
int *colo_cuda_error_flag(colo_stream *s) { return ((cuda_stream *)s->ctx)->d_flag; }

void colo_cuda_stream_fail(colo_stream *s, colo_status st)
{
    cuda_stream *cs = s->ctx;
    if (cs->err == COLO_OK)
        cs->err = st;
}

/* While recording, the stream cannot be waited for (that would end the
 * recording): a new scratch is allocated beside the old one, which ops
 * queued earlier and the recording's own first nodes still use, and the old
 * one is freed at the next sync. The allocation is outside the recording,
 * so the thread leaves the recording's mode for it. Once per recording. */
static void *scratch_grow_recording(cuda_stream *cs, size_t want, colo_status *st)
{
    if (cs->scratch_retired) {
        *st = COLO_EAGAIN;
        return NULL;
    }
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if ((*st = COLO_CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&mode))) != COLO_OK)
        return NULL;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, want);
    colo_status back = COLO_CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
    if ((*st = COLO_CHECK_CUDA(e)) != COLO_OK)
        return NULL;
    cs->scratch_retired = cs->scratch;
    cs->scratch = p;
    cs->scratch_bytes = want;
    return (*st = back) == COLO_OK ? p : NULL;
}

void *colo_cuda_scratch(colo_stream *s, size_t bytes, colo_status *st)
{
    cuda_stream *cs = s->ctx;
    *st = COLO_OK;
    if (bytes <= cs->scratch_bytes)
        return cs->scratch;
    size_t want = cs->scratch_bytes ? cs->scratch_bytes : SCRATCH_MIN_BYTES;
    while (want < bytes)
        want *= 2;
    if ((*st = use_device(s->dev)) != COLO_OK)
        return NULL;
    if (cs->capturing)
        return scratch_grow_recording(cs, want, st);
    /* Ops queued earlier may still read the old scratch. */
    if ((*st = COLO_CHECK_CUDA(cudaStreamSynchronize(cs->st))) != COLO_OK)
        return NULL;
    /* Checked, so that a failure is not left as the thread's last error for
     * the next launch check to blame on a kernel. */
    colo_status fe = COLO_CHECK_CUDA(cudaFree(cs->scratch_retired)), fe2 = COLO_CHECK_CUDA(cudaFree(cs->scratch));
    if (fe == COLO_OK)
        fe = fe2;
    cs->scratch_retired = NULL;
    cs->scratch = NULL;
    cs->scratch_bytes = 0;
    if ((*st = fe) != COLO_OK)
        return NULL;
    if ((*st = COLO_CHECK_CUDA(cudaMalloc(&cs->scratch, want))) != COLO_OK) {
        cs->scratch = NULL;
        return NULL;
    }
    cs->scratch_bytes = want;
    return cs->scratch;
}

/* ---- device ------------------------------------------------------------------------------------ */

static void *driver_symbol(const char *name)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    /* The 12.5 ABI of every symbol used here (green contexts came in 12.4, their streams in 12.5). */
    cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, 12050, cudaEnableDefault, &q);
#else
    cudaError_t e = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &q);
#endif
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return fn;
}

/* Finds the green-context entry points and splits the device's SMs into the
 * smallest groups the hardware allows (8 SMs on Hopper). Leaves
 * can_partition false, with the reason in the log, when anything is missing. */
static void probe_green(cuda_dev *cd)
{
    green_api *g = &cd->green;
    g->get_error_name = (pfn_cuGetErrorName)driver_symbol("cuGetErrorName");
    g->device_get = (pfn_cuDeviceGet)driver_symbol("cuDeviceGet");
    g->get_dev_resource = (pfn_cuDeviceGetDevResource)driver_symbol("cuDeviceGetDevResource");
    g->split_by_count = (pfn_cuDevSmResourceSplitByCount)driver_symbol("cuDevSmResourceSplitByCount");
    g->generate_desc = (pfn_cuDevResourceGenerateDesc)driver_symbol("cuDevResourceGenerateDesc");
    g->ctx_create = (pfn_cuGreenCtxCreate)driver_symbol("cuGreenCtxCreate");
    g->ctx_destroy = (pfn_cuGreenCtxDestroy)driver_symbol("cuGreenCtxDestroy");
    g->stream_create = (pfn_cuGreenCtxStreamCreate)driver_symbol("cuGreenCtxStreamCreate");
    if (!g->device_get || !g->get_dev_resource || !g->split_by_count || !g->generate_desc || !g->ctx_create ||
        !g->ctx_destroy || !g->stream_create) {
        COLO_INFO("cuda: green contexts unavailable (driver older than CUDA 12.5): no SM partitions");
        return;
    }
    sm_split *sp = &cd->split;
    CUdevResource all;
    memset(&all, 0, sizeof all);
    if (CU_CHECK(g, g->device_get(&sp->cu_dev, cd->ordinal)) != COLO_OK ||
        CU_CHECK(g, g->get_dev_resource(sp->cu_dev, &all, CU_DEV_RESOURCE_TYPE_SM)) != COLO_OK) {
        COLO_INFO("cuda: cannot read the device's SM resource: no SM partitions");
        return;
    }
    unsigned min_sms = all.sm.minSmPartitionSize, align = all.sm.smCoscheduledAlignment;
    unsigned gran = min_sms > align ? min_sms : align;
    if (gran == 0)
        gran = 1;
    unsigned n = CUDA_MAX_SM_GROUPS;
    memset(sp->groups, 0, sizeof sp->groups);
    memset(&sp->remainder, 0, sizeof sp->remainder);
    if (CU_CHECK(g, g->split_by_count(sp->groups, &n, &all, &sp->remainder, 0, gran)) != COLO_OK || n == 0) {
        COLO_INFO("cuda: cannot split the device's SMs: no SM partitions");
        return;
    }
    sp->n_groups = n;
    sp->group_sms = sp->groups[0].sm.smCount;
    sp->remainder_sms = sp->remainder.type == CU_DEV_RESOURCE_TYPE_SM ? sp->remainder.sm.smCount : 0;
    if (sp->group_sms == 0) {
        COLO_INFO("cuda: empty SM groups: no SM partitions");
        return;
    }
    cd->can_partition = true;
    COLO_INFO("cuda: SM partitions: %u groups of %u SMs, %u SMs left over (of %u)", sp->n_groups, sp->group_sms,
              sp->remainder_sms, all.sm.smCount);
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
        st = COLO_CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
    info->total_bytes = cd->budget && cd->budget < total_b ? cd->budget : total_b;
    info->free_bytes = free_b < info->total_bytes ? free_b : info->total_bytes;
    info->prio_least = cd->prio_least;
    info->prio_greatest = cd->prio_greatest;
    info->compute_units = cd->prop.multiProcessorCount;
    info->can_partition = cd->can_partition;
    snprintf(info->pci_bus_id, sizeof info->pci_bus_id, "%08x:%02x:%02x.0", (unsigned)cd->prop.pciDomainID,
             (unsigned)cd->prop.pciBusID, (unsigned)cd->prop.pciDeviceID);
    return st;
}

static bool cuda_poisoned(const colo_device *dev) { return ordinal_poisoned(((const cuda_dev *)dev->ctx)->ordinal); }

/* ---- on-demand memory: reserved address space, chunks mapped as used ------------------------ */

static void probe_vmm(cuda_dev *cd)
{
    vmm_api *v = &cd->vmm;
    pfn_cuDeviceGetAttribute get_attr = (pfn_cuDeviceGetAttribute)driver_symbol("cuDeviceGetAttribute");
    pfn_cuMemGetAllocationGranularity get_gran =
        (pfn_cuMemGetAllocationGranularity)driver_symbol("cuMemGetAllocationGranularity");
    pfn_cuDeviceGet device_get = (pfn_cuDeviceGet)driver_symbol("cuDeviceGet");
    v->reserve = (pfn_cuMemAddressReserve)driver_symbol("cuMemAddressReserve");
    v->address_free = (pfn_cuMemAddressFree)driver_symbol("cuMemAddressFree");
    v->create = (pfn_cuMemCreate)driver_symbol("cuMemCreate");
    v->release = (pfn_cuMemRelease)driver_symbol("cuMemRelease");
    v->map = (pfn_cuMemMap)driver_symbol("cuMemMap");
    v->unmap = (pfn_cuMemUnmap)driver_symbol("cuMemUnmap");
    v->set_access = (pfn_cuMemSetAccess)driver_symbol("cuMemSetAccess");
    CUdevice cu = 0;
    int supported = 0;
    if (!get_attr || !get_gran || !device_get || !v->reserve || !v->address_free || !v->create || !v->release ||
        !v->map || !v->unmap || !v->set_access || device_get(&cu, cd->ordinal) != CUDA_SUCCESS ||
        get_attr(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, cu) != CUDA_SUCCESS ||
        !supported) {
        COLO_INFO("cuda: device %d: no virtual memory management: arenas are fixed (memory_max_fraction ignored)",
                  cd->ordinal);
        return;
    }
    memset(&v->prop, 0, sizeof v->prop); /* no shareable handle, no compression, no RDMA */
    v->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    v->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    v->prop.location.id = (int)cu;
    memset(&v->access, 0, sizeof v->access);
    v->access.location = v->prop.location;
    v->access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    /* Every chunk is one cuMemCreate + cuMemMap: its size must be a multiple
     * of the minimum granularity; the recommended one (2 MiB) is used when
     * it is such a multiple. */
    size_t min_gran = 0, gran = 0;
    if (get_gran(&min_gran, &v->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || !min_gran ||
        (min_gran & (min_gran - 1))) {
        COLO_INFO("cuda: device %d: no usable allocation granularity: arenas are fixed", cd->ordinal);
        return;
    }
    if (get_gran(&gran, &v->prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS || !gran ||
        (gran & (gran - 1)) || gran % min_gran)
        gran = min_gran;
    v->gran = gran;
    v->ok = true;
}

static bool cuda_reserve_supported(const colo_device *dev) { return ((const cuda_dev *)dev->ctx)->vmm.ok; }
static size_t cuda_buffer_granularity(const colo_device *dev) { return ((const cuda_dev *)dev->ctx)->vmm.gran; }

static colo_status cuda_buffer_reserve(colo_device *dev, size_t bytes, void **ptr, void **handle, char *err,
                                       size_t errlen)
{
    cuda_dev *cd = dev->ctx;
    const vmm_api *v = &cd->vmm;
    *ptr = *handle = NULL;
    if (!v->ok) {
        colo_set_err(err, errlen, "cuda: this device or driver has no virtual memory management");
        return COLO_EUNSUPPORTED;
    }
    if (bytes > SIZE_MAX - v->gran) {
        colo_set_err(err, errlen, "cuda: cannot reserve %zu bytes", bytes);
        return COLO_EINVAL;
    }
    colo_status st = use_device(dev);
    if (st != COLO_OK) {
        colo_set_err(err, errlen, "cuda: cannot use device %d (%s)", cd->ordinal, colo_status_str(st));
        return st;
    }
    vmm_buf *b = calloc(1, sizeof *b);
    size_t size = (bytes + v->gran - 1) & ~(v->gran - 1);
    if (b)
        b->h = calloc(size / v->gran, sizeof *b->h);
    if (!b || !b->h) {
        free(b);
        colo_set_err(err, errlen, "cuda: out of host memory");
        return COLO_ENOMEM;
    }
    CUresult r = v->reserve(&b->base, size, v->gran, 0, 0);
    if (r != CUDA_SUCCESS) {
        free(b->h);
        free(b);
        colo_set_err(err, errlen, "cuda: cuMemAddressReserve of %zu bytes failed (CUresult %d)", size, (int)r);
        return COLO_ENOMEM;
    }
    b->size = size;
    *ptr = (void *)(uintptr_t)b->base;
    *handle = b;
    return COLO_OK;
}

/* Unmaps and releases chunk c if it is mapped. The caller has finished the
 * work that used it (a KV block is released after its step synchronized). */
static void vmm_unmap_chunk(const vmm_api *v, vmm_buf *b, size_t c)
{
    if (!b->h[c])
        return;
    CUresult r = v->unmap(b->base + c * v->gran, v->gran);
    /* Released even when the unmap failed: the mapping, if any, keeps the
     * memory until the address range is freed. */
    CUresult r2 = v->release(b->h[c]);
    if (r != CUDA_SUCCESS || r2 != CUDA_SUCCESS)
        COLO_WARN("cuda: giving back a %zu-byte chunk failed (CUresult %d, %d)", v->gran, (int)r, (int)r2);
    b->h[c] = 0;
}

/* Maps chunks [first, end) that are not mapped yet, each with access for the
 * device; all or nothing: on failure the chunks this call mapped are given
 * back and those mapped before stay. */
static colo_status cuda_buffer_commit(colo_device *dev, void *handle, void *ptr, size_t bytes)
{
    cuda_dev *cd = dev->ctx;
    const vmm_api *v = &cd->vmm;
    vmm_buf *b = handle;
    if (!b)
        return COLO_OK; /* a cudaMalloc buffer: always backed */
    if ((uintptr_t)ptr < b->base)
        return COLO_EINVAL;
    size_t off = (size_t)((uintptr_t)ptr - b->base);
    if (off > b->size || bytes > b->size - off)
        return COLO_EINVAL;
    size_t first = off / v->gran, end = (off + bytes + v->gran - 1) / v->gran;
    colo_status st = use_device(dev);
    if (st != COLO_OK)
        return st;
    unsigned char *fresh = calloc(end - first + 1, 1);
    if (!fresh)
        return COLO_ENOMEM;
    CUresult r = CUDA_SUCCESS;
    for (size_t c = first; c < end && r == CUDA_SUCCESS; c++) {
        if (b->h[c])
            continue;
        CUdeviceptr at = b->base + c * v->gran;
        CUmemGenericAllocationHandle h = 0;
        if ((r = v->create(&h, v->gran, &v->prop, 0)) != CUDA_SUCCESS)
            break;
        if ((r = v->map(at, v->gran, 0, h, 0)) != CUDA_SUCCESS) {
            v->release(h);
            break;
        }
        /* A new mapping starts with no access: set it after every map. */
        if ((r = v->set_access(at, v->gran, &v->access, 1)) != CUDA_SUCCESS) {
            v->unmap(at, v->gran);
            v->release(h);
            break;
        }
        b->h[c] = h;
        fresh[c - first] = 1;
    }
    if (r != CUDA_SUCCESS) {
        for (size_t c = first; c < end; c++)
            if (fresh[c - first])
                vmm_unmap_chunk(v, b, c);
        COLO_DEBUG("cuda: mapping a %zu-byte chunk failed (CUresult %d)", v->gran, (int)r);
        st = r == CUDA_ERROR_OUT_OF_MEMORY ? COLO_ENOMEM : cu_status(&cd->green, r, "cuMemCreate/Map/SetAccess",
                                                                      __FILE__, __LINE__);
    }
    free(fresh);
    return st;
}

static void cuda_buffer_decommit(colo_device *dev, void *handle, void *ptr, size_t bytes)
{
    cuda_dev *cd = dev->ctx;
    vmm_buf *b = handle;
    if (!b || (uintptr_t)ptr < b->base)
        return;
    size_t off = (size_t)((uintptr_t)ptr - b->base), g = cd->vmm.gran;
    if (off >= b->size)
        return;
    if (bytes > b->size - off)
        bytes = b->size - off;
    size_t first = off / g, end = (off + bytes + g - 1) / g;
    (void)use_device(dev);
    for (size_t c = first; c < end; c++)
        vmm_unmap_chunk(&cd->vmm, b, c);
}

static colo_status cuda_buffer_alloc(colo_device *dev, size_t bytes, void **ptr, void **handle, char *err,
                                     size_t errlen)
{
    *handle = NULL;
    *ptr = NULL;
    colo_status st = use_device(dev);
    if (st == COLO_OK)
        st = COLO_CHECK_CUDA(cudaMalloc(ptr, bytes));
    if (st != COLO_OK) {
        *ptr = NULL;
        colo_set_err(err, errlen, "cuda: cannot allocate %zu bytes (%s)", bytes, colo_status_str(st));
    }
    return st;
}

static void cuda_buffer_free(colo_device *dev, void *ptr, size_t bytes, void *handle)
{
    (void)bytes;
    if (handle) { /* reserved: give back every chunk, then the address space */
        cuda_dev *cd = dev->ctx;
        vmm_buf *b = handle;
        bool live = use_device(dev) == COLO_OK && !cuda_poisoned(dev);
        /* Unmapping does not wait for kernels still using the memory. */
        if (live)
            COLO_CHECK_CUDA(cudaDeviceSynchronize());
        for (size_t c = 0; c < b->size / cd->vmm.gran; c++)
            vmm_unmap_chunk(&cd->vmm, b, c);
        CUresult r = cd->vmm.address_free(b->base, b->size);
        if (r != CUDA_SUCCESS && live)
            COLO_WARN("cuda: freeing %zu bytes of address space failed (CUresult %d)", b->size, (int)r);
        free(b->h);
        free(b);
        return;
    }
    if (cuda_poisoned(dev)) { /* every call fails now: free quietly */
        cudaFree(ptr);
        cudaGetLastError();
        return;
    }
    if (use_device(dev) == COLO_OK)
        COLO_CHECK_CUDA(cudaFree(ptr));
}

/* ---- streams -------------------------------------------------------------------------------- */

/* Config priority -> native: low = least, high = greatest, normal between. */
static int native_priority(const cuda_dev *cd, colo_priority p)
{
    if (p == COLO_PRIO_HIGH)
        return cd->prio_greatest;
    if (p == COLO_PRIO_LOW)
        return cd->prio_least;
    return (cd->prio_least + cd->prio_greatest) / 2;
}

/* Creates a green context holding SMs [first, first + count) (rounded to
 * whole groups: both ends to the nearest group boundary, so that disjoint
 * plans stay disjoint) and a stream in it. */
static colo_status create_partition_stream(cuda_dev *cd, cuda_stream *cs, int first, int count, int prio, char *err,
                                           size_t errlen)
{
    const green_api *g = &cd->green;
    const sm_split *sp = &cd->split;
    int gs = (int)sp->group_sms, total = (int)(sp->n_groups * sp->group_sms + sp->remainder_sms);
    if (first >= total) {
        colo_set_err(err, errlen, "cuda: SM partition [%d, %d) starts past the device's %d SMs", first, first + count,
                     total);
        return COLO_EINVAL;
    }
    int end = first + count > total ? total : first + count;
    int g0 = (first + gs / 2) / gs, g1 = (end + gs / 2) / gs;
    if (g0 >= (int)sp->n_groups)
        g0 = (int)sp->n_groups - 1;
    if (g1 > (int)sp->n_groups)
        g1 = (int)sp->n_groups;
    if (g1 <= g0)
        g1 = g0 + 1;
    /* A partition reaching the device's end also takes the SMs left over. */
    bool with_rest = sp->remainder_sms > 0 && end > (int)(sp->n_groups * sp->group_sms) - gs / 2;
    CUdevResource res[CUDA_MAX_SM_GROUPS + 1];
    unsigned n = 0;
    for (int i = g0; i < g1; i++)
        res[n++] = sp->groups[i];
    if (with_rest)
        res[n++] = sp->remainder;
    int got_first = g0 * gs, got_sms = (g1 - g0) * gs + (with_rest ? (int)sp->remainder_sms : 0);
    if (got_first != first || got_sms != count)
        COLO_WARN("cuda: SM partition [%d, %d) rounded to [%d, %d) (groups of %d SMs)", first, first + count,
                  got_first, got_first + got_sms, gs);

    CUdevResourceDesc desc = NULL;
    CUstream stream = NULL;
    colo_status st = CU_CHECK(g, g->generate_desc(&desc, res, n));
    if (st == COLO_OK)
        st = CU_CHECK(g, g->ctx_create(&cs->green, desc, sp->cu_dev, CU_GREEN_CTX_DEFAULT_STREAM));
    if (st != COLO_OK) {
        cs->green = NULL;
        colo_set_err(err, errlen, "cuda: cannot create a green context for SMs [%d, %d) (%s)", got_first,
                     got_first + got_sms, colo_status_str(st));
        return st;
    }
    st = CU_CHECK(g, g->stream_create(&stream, cs->green, CU_STREAM_NON_BLOCKING, prio));
    if (st != COLO_OK) {
        g->ctx_destroy(cs->green);
        cs->green = NULL;
        colo_set_err(err, errlen, "cuda: cannot create a stream on SMs [%d, %d) (%s)", got_first,
                     got_first + got_sms, colo_status_str(st));
        return st;
    }
    cs->st = (cudaStream_t)stream;
    cs->api = g;
    cs->sms = got_sms;
    COLO_INFO("cuda: stream on SMs [%d, %d), priority %d", got_first, got_first + got_sms, prio);
    return COLO_OK;
}

static colo_status cuda_stream_init(colo_device *dev, colo_stream *s, const colo_stream_config *cfg, char *err,
                                    size_t errlen)
{
    cuda_dev *cd = dev->ctx;
    if (cfg->unit_count && !cd->can_partition) {
        colo_set_err(err, errlen,
                     "cuda: SM partitions need green contexts (NVIDIA driver for CUDA >= 12.5), which this "
                     "machine lacks");
        return COLO_EUNSUPPORTED;
    }
    cuda_stream *cs = calloc(1, sizeof *cs);
    if (!cs) {
        colo_set_err(err, errlen, "cuda: out of host memory");
        return COLO_ENOMEM;
    }
    cs->sms = cd->prop.multiProcessorCount;
    cs->max_smem = cd->prop.sharedMemPerBlockOptin;
    int prio = native_priority(cd, cfg->priority);
    colo_status st = use_device(dev);
    if (st != COLO_OK)
        goto out_free;
    if (cfg->unit_count) {
        if ((st = create_partition_stream(cd, cs, cfg->unit_first, cfg->unit_count, prio, err, errlen)) != COLO_OK)
            goto out_free_quiet;
    } else if ((st = COLO_CHECK_CUDA(cudaStreamCreateWithPriority(&cs->st, cudaStreamNonBlocking, prio))) !=
               COLO_OK) {
        goto out_free;
    }
    if ((st = colo_cublas_open()) != COLO_OK || (st = COLO_CHECK_CUBLAS(colo_cublas.create(&cs->blas))) != COLO_OK)
        goto out_stream;
    if ((st = COLO_CHECK_CUBLAS(colo_cublas.set_stream(cs->blas, cs->st))) != COLO_OK)
        goto out_blas;
    /* cuBLAS sizes its grids for the SMs it may use: on a partition, its own. */
    if (cs->green && (st = COLO_CHECK_CUBLAS(colo_cublas.set_sm_count_target(cs->blas, cs->sms))) != COLO_OK)
        goto out_blas;
    if ((st = COLO_CHECK_CUDA(cudaMalloc((void **)&cs->d_flag, sizeof(int)))) != COLO_OK)
        goto out_blas;
    if ((st = COLO_CHECK_CUDA(cudaMallocHost((void **)&cs->h_flag, sizeof(int)))) != COLO_OK)
        goto out_flag;
    if ((st = COLO_CHECK_CUDA(cudaMemsetAsync(cs->d_flag, 0, sizeof(int), cs->st))) != COLO_OK)
        goto out_host;
    s->ctx = cs;
    return COLO_OK;

out_host:
    cudaFreeHost(cs->h_flag);
out_flag:
    cudaFree(cs->d_flag);
out_blas:
    colo_cublas.destroy(cs->blas);
out_stream:
    cudaStreamDestroy(cs->st);
    if (cs->green)
        cs->api->ctx_destroy(cs->green);
    cudaGetLastError(); /* what undoing failed must not fail the next launch check */
out_free:
    colo_set_err(err, errlen, "cuda: cannot create a stream (%s)", colo_status_str(st));
out_free_quiet:
    free(cs);
    return st;
}

static void cuda_stream_fini(colo_stream *s)
{
    cuda_stream *cs = s->ctx;
    bind_stream(s);
    if (cs->capturing) { /* first: waiting for a stream that records fails and spoils the recording */
        cudaGraph_t g = NULL;
        if (cudaStreamEndCapture(cs->st, &g) == cudaSuccess && g)
            cudaGraphDestroy(g);
        cudaGetLastError();
    }
    if (cuda_poisoned(s->dev)) {
        cudaStreamSynchronize(cs->st);
        cudaGetLastError();
    } else {
        COLO_CHECK_CUDA(cudaStreamSynchronize(cs->st));
    }
    for (int i = 0; i < cs->n_graphs; i++)
        if (cs->graphs[i].exec)
            cudaGraphExecDestroy(cs->graphs[i].exec);
    colo_cublas.destroy(cs->blas);
    cudaStreamDestroy(cs->st);
    if (cs->green)
        cs->api->ctx_destroy(cs->green);
    cudaFree(cs->scratch);
    cudaFree(cs->scratch_retired);
    cudaFree(cs->d_flag);
    cudaFreeHost(cs->h_flag);
    cudaGetLastError();
    free(cs);
}

static colo_status cuda_stream_sync(colo_stream *s)
{
    cuda_stream *cs = s->ctx;
    if (cuda_poisoned(s->dev))
        return COLO_EFATAL;
    bind_stream(s);
    *cs->h_flag = 0;
    colo_status st =
        COLO_CHECK_CUDA(cudaMemcpyAsync(cs->h_flag, cs->d_flag, sizeof(int), cudaMemcpyDeviceToHost, cs->st));
    if (st == COLO_OK)
        st = COLO_CHECK_CUDA(cudaStreamSynchronize(cs->st));
    if (st == COLO_OK && cs->scratch_retired) {
        st = COLO_CHECK_CUDA(cudaFree(cs->scratch_retired));
        cs->scratch_retired = NULL;
    }
    if (st == COLO_OK && *cs->h_flag) {
        st = (colo_status)*cs->h_flag;
        colo_status e = COLO_CHECK_CUDA(cudaMemsetAsync(cs->d_flag, 0, sizeof(int), cs->st));
        if (e != COLO_OK)
            st = e;
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
    if (cuda_poisoned(s->dev))
        return COLO_EFATAL;
    bind_stream(s);
    cudaError_t e = cudaStreamQuery(((cuda_stream *)s->ctx)->st);
    if (e == cudaErrorNotReady) {
        cudaGetLastError(); /* not an error: keep it from the next launch check */
        return COLO_EAGAIN;
    }
    return COLO_CHECK_CUDA(e);
}

static colo_status cuda_stream_set_workspace(colo_stream *s, void *ptr, size_t bytes)
{
    if (((uintptr_t)ptr & 255) != 0) {
        COLO_ERROR("cuda: a cuBLAS workspace must be aligned to 256 bytes");
        return COLO_EINVAL;
    }
    return COLO_CHECK_CUBLAS(colo_cublas.set_workspace(colo_cuda_cublas(s), ptr, bytes));
}

static colo_status cuda_memcpy_async(colo_stream *s, void *dst, const void *src, size_t bytes, colo_copy_kind kind)
{
    enum cudaMemcpyKind k = kind == COLO_COPY_H2D   ? cudaMemcpyHostToDevice
                            : kind == COLO_COPY_D2H ? cudaMemcpyDeviceToHost
                                                    : cudaMemcpyDeviceToDevice;
    return COLO_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, k, colo_cuda_stream(s)));
}

static colo_status cuda_memset_async(colo_stream *s, void *dst, int byte, size_t bytes)
{
    return COLO_CHECK_CUDA(cudaMemsetAsync(dst, byte, bytes, colo_cuda_stream(s)));
}

/* ---- events ------------------------------------------------------------------------------------- */

static colo_status cuda_event_init(colo_device *dev, colo_event *ev, char *err, size_t errlen)
{
    cudaEvent_t e = NULL;
    colo_status st = use_device(dev);
    if (st == COLO_OK)
        st = COLO_CHECK_CUDA(cudaEventCreate(&e)); /* with timing */
    if (st != COLO_OK) {
        colo_set_err(err, errlen, "cuda: cannot create an event (%s)", colo_status_str(st));
        return st;
    }
    ev->ctx = e;
    return COLO_OK;
}

static void cuda_event_fini(colo_event *ev)
{
    cudaEventDestroy((cudaEvent_t)ev->ctx);
    cudaGetLastError();
}

static colo_status cuda_event_record(colo_event *ev, colo_stream *s)
{
    return COLO_CHECK_CUDA(cudaEventRecord((cudaEvent_t)ev->ctx, colo_cuda_stream(s)));
}

static colo_status cuda_event_query(colo_event *ev)
{
    cudaError_t e = cudaEventQuery((cudaEvent_t)ev->ctx);
    if (e == cudaErrorNotReady) {
        cudaGetLastError(); /* not an error: keep it from the next launch check */
        return COLO_EAGAIN;
    }
    return COLO_CHECK_CUDA(e);
}

static colo_status cuda_event_sync(colo_event *ev)
{
    return COLO_CHECK_CUDA(cudaEventSynchronize((cudaEvent_t)ev->ctx));
}

static colo_status cuda_event_elapsed_ms(colo_event *start, colo_event *end, float *ms)
{
    cudaError_t e = cudaEventElapsedTime(ms, (cudaEvent_t)start->ctx, (cudaEvent_t)end->ctx);
    if (e == cudaErrorNotReady) {
        cudaGetLastError();
        return COLO_EAGAIN;
    }
    return COLO_CHECK_CUDA(e);
}

/* ---- graphs ------------------------------------------------------------------------------ */

/* Records in thread-local mode: other threads (other models' executors) may
 * allocate or synchronise meanwhile without spoiling the recording; this
 * thread may not (an op that does fails the recording, and the caller
 * queues the step again). */
static colo_status cuda_graph_begin(colo_stream *s)
{
    cuda_stream *cs = s->ctx;
    if (!((const cuda_dev *)s->dev->ctx)->graphs || cs->capturing)
        return COLO_EUNSUPPORTED;
    if (cuda_poisoned(s->dev))
        return COLO_EFATAL;
    bind_stream(s);
    colo_status st = COLO_CHECK_CUDA(cudaStreamBeginCapture(cs->st, cudaStreamCaptureModeThreadLocal));
    cs->capturing = st == COLO_OK;
    return st;
}

static colo_status cuda_graph_end(colo_stream *s, int key)
{
    cuda_stream *cs = s->ctx;
    if (!cs->capturing)
        return COLO_EINVAL;
    cs->capturing = false;
    bind_stream(s);
    cudaGraph_t g = NULL;
    colo_status st = COLO_CHECK_CUDA(cudaStreamEndCapture(cs->st, &g));
    if (st == COLO_OK && (key < 0 || !g))
        st = COLO_ECANCELED;
    if (st != COLO_OK) {
        if (g)
            cudaGraphDestroy(g);
        return st;
    }
    int slot = -1;
    for (int i = 0; i < cs->n_graphs; i++)
        if (cs->graphs[i].key == key && cs->graphs[i].exec)
            slot = i;
    if (slot >= 0) {
        /* the same kernels with other arguments: patched in place; anything
         * else (another kernel, another count) fails the update, and the
         * graph is built anew */
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(cs->graphs[slot].exec, g, &info) != cudaSuccess) {
            cudaGetLastError(); /* a refused update is no error of the stream */
            cudaGraphExecDestroy(cs->graphs[slot].exec);
            cs->graphs[slot].exec = NULL;
        }
    } else {
        if (cs->n_graphs < COLO_STREAM_GRAPHS) {
            slot = cs->n_graphs++;
        } else { /* the oldest key goes */
            slot = cs->next_graph;
            cs->next_graph = (cs->next_graph + 1) % COLO_STREAM_GRAPHS;
        }
        if (cs->graphs[slot].exec)
            cudaGraphExecDestroy(cs->graphs[slot].exec);
        cs->graphs[slot].exec = NULL;
        cs->graphs[slot].key = key;
    }
    if (!cs->graphs[slot].exec)
        st = COLO_CHECK_CUDA(cudaGraphInstantiate(&cs->graphs[slot].exec, g, 0));
    cudaGraphDestroy(g);
    if (st != COLO_OK) {
        cs->graphs[slot].exec = NULL;
        return st;
    }
    st = COLO_CHECK_CUDA(cudaGraphLaunch(cs->graphs[slot].exec, cs->st));
    cs->graphs_launched += st == COLO_OK;
    return st;
}

static uint64_t cuda_graphs_launched(const colo_stream *s) { return ((const cuda_stream *)s->ctx)->graphs_launched; }

/* Page-locked host memory: a device-to-host copy into it is one DMA,
 * where pageable memory is staged through the driver's buffer and the copy
 * blocks the calling thread. */
static void *cuda_host_alloc(colo_device *dev, size_t bytes)
{
    void *p = NULL;
    if (use_device(dev) != COLO_OK || COLO_CHECK_CUDA(cudaMallocHost(&p, bytes)) != COLO_OK) {
        COLO_WARN("cuda: cudaMallocHost of %zu bytes failed", bytes);
        return NULL;
    }
    return p;
}

static void cuda_host_free(colo_device *dev, void *p)
{
    (void)dev;
    if (COLO_CHECK_CUDA(cudaFreeHost(p)) != COLO_OK)
        COLO_WARN("cuda: cudaFreeHost failed");
}

static const colo_device_vtbl cuda_vtbl = {
    .name = "cuda",
    .close = cuda_close,
    .get_info = cuda_get_info,
    .buffer_alloc = cuda_buffer_alloc,
    .buffer_free = cuda_buffer_free,
    .buffer_reserve = cuda_buffer_reserve,
    .reserve_supported = cuda_reserve_supported,
    .buffer_granularity = cuda_buffer_granularity,
    .buffer_commit = cuda_buffer_commit,
    .buffer_decommit = cuda_buffer_decommit,
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
    .poisoned = cuda_poisoned,
    .stream_set_workspace = cuda_stream_set_workspace,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graphs_launched = cuda_graphs_launched,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
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
    cd->budget = cfg ? cfg->gpu_memory_bytes : 0;
    cd->graphs = cfg && cfg->cuda_graphs;
    cd->exact = cfg && cfg->exact_activations;
    if (cd->ordinal < 0 || cd->ordinal >= CUDA_MAX_DEVICES) {
        colo_set_err(err, errlen, "cuda: device ordinal %d out of range", cd->ordinal);
        goto out_free;
    }
    colo_status st = bind_ordinal(cd->ordinal);
    if (st == COLO_OK)
        st = COLO_CHECK_CUDA(cudaGetDeviceProperties(&cd->prop, cd->ordinal));
    if (st == COLO_OK)
        st = COLO_CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&cd->prio_least, &cd->prio_greatest));
    if (st == COLO_OK) /* create the primary context now, not inside the first op */
        st = COLO_CHECK_CUDA(cudaFree(NULL));
    if (st != COLO_OK) {
        colo_set_err(err, errlen, "cuda: cannot open device %d (%s)", cd->ordinal, colo_status_str(st));
        goto out_free;
    }
    probe_green(cd);
    probe_vmm(cd);
    dev->vt = &cuda_vtbl;
    dev->kind = COLO_BACKEND_CUDA;
    dev->ctx = cd;
    COLO_INFO("cuda: device %d: %s (sm_%d%d), %d SMs, %zu MiB, stream priorities %d..%d", cd->ordinal,
              cd->prop.name, cd->prop.major, cd->prop.minor, cd->prop.multiProcessorCount,
              cd->prop.totalGlobalMem >> 20, cd->prio_least, cd->prio_greatest);
    return dev;

out_free:
    free(cd);
    free(dev);
    return NULL;
}
