/* Devices, each set up once at its first use under the driver's lock: its capability
 * and limits, the arches of the wheel it runs, a pool for launch memory, its slots for
 * loaded functions, and its primary context (the one torch runs on), which launches
 * and module loads enter and leave. */
#include <stdatomic.h>
#include <stdlib.h>

#include "cu.h"

static nt_device nt_devices[NT_MAX_DEVICES];
static atomic_int nt_device_ready[NT_MAX_DEVICES];

/* A memory pool for global scratch, if some kernel needs it: it keeps what it has
 * allocated (a release threshold of "never"), so the per-launch stream-ordered
 * allocations cost no system call once warm. */
static CUresult nt_scratch_pool(int ordinal, CUmemoryPool *pool, const char **what) {
    *pool = NULL;
    int needed = 0;
    for (uint32_t k = 0; k < nt_num_kernels; k++)
        needed |= nt_kernels[k].scratch > 0 || nt_kernels[k].workspace > 0;
    if (!needed)
        return CUDA_SUCCESS;
    if (nt_cu.cuMemPoolCreate == NULL || nt_cu.cuMemPoolSetAttribute == NULL)
        return NT_CU_MISSING(what, " (needs a CUDA 11.2 driver)", cuMemPoolCreate);
    CUmemPoolProps props = {0};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = ordinal;
    CUresult result =
        NT_CU_NOTE(what, " (needs a CUDA 11.2 driver)", cuMemPoolCreate, pool, &props);
    if (result != CUDA_SUCCESS)
        return result;
    cuuint64_t keep = UINT64_MAX;
    return NT_CU_NOTE(what, "(RELEASE_THRESHOLD)", cuMemPoolSetAttribute, *pool,
                      CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
}

static CUresult nt_device_attributes(nt_device *device, CUdevice handle, const char **what) {
    int major = 0, minor = 0;
    CUresult result;
    if ((result = NT_CU(what, cuDeviceGetAttribute, &major,
                        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, handle)) != CUDA_SUCCESS ||
        (result = NT_CU(what, cuDeviceGetAttribute, &minor,
                        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, handle)) != CUDA_SUCCESS ||
        (result = NT_CU(what, cuDeviceGetAttribute, &device->shared_optin,
                        CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, handle)) !=
            CUDA_SUCCESS ||
        (result = NT_CU(what, cuDeviceGetAttribute, &device->multiprocessors,
                        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, handle)) != CUDA_SUCCESS)
        return result;
    device->capability = 10 * major + minor;
    return CUDA_SUCCESS;
}

static CUresult nt_device_init(int ordinal, const char **what) {
    nt_device *device = &nt_devices[ordinal];
    CUdevice handle;
    CUresult result;
    if ((result = NT_CU(what, cuDeviceGet, &handle, ordinal)) != CUDA_SUCCESS ||
        (result = nt_device_attributes(device, handle, what)) != CUDA_SUCCESS ||
        (result = nt_scratch_pool(ordinal, &device->scratch_pool, what)) != CUDA_SUCCESS ||
        /* torch runs on the primary context; retaining it keeps our modules valid. */
        (result = NT_CU(what, cuDevicePrimaryCtxRetain, &device->context, handle)) != CUDA_SUCCESS)
        return result;
    device->num_arches = nt_arches_for(device->capability, device->arches);
    device->functions = calloc(nt_num_kernels ? nt_num_kernels : 1, sizeof(*device->functions));
    if (device->functions == NULL) {
        *what = "calloc";
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

CUresult nt_device_get(int ordinal, const nt_device **device, const char **what) {
    CUresult result = CUDA_SUCCESS;
    if (ordinal < 0 || ordinal >= NT_MAX_DEVICES) {
        *what = "device ordinal";
        return CUDA_ERROR_INVALID_DEVICE;
    }
    if (!atomic_load_explicit(&nt_device_ready[ordinal], memory_order_acquire)) {
        pthread_mutex_lock(&nt_driver_lock);
        if (!atomic_load_explicit(&nt_device_ready[ordinal], memory_order_relaxed)) {
            nt_capture_mode mode = nt_capture_relax(); /* a first use may be captured */
            result = nt_device_init(ordinal, what);
            nt_capture_restore(mode);
            if (result == CUDA_SUCCESS)
                atomic_store_explicit(&nt_device_ready[ordinal], 1, memory_order_release);
        }
        pthread_mutex_unlock(&nt_driver_lock);
    }
    *device = &nt_devices[ordinal];
    return result;
}

CUresult nt_enter(const nt_device *device, CUcontext *previous, const char **what) {
    CUresult result = NT_CU(what, cuCtxGetCurrent, previous);
    if (result != CUDA_SUCCESS || *previous == device->context)
        return result;
    return NT_CU(what, cuCtxSetCurrent, device->context);
}

CUresult nt_leave(const nt_device *device, CUcontext previous, const char **what) {
    if (previous == device->context) /* nt_enter switched nothing: a driver call saved */
        return CUDA_SUCCESS;
    CUcontext current = NULL;
    CUresult result = NT_CU(what, cuCtxGetCurrent, &current);
    if (result != CUDA_SUCCESS || current == previous)
        return result;
    return NT_CU(what, cuCtxSetCurrent, previous);
}
