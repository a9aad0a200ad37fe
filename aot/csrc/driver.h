/* The driver layer: the CUDA driver, opened at the first launch (driver.c), its
 * devices and their primary contexts (devices.c), each kernel's function loaded at its
 * first use on a device (functions.c), and the launch with the memory a kernel needs
 * (launch.c). Each call returns a CUresult and, where it fails, the name of the driver
 * call that failed through `what`. Nothing here needs Python: the binding releases the
 * GIL around module loads. */
#ifndef NTOPS_DRIVER_H
#define NTOPS_DRIVER_H

#include <cuda.h>

#include "core.h"

#define NT_MAX_DEVICES 64

typedef struct {
    CUcontext context;
    int capability;
    int multiprocessors;
    int shared_optin;
    CUmemoryPool scratch_pool; /* global scratch, made at init if a kernel needs it */
    int num_arches;
    uint16_t arches[NT_MAX_ARCHES]; /* built capabilities this device runs, best first */
    _Atomic(CUfunction) *functions; /* each kernel's, once loaded (functions.c) */
} nt_device;

/* driver.c */
CUresult nt_driver_load(const char **what);
const char *nt_error_name(CUresult result);
const char *nt_error_string(CUresult result);

/* devices.c */
CUresult nt_device_get(int ordinal, const nt_device **device, const char **what);
/* The device's context made current (the previous one kept), and the previous one back. */
CUresult nt_enter(const nt_device *device, CUcontext *previous, const char **what);
CUresult nt_leave(const nt_device *device, CUcontext previous, const char **what);

/* functions.c */
CUresult nt_function(const nt_device *device, uint32_t kernel, CUfunction *function,
                     const char **what);
CUfunction nt_function_loaded(const nt_device *device, uint32_t kernel); /* NULL: not yet */
long nt_loaded_modules(void); /* modules loaded and not unloaded (tests) */

/* launch.c: pack the call's parameters and launch `kernel` with the memory it needs. */
CUresult nt_launch_call(const nt_device *device, const nt_kernel *kernel, CUfunction function,
                        int64_t grid, CUstream stream, const nt_call *call, const char **what);

#endif
