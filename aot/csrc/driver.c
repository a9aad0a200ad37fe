/* The CUDA driver, opened with dlopen at the first launch so that importing the
 * wheel needs no CUDA; devices and their primary contexts (the ones torch runs on);
 * each module loaded lazily into a device's primary context, once, under one lock. Nothing here
 * touches Python: the GIL is released around module loads, and errors travel back as CUresult +
 * call name. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "driver.h"

/* glibc 2.34 moved the dl* calls into libc under a new version, GLIBC_2.34, and a
 * plain link binds to it: the wheel would then not load on glibc 2.33 and older
 * (Ubuntu 20.04, RHEL 8). Binding to the first version, which every glibc keeps
 * (in libdl.so.2 before 2.34, which the extension lists as needed; in libc after),
 * keeps the extension's glibc floor at manylinux2014's 2.17. */
#if defined(__GLIBC__) && defined(__x86_64__)
#define NT_GLIBC_FIRST "GLIBC_2.2.5"
#elif defined(__GLIBC__) && defined(__aarch64__)
#define NT_GLIBC_FIRST "GLIBC_2.17"
#endif
#ifdef NT_GLIBC_FIRST
__asm__(".symver dlopen, dlopen@" NT_GLIBC_FIRST);
__asm__(".symver dlsym, dlsym@" NT_GLIBC_FIRST);
#endif

#define NT_DRIVER_CALLS(X)                                                                         \
    X(cuInit)                                                                                      \
    X(cuGetErrorName)                                                                              \
    X(cuGetErrorString)                                                                            \
    X(cuDeviceGet)                                                                                 \
    X(cuDeviceGetAttribute)                                                                        \
    X(cuDevicePrimaryCtxRetain)                                                                    \
    X(cuCtxGetCurrent)                                                                             \
    X(cuCtxSetCurrent)                                                                             \
    X(cuModuleLoadData)                                                                            \
    X(cuModuleGetFunction)                                                                         \
    X(cuModuleUnload)                                                                              \
    X(cuFuncSetAttribute)                                                                          \
    X(cuLaunchKernel)

/* Needed only by kernels that use them (CUDA 12 drivers have them all): global
 * scratch and cluster launches. A driver without one fails those kernels alone. */
#define NT_OPTIONAL_CALLS(X)                                                                       \
    X(cuLaunchKernelEx)                                                                            \
    X(cuMemPoolCreate)                                                                             \
    X(cuMemPoolSetAttribute)                                                                       \
    X(cuMemAllocFromPoolAsync)                                                                     \
    X(cuMemAllocAsync)                                                                             \
    X(cuMemFreeAsync)                                                                              \
    X(cuMemsetD8Async)                                                                             \
    X(cuStreamIsCapturing)

/* cuda.h maps some names to versioned symbols (cuFoo -> cuFoo_v2); stringizing
 * after expansion asks dlsym for the symbol the header's prototype describes. */
#define NT_STR(name) NT_STR_(name)
#define NT_STR_(name) #name

static struct {
#define NT_FIELD(name) __typeof__(&name) name;
    NT_DRIVER_CALLS(NT_FIELD)
    NT_OPTIONAL_CALLS(NT_FIELD)
#undef NT_FIELD
} cu;

static pthread_mutex_t nt_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int nt_driver_state; /* 0: not loaded, 1: loaded */
static CUresult nt_driver_error;
static nt_device nt_devices[NT_MAX_DEVICES];
static _Atomic(CUfunction) *_Atomic nt_functions[NT_MAX_DEVICES];
static atomic_int nt_device_ready[NT_MAX_DEVICES];

static CUresult nt_driver_open(const char **what) {
    void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        *what = "dlopen(libcuda.so.1)";
        return CUDA_ERROR_NO_DEVICE;
    }
#define NT_RESOLVE(name)                                                                           \
    *(void **)&cu.name = dlsym(library, NT_STR(name));                                             \
    if (cu.name == NULL) {                                                                         \
        *what = "dlsym(" NT_STR(name) ")";                                                         \
        return CUDA_ERROR_NOT_FOUND;                                                               \
    }
    NT_DRIVER_CALLS(NT_RESOLVE)
#undef NT_RESOLVE
#define NT_RESOLVE_OPTIONAL(name) *(void **)&cu.name = dlsym(library, NT_STR(name));
    NT_OPTIONAL_CALLS(NT_RESOLVE_OPTIONAL)
#undef NT_RESOLVE_OPTIONAL
    *what = "cuInit";
    return cu.cuInit(0);
}

CUresult nt_driver_load(const char **what) {
    static const char *failed_call = "";
    if (atomic_load_explicit(&nt_driver_state, memory_order_acquire)) {
        *what = failed_call;
        return nt_driver_error;
    }
    pthread_mutex_lock(&nt_lock);
    if (!atomic_load_explicit(&nt_driver_state, memory_order_relaxed)) {
        nt_driver_error = nt_driver_open(&failed_call);
        atomic_store_explicit(&nt_driver_state, 1, memory_order_release);
    }
    pthread_mutex_unlock(&nt_lock);
    *what = failed_call;
    return nt_driver_error;
}

const char *nt_error_name(CUresult result) {
    const char *name = NULL;
    if (cu.cuGetErrorName == NULL || cu.cuGetErrorName(result, &name) != CUDA_SUCCESS)
        return "CUDA_ERROR_UNKNOWN";
    return name;
}

const char *nt_error_string(CUresult result) {
    const char *text = NULL;
    if (result == CUDA_ERROR_NO_DEVICE && cu.cuInit == NULL)
        return "the CUDA driver (libcuda.so.1) could not be loaded";
    if (cu.cuGetErrorString == NULL || cu.cuGetErrorString(result, &text) != CUDA_SUCCESS)
        return "unknown error";
    return text;
}

int nt_arch_runs_on(const nt_kernel *kernel, int capability) {
    uint16_t built = kernel->capability;
    if (kernel->exact)
        return built == capability;
    /* PTX compiles for its capability and any later one. */
    if (kernel->ptx)
        return built <= capability;
    /* A cubin runs on its major version at equal or higher minor versions. */
    return built / 10 == capability / 10 && built % 10 <= capability % 10;
}

int nt_arches_for(int capability, uint16_t *arches) {
    int count = 0, cubins = 0;
    for (int want_ptx = 0; want_ptx <= 1 && !(want_ptx && cubins); want_ptx++) {
        int first = count;
        for (uint32_t k = 0; k < nt_num_kernels; k++) {
            const nt_kernel *kernel = &nt_kernels[k];
            if (kernel->ptx != want_ptx || !nt_arch_runs_on(kernel, capability))
                continue;
            uint16_t arch = nt_kernel_arch(kernel);
            int known = 0;
            for (int a = first; a < count; a++)
                known |= arches[a] == arch;
            if (!known && count < NT_MAX_ARCHES)
                arches[count++] = arch;
        }
        /* Best first: the closest capability below or at the device's. */
        for (int a = first + 1; a < count; a++)
            for (int b = a; b > first && arches[b] > arches[b - 1]; b--) {
                uint16_t swap = arches[b];
                arches[b] = arches[b - 1];
                arches[b - 1] = swap;
            }
        if (!want_ptx)
            cubins = count;
    }
    return count;
}

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
    *what = "cuMemPoolCreate (needs a CUDA 11.2 driver)";
    if (cu.cuMemPoolCreate == NULL || cu.cuMemPoolSetAttribute == NULL)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUmemPoolProps props = {0};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = ordinal;
    CUresult result = cu.cuMemPoolCreate(pool, &props);
    if (result != CUDA_SUCCESS)
        return result;
    cuuint64_t keep = UINT64_MAX;
    *what = "cuMemPoolSetAttribute(RELEASE_THRESHOLD)";
    return cu.cuMemPoolSetAttribute(*pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
}

static CUresult nt_device_init(int ordinal, const char **what) {
    nt_device *device = &nt_devices[ordinal];
    CUdevice handle;
    int major = 0, minor = 0;
    CUresult result;
    *what = "cuDeviceGet";
    if ((result = cu.cuDeviceGet(&handle, ordinal)) != CUDA_SUCCESS)
        return result;
    *what = "cuDeviceGetAttribute";
    if ((result = cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                          handle)) != CUDA_SUCCESS ||
        (result = cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                          handle)) != CUDA_SUCCESS ||
        (result = cu.cuDeviceGetAttribute(&device->shared_optin,
                                          CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                          handle)) != CUDA_SUCCESS ||
        (result = cu.cuDeviceGetAttribute(&device->multiprocessors,
                                          CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, handle)) !=
            CUDA_SUCCESS)
        return result;
    if ((result = nt_scratch_pool(ordinal, &device->scratch_pool, what)) != CUDA_SUCCESS)
        return result;
    /* torch runs on the primary context; retaining it keeps our modules valid. */
    *what = "cuDevicePrimaryCtxRetain";
    if ((result = cu.cuDevicePrimaryCtxRetain(&device->context, handle)) != CUDA_SUCCESS)
        return result;
    device->capability = 10 * major + minor;
    device->num_arches = nt_arches_for(device->capability, device->arches);
    _Atomic(CUfunction) *functions =
        calloc(nt_num_kernels ? nt_num_kernels : 1, sizeof(*functions));
    if (functions == NULL) {
        *what = "calloc";
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    atomic_store_explicit(&nt_functions[ordinal], functions, memory_order_relaxed);
    return CUDA_SUCCESS;
}

CUresult nt_device_get(int ordinal, const nt_device **device, const char **what) {
    CUresult result = CUDA_SUCCESS;
    if (ordinal < 0 || ordinal >= NT_MAX_DEVICES) {
        *what = "device ordinal";
        return CUDA_ERROR_INVALID_DEVICE;
    }
    if (!atomic_load_explicit(&nt_device_ready[ordinal], memory_order_acquire)) {
        pthread_mutex_lock(&nt_lock);
        if (!atomic_load_explicit(&nt_device_ready[ordinal], memory_order_relaxed)) {
            result = nt_device_init(ordinal, what);
            if (result == CUDA_SUCCESS)
                atomic_store_explicit(&nt_device_ready[ordinal], 1, memory_order_release);
        }
        pthread_mutex_unlock(&nt_lock);
    }
    *device = &nt_devices[ordinal];
    return result;
}

CUresult nt_enter(const nt_device *device, CUcontext *previous, const char **what) {
    CUresult result;
    *what = "cuCtxGetCurrent";
    if ((result = cu.cuCtxGetCurrent(previous)) != CUDA_SUCCESS)
        return result;
    if (*previous == device->context)
        return CUDA_SUCCESS;
    *what = "cuCtxSetCurrent";
    return cu.cuCtxSetCurrent(device->context);
}

CUresult nt_leave(const nt_device *device, CUcontext previous, const char **what) {
    if (previous == device->context) /* nt_enter switched nothing: a driver call saved */
        return CUDA_SUCCESS;
    CUcontext current = NULL;
    *what = "cuCtxGetCurrent";
    CUresult result = cu.cuCtxGetCurrent(&current);
    if (result != CUDA_SUCCESS || current == previous)
        return result;
    *what = "cuCtxSetCurrent";
    return cu.cuCtxSetCurrent(previous);
}

/* What failed, where it is not a driver call's name: per thread, as messages are. */
static _Thread_local char nt_what[160];
/* Modules loaded and not unloaded; a test's fault in the next load (1: its function
 * is not found, 2: its shared memory opt-in fails). */
static atomic_long nt_modules;
static atomic_int nt_fault;

long nt_loaded_modules(void) { return atomic_load(&nt_modules); }

void nt_fault_next_load(int stage) { atomic_store(&nt_fault, stage); }

/* Load a kernel's module and take its function; on any failure the module is
 * unloaded again (a failed first use is retried by the next call, which must not
 * leave one more module behind each time). */
static CUresult nt_load(const nt_device *device, const nt_kernel *kernel, CUfunction *function,
                        const char **what) {
    CUmodule module;
    CUresult result;
    if ((int)kernel->shared > 49152 && (int)kernel->shared > device->shared_optin) {
        snprintf(nt_what, sizeof nt_what,
                 "fitting its %u bytes of shared memory in this GPU's %d a block", kernel->shared,
                 device->shared_optin);
        *what = nt_what;
        return CUDA_ERROR_INVALID_VALUE;
    }
    *what = "cuModuleLoadData";
    if ((result = cu.cuModuleLoadData(&module, kernel->cubin)) != CUDA_SUCCESS)
        return result;
    atomic_fetch_add(&nt_modules, 1);
    int fault = atomic_exchange(&nt_fault, 0);
    *what = "cuModuleGetFunction";
    result = fault == 1 ? CUDA_ERROR_NOT_FOUND
                        : cu.cuModuleGetFunction(function, module, kernel->function);
    if (result == CUDA_SUCCESS && (kernel->shared > 49152 || fault == 2)) {
        /* Above 48 KiB a kernel must opt into dynamic shared memory. */
        *what = "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)";
        result = fault == 2 ? CUDA_ERROR_INVALID_VALUE
                            : cu.cuFuncSetAttribute(*function,
                                                    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                    (int)kernel->shared);
    }
    if (result != CUDA_SUCCESS) {
        cu.cuModuleUnload(module);
        atomic_fetch_sub(&nt_modules, 1);
        *function = NULL;
    }
    return result;
}

CUfunction nt_function_loaded(int ordinal, uint32_t index) {
    return atomic_load_explicit(
        &atomic_load_explicit(&nt_functions[ordinal], memory_order_acquire)[index],
        memory_order_acquire);
}

CUresult nt_function(const nt_device *device, int ordinal, uint32_t index, CUfunction *function,
                     const char **what) {
    _Atomic(CUfunction) *slot =
        &atomic_load_explicit(&nt_functions[ordinal], memory_order_relaxed)[index];
    CUfunction loaded = atomic_load_explicit(slot, memory_order_acquire);
    if (loaded != NULL) {
        *function = loaded;
        return CUDA_SUCCESS;
    }
    CUresult result = CUDA_SUCCESS;
    pthread_mutex_lock(&nt_lock);
    loaded = atomic_load_explicit(slot, memory_order_relaxed);
    if (loaded == NULL) {
        CUcontext previous;
        const char *ignored;
        result = nt_enter(device, &previous, what);
        if (result == CUDA_SUCCESS) {
            result = nt_load(device, &nt_kernels[index], &loaded, what);
            /* A loaded function is kept even if restoring the context fails. */
            if (result == CUDA_SUCCESS)
                atomic_store_explicit(slot, loaded, memory_order_release);
            CUresult left = nt_leave(device, previous, &ignored);
            if (result == CUDA_SUCCESS && left != CUDA_SUCCESS) {
                result = left;
                *what = ignored;
            }
        }
    }
    pthread_mutex_unlock(&nt_lock);
    *function = loaded;
    return result;
}

CUresult nt_launch(const nt_kernel *kernel, CUfunction function, uint32_t grid, CUstream stream,
                   void **params, const char **what) {
    if (kernel->num_ctas <= 1) {
        *what = "cuLaunchKernel";
        return cu.cuLaunchKernel(function, grid, 1, 1, 32u * kernel->num_warps, 1, 1,
                                 kernel->shared, stream, params, NULL);
    }
    /* Clusters of num_ctas programs, as Triton launches them: the grid counts
     * clusters, each program of a cluster a block. */
    *what = "cuLaunchKernelEx (clusters need a CUDA 12 driver)";
    if (cu.cuLaunchKernelEx == NULL)
        return CUDA_ERROR_NOT_SUPPORTED;
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
    return cu.cuLaunchKernelEx(&config, function, params, NULL);
}

CUresult nt_scratch_alloc(const nt_device *device, CUstream stream, size_t bytes,
                          CUdeviceptr *pointer, const char **what) {
    *what = "cuMemAllocFromPoolAsync (global scratch needs a CUDA 11.2 driver)";
    if (device->scratch_pool == NULL || cu.cuMemAllocFromPoolAsync == NULL ||
        cu.cuMemAllocAsync == NULL || cu.cuStreamIsCapturing == NULL)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUstreamCaptureStatus capturing;
    *what = "cuStreamIsCapturing";
    CUresult result = cu.cuStreamIsCapturing(stream, &capturing);
    if (result != CUDA_SUCCESS)
        return result;
    if (capturing != CU_STREAM_CAPTURE_STATUS_NONE) {
        /* In a graph: an allocation node the graph owns, freed by a node after the
         * kernel's, so replays on any stream never share scratch. */
        *what = "cuMemAllocAsync (while capturing a CUDA graph)";
        return cu.cuMemAllocAsync(pointer, bytes, stream);
    }
    return cu.cuMemAllocFromPoolAsync(pointer, bytes, device->scratch_pool, stream);
}

CUresult nt_scratch_free(CUdeviceptr pointer, CUstream stream, const char **what) {
    *what = "cuMemFreeAsync";
    return cu.cuMemFreeAsync(pointer, stream);
}

CUresult nt_scratch_zero(CUdeviceptr pointer, size_t bytes, CUstream stream, const char **what) {
    *what = "cuMemsetD8Async";
    if (cu.cuMemsetD8Async == NULL)
        return CUDA_ERROR_NOT_SUPPORTED;
    return cu.cuMemsetD8Async(pointer, 0, bytes, stream);
}

int nt_default_multiprocessors(int capability) {
    for (uint32_t t = 0; t < nt_num_targets; t++)
        if (nt_targets[t].capability == capability)
            return nt_targets[t].multiprocessors;
    return 1;
}
