/* Each kernel as a function of a device: its module loaded into the device's primary
 * context at its first use there, once, under the driver's lock (and in the relaxed
 * stream-capture mode: a first use may be inside a CUDA graph's capture); afterwards
 * read without a lock from the device's slots. */
#include <stdatomic.h>
#include <stdio.h>

#include "cu.h"

/* What failed, where it is not a driver call's name: per thread, as messages are. */
static _Thread_local char nt_what[160];
/* Modules loaded and not unloaded. */
static atomic_long nt_modules;

long nt_loaded_modules(void) { return atomic_load(&nt_modules); }

/* Load a kernel's module and take its function; on any failure the module is
 * unloaded again (a failed first use is retried by the next call, which must not
 * leave one more module behind each time). */
static CUresult nt_load(const nt_device *device, const nt_kernel *kernel, CUfunction *function,
                        const char **what) {
    if ((int)kernel->shared > 49152 && (int)kernel->shared > device->shared_optin) {
        snprintf(nt_what, sizeof nt_what,
                 "fitting its %u bytes of shared memory in this GPU's %d a block", kernel->shared,
                 device->shared_optin);
        *what = nt_what;
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUmodule module;
    CUresult result = NT_CU(what, cuModuleLoadData, &module, kernel->cubin);
    if (result != CUDA_SUCCESS)
        return result;
    atomic_fetch_add(&nt_modules, 1);
    result = NT_CU(what, cuModuleGetFunction, function, module, kernel->function);
    /* Above 48 KiB a kernel must opt into dynamic shared memory. Every kernel states
     * its own (below 48 KiB that changes nothing), so that every load takes one path:
     * the one the tests fail on purpose (debug.c). */
    if (result == CUDA_SUCCESS)
        result = NT_CU_NOTE(what, "(MAX_DYNAMIC_SHARED_SIZE_BYTES)", cuFuncSetAttribute, *function,
                            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)kernel->shared);
    if (result != CUDA_SUCCESS) {
        nt_cu.cuModuleUnload(module); /* best effort: the failure above is the one to report */
        atomic_fetch_sub(&nt_modules, 1);
        *function = NULL;
    }
    return result;
}

CUfunction nt_function_loaded(const nt_device *device, uint32_t index) {
    return atomic_load_explicit(&device->functions[index], memory_order_acquire);
}

CUresult nt_function(const nt_device *device, uint32_t index, CUfunction *function,
                     const char **what) {
    _Atomic(CUfunction) *slot = &device->functions[index];
    CUfunction loaded = atomic_load_explicit(slot, memory_order_acquire);
    if (loaded != NULL) {
        *function = loaded;
        return CUDA_SUCCESS;
    }
    CUresult result = CUDA_SUCCESS;
    pthread_mutex_lock(&nt_driver_lock);
    loaded = atomic_load_explicit(slot, memory_order_relaxed);
    if (loaded == NULL) {
        nt_capture_mode mode = nt_capture_relax();
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
        nt_capture_restore(mode);
    }
    pthread_mutex_unlock(&nt_driver_lock);
    *function = loaded;
    return result;
}
