/* The launch, in the driver layer: the chosen kernel's parameters packed (their values
 * are the core's nt_value), the memory it needs allocated and freed around it on the
 * launch's stream, and the launch itself, in the device's context. */
#include "cu.h"

typedef union {
    int8_t i1;
    int32_t i32;
    int64_t i64;
    float f32;
    double f64;
    uint64_t pointer;
} nt_slot;

static void nt_pack(const nt_kernel *kernel, const nt_call *c, nt_slot *slots, void **params) {
    int n = 0;
    for (; n < kernel->num_params; n++) {
        const nt_param *p = &kernel->params[n];
        int64_t integer = 0;
        double real = 0;
        nt_value(c, p, &integer, &real);
        switch (p->type) {
        case NT_I1: slots[n].i1 = (int8_t)(integer != 0); break;
        case NT_I32: slots[n].i32 = (int32_t)integer; break;
        case NT_I64: slots[n].i64 = integer; break;
        case NT_F32: slots[n].f32 = (float)real; break;
        case NT_F64: slots[n].f64 = real; break;
        default: slots[n].pointer = (uint64_t)integer; break;
        }
        params[n] = &slots[n];
    }
    for (int extra = 0; extra < kernel->num_scratch; extra++, n++) {
        slots[n].pointer = 0; /* global scratch is filled in at launch; profile: none */
        params[n] = &slots[n];
    }
}

static CUresult nt_launch(const nt_kernel *kernel, CUfunction function, uint32_t grid,
                          CUstream stream, void **params, const char **what) {
    if (kernel->num_ctas <= 1)
        return NT_CU(what, cuLaunchKernel, function, grid, 1, 1, 32u * kernel->num_warps, 1, 1,
                     kernel->shared, stream, params, NULL);
    /* Clusters of num_ctas programs, as Triton launches them: the grid counts
     * clusters, each program of a cluster a block. */
    if (nt_cu.cuLaunchKernelEx == NULL)
        return NT_CU_MISSING(what, " (clusters need a CUDA 12 driver)", cuLaunchKernelEx);
    CUlaunchAttribute attributes[2] = {0};
    attributes[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attributes[0].value.clusterDim.x = kernel->num_ctas;
    attributes[0].value.clusterDim.y = 1;
    attributes[0].value.clusterDim.z = 1;
    attributes[1].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
    attributes[1].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
    CUlaunchConfig config = {0};
    config.gridDimX = grid * kernel->num_ctas;
    config.gridDimY = 1;
    config.gridDimZ = 1;
    config.blockDimX = 32u * kernel->num_warps;
    config.blockDimY = 1;
    config.blockDimZ = 1;
    config.sharedMemBytes = kernel->shared;
    config.hStream = stream;
    config.attrs = attributes;
    config.numAttrs = 2;
    return NT_CU_NOTE(what, " (clusters need a CUDA 12 driver)", cuLaunchKernelEx, &config,
                      function, params, NULL);
}

/* Launch memory kept between launches, by device and stream: a stream runs its
 * launches one after another, so the next launch on it may take the last one's memory
 * without an allocation and a free (two driver calls: 0.3-1.2 us of a split decode's
 * launch on an H100's host, docs/measurements.md). Up to NT_KEPT_BYTES a block,
 * NT_KEPT blocks (the least recently used given back, freed on its own stream).
 * Outside graph capture only; streams are assumed not to be destroyed while their
 * launches run and their handle given to another (torch's never are: it pools them,
 * and its allocator assumes as much). */
#define NT_KEPT 16
#define NT_KEPT_BYTES ((size_t)4 << 20)

typedef struct {
    const nt_device *device;
    CUstream stream;
    CUdeviceptr base;
    size_t bytes;
    uint64_t used; /* when last taken, for the least recently used */
} nt_kept_block;

static nt_kept_block nt_kept[NT_KEPT];
static uint64_t nt_kept_clock;
static pthread_mutex_t nt_kept_lock = PTHREAD_MUTEX_INITIALIZER;

/* The stream's kept block of at least `bytes` (*kept 1), or none (*kept 0: every block
 * is another device's). A block too small, or the least recently used one of this
 * device's, is freed on its stream and allocated anew. */
static CUresult nt_kept_take(const nt_device *device, CUstream stream, size_t bytes,
                             CUdeviceptr *pointer, int *kept, const char **what) {
    CUresult result = CUDA_SUCCESS;
    pthread_mutex_lock(&nt_kept_lock);
    nt_kept_block *block = NULL, *oldest = NULL;
    for (int k = 0; k < NT_KEPT && block == NULL; k++) {
        nt_kept_block *each = &nt_kept[k];
        if (each->device == device && each->stream == stream)
            block = each;
        else if ((each->device == device || each->device == NULL) &&
                 (oldest == NULL || each->used < oldest->used))
            oldest = each;
    }
    if (block == NULL)
        block = oldest;
    *kept = block != NULL;
    if (block != NULL && (block->stream != stream || block->bytes < bytes)) {
        if (block->base != 0)
            result = NT_CU(what, cuMemFreeAsync, block->base, block->stream);
        size_t size = bytes < 65536 ? 65536 : bytes;
        block->device = device;
        block->stream = stream;
        block->base = 0;
        block->bytes = 0;
        if (result == CUDA_SUCCESS)
            result = NT_CU(what, cuMemAllocFromPoolAsync, &block->base, size, device->scratch_pool,
                           stream);
        if (result == CUDA_SUCCESS)
            block->bytes = size;
        else
            block->base = 0;
    }
    if (block != NULL) {
        block->used = ++nt_kept_clock;
        *pointer = block->base;
    }
    pthread_mutex_unlock(&nt_kept_lock);
    return result;
}

/* Memory for one launch (global scratch, workspace), stream-ordered: the stream's kept
 * block (`nt_kept_take`; *kept 1), else from the device's pool, or (while the stream is
 * being captured into a CUDA graph) a graph allocation, freed with cuMemFreeAsync after
 * the launch is enqueued. */
static CUresult nt_scratch_alloc(const nt_device *device, CUstream stream, size_t bytes,
                                 CUdeviceptr *pointer, int *kept, const char **what) {
    if (device->scratch_pool == NULL || nt_cu.cuMemAllocFromPoolAsync == NULL ||
        nt_cu.cuMemAllocAsync == NULL || nt_cu.cuStreamIsCapturing == NULL)
        return NT_CU_MISSING(what, " (global scratch needs a CUDA 11.2 driver)",
                             cuMemAllocFromPoolAsync);
    *kept = 0;
    CUstreamCaptureStatus capturing;
    CUresult result = NT_CU(what, cuStreamIsCapturing, stream, &capturing);
    if (result != CUDA_SUCCESS)
        return result;
    if (capturing != CU_STREAM_CAPTURE_STATUS_NONE) {
        /* In a graph: an allocation node the graph owns, freed by a node after the
         * kernel's, so replays on any stream never share scratch. */
        return NT_CU_NOTE(what, " (while capturing a CUDA graph)", cuMemAllocAsync, pointer, bytes,
                          stream);
    }
    if (bytes <= NT_KEPT_BYTES) {
        result = nt_kept_take(device, stream, bytes, pointer, kept, what);
        if (result != CUDA_SUCCESS || *kept)
            return result;
    }
    return NT_CU(what, cuMemAllocFromPoolAsync, pointer, bytes, device->scratch_pool, stream);
}

/* Launch, with the memory the kernel needs allocated before and freed after, both
 * ordered on the launch's stream: its workspace (grid x its per-program bytes, the
 * first grid x zeroed bytes zeroed) and its global scratch (likewise, for Triton);
 * outside graph capture, small blocks are kept for the stream's next launch
 * (`nt_kept_take`). */
static CUresult nt_launch_with_memory(const nt_device *device, const nt_kernel *kernel,
                                      CUfunction function, int64_t grid, CUstream stream,
                                      nt_slot *slots, void **params, const char **what) {
    if (kernel->scratch == 0 && kernel->workspace == 0)
        return nt_launch(kernel, function, (uint32_t)grid, stream, params, what);
    size_t programs = (size_t)grid * kernel->num_ctas;
    size_t workspace = kernel->workspace ? programs * kernel->workspace + 128 : 0;
    size_t bytes = workspace + programs * kernel->scratch + kernel->scratch_align + 128;
    CUdeviceptr base = 0;
    int kept = 0;
    CUresult result = nt_scratch_alloc(device, stream, bytes, &base, &kept, what);
    if (result != CUDA_SUCCESS)
        return result;
    CUdeviceptr first = (base + 127) / 128 * 128; /* pool blocks are aligned; be sure */
    if (kernel->workspace_zeroed)
        result = nt_cu.cuMemsetD8Async == NULL ? NT_CU_MISSING(what, "", cuMemsetD8Async)
                                               : NT_CU(what, cuMemsetD8Async, first, 0,
                                                       programs * kernel->workspace_zeroed, stream);
    for (int n = 0; n < kernel->num_params; n++)
        if (kernel->params[n].kind == NT_WORKSPACE)
            slots[n].pointer = first;
    if (kernel->scratch) {
        uint64_t align = kernel->scratch_align;
        slots[kernel->num_params].pointer = (first + workspace + align - 1) / align * align;
    }
    if (result == CUDA_SUCCESS)
        result = nt_launch(kernel, function, (uint32_t)grid, stream, params, what);
    if (kept)
        return result;
    const char *free_what = "";
    CUresult freed = NT_CU(&free_what, cuMemFreeAsync, base, stream);
    if (result == CUDA_SUCCESS && freed != CUDA_SUCCESS) {
        *what = free_what;
        result = freed;
    }
    return result;
}

CUresult nt_launch_call(const nt_device *device, const nt_kernel *kernel, CUfunction function,
                        int64_t grid, CUstream stream, const nt_call *call, const char **what) {
    nt_slot slots[NT_MAX_PARAMS + 2];
    void *params[NT_MAX_PARAMS + 2];
    nt_pack(kernel, call, slots, params);
    CUcontext previous;
    CUresult result = nt_enter(device, &previous, what);
    if (result != CUDA_SUCCESS)
        return result;
    result = nt_launch_with_memory(device, kernel, function, grid, stream, slots, params, what);
    const char *left_what = "";
    CUresult left = nt_leave(device, previous, &left_what);
    if (result == CUDA_SUCCESS && left != CUDA_SUCCESS) {
        *what = left_what;
        result = left;
    }
    return result;
}
