/* Inside the driver layer (and its test hooks): the table of driver calls that
 * driver.c fills from libcuda.so.1, the one helper every call goes through, and the
 * lock held around the driver's load, a device's set-up and each module load. */
#ifndef NTOPS_CU_H
#define NTOPS_CU_H

#include <pthread.h>

#include "driver.h"

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
    X(cuStreamIsCapturing)                                                                         \
    X(cuThreadExchangeStreamCaptureMode)

typedef struct {
#define NT_FIELD(name) __typeof__(&name) name;
    NT_DRIVER_CALLS(NT_FIELD)
    NT_OPTIONAL_CALLS(NT_FIELD)
#undef NT_FIELD
} nt_driver_calls;

extern nt_driver_calls nt_cu;
extern pthread_mutex_t nt_driver_lock;

/* A driver call's result; where it failed, `name` (the call's, as NT_CU writes it) in
 * *what, for the error message. */
static inline CUresult nt_checked(const char **what, const char *name, CUresult result) {
    if (result != CUDA_SUCCESS)
        *what = name;
    return result;
}

/* Work that is not a stream operation (a device's set-up, a module load) is done in
 * the thread's relaxed stream-capture mode, as torch does around its allocations: done
 * while the caller captures a CUDA graph (a first launch inside torch.cuda.graph), it
 * no longer invalidates the capture, which left torch's CUDA generator broken for the
 * process. Best effort, as the unload after a failed load: a driver without the call
 * (before CUDA 10.1) keeps the mode it has. */
typedef struct {
    CUstreamCaptureMode mode;
    int exchanged;
} nt_capture_mode;

static inline nt_capture_mode nt_capture_relax(void) {
    nt_capture_mode saved = {CU_STREAM_CAPTURE_MODE_RELAXED, 0};
    if (nt_cu.cuThreadExchangeStreamCaptureMode != NULL)
        saved.exchanged = nt_cu.cuThreadExchangeStreamCaptureMode(&saved.mode) == CUDA_SUCCESS;
    return saved;
}

static inline void nt_capture_restore(nt_capture_mode saved) {
    if (saved.exchanged)
        nt_cu.cuThreadExchangeStreamCaptureMode(&saved.mode);
}

/* The one way the driver is called: NT_CU(what, cuLaunchKernel, f, ...) calls it and
 * names it on failure; NT_CU_NOTE adds to the name what the reader of the message
 * needs to know ("(clusters need a CUDA 12 driver)"). The name is the one written,
 * before cuda.h maps it to a versioned symbol. */
#define NT_CU(what, call, ...) nt_checked((what), #call, nt_cu.call(__VA_ARGS__))
#define NT_CU_NOTE(what, note, call, ...) nt_checked((what), #call note, nt_cu.call(__VA_ARGS__))
/* An optional call (NT_OPTIONAL_CALLS) this driver lacks, named as NT_CU_NOTE does. */
#define NT_CU_MISSING(what, note, call) nt_checked((what), #call note, CUDA_ERROR_NOT_SUPPORTED)

#endif
