/* The CUDA driver (driver.c), loaded at the first launch. Each call returns a CUresult
 * and, through `what`, the name of the driver call that failed. Nothing here needs
 * Python: the binding releases the GIL around module loads. */
#ifndef NTOPS_DRIVER_H
#define NTOPS_DRIVER_H

#include <cuda.h>

#include "ntops.h"

#define NT_MAX_DEVICES 64
#define NT_MAX_ARCHES 16

typedef struct {
    CUcontext context;
    int capability;
    int multiprocessors;
    int shared_optin;
    CUmemoryPool scratch_pool; /* global scratch, made at init if a kernel needs it */
    int num_arches;
    uint16_t arches[NT_MAX_ARCHES]; /* built capabilities this device runs, best first */
} nt_device;

CUresult nt_driver_load(const char **what);
CUresult nt_device_get(int ordinal, const nt_device **device, const char **what);
CUresult nt_function(const nt_device *device, int ordinal, uint32_t kernel, CUfunction *function,
                     const char **what);
CUfunction nt_function_loaded(int ordinal, uint32_t kernel); /* NULL: not loaded yet */
long nt_loaded_modules(void);       /* tests: modules loaded and not unloaded */
void nt_fault_next_load(int stage); /* tests: fail the next load (1: function, 2: opt-in) */
CUresult nt_enter(const nt_device *device, CUcontext *previous, const char **what);
CUresult nt_leave(const nt_device *device, CUcontext previous, const char **what);
CUresult nt_launch(const nt_kernel *kernel, CUfunction function, uint32_t grid, CUstream stream,
                   void **params, const char **what);
/* Memory for one launch (global scratch, workspace), stream-ordered: from the device's
 * pool, or (while the stream is being captured into a CUDA graph) a graph
 * allocation. Freed with nt_scratch_free after the launch is enqueued. */
CUresult nt_scratch_alloc(const nt_device *device, CUstream stream, size_t bytes,
                          CUdeviceptr *pointer, const char **what);
CUresult nt_scratch_free(CUdeviceptr pointer, CUstream stream, const char **what);
CUresult nt_scratch_zero(CUdeviceptr pointer, size_t bytes, CUstream stream, const char **what);
/* The multiprocessor count of a flagship part of `capability` (plan mode: no device). */
int nt_default_multiprocessors(int capability);
const char *nt_error_name(CUresult result);
const char *nt_error_string(CUresult result);
/* A kernel's arch as nt_arches_for lists it: its capability, with NT_PTX_ARCH set
 * for PTX, so a cubin and the PTX of one capability are told apart. */
#define NT_PTX_ARCH 0x8000u
static inline uint16_t nt_kernel_arch(const nt_kernel *kernel) {
    return (uint16_t)(kernel->capability | (kernel->ptx ? NT_PTX_ARCH : 0u));
}
int nt_arch_runs_on(const nt_kernel *kernel, int capability);
/* The wheel's arches (nt_kernel_arch) that run on `capability`, best first: cubins,
 * closest capability first; PTX only when no cubin runs there. Returns how many. */
int nt_arches_for(int capability, uint16_t *arches);

#endif
