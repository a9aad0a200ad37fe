/* The CUDA driver, opened with dlopen at the first launch so that importing the wheel
 * needs no CUDA: its calls resolved into the table (cu.h) every other driver file calls
 * through, and the names and texts of its errors. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>

#include "cu.h"

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

/* cuda.h maps some names to versioned symbols (cuFoo -> cuFoo_v2); stringizing
 * after expansion asks dlsym for the symbol the header's prototype describes. */
#define NT_STR(name) NT_STR_(name)
#define NT_STR_(name) #name

nt_driver_calls nt_cu;
pthread_mutex_t nt_driver_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int nt_driver_state; /* 0: not loaded, 1: loaded */
static CUresult nt_driver_error;

static CUresult nt_driver_open(const char **what) {
    void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        *what = "dlopen(libcuda.so.1)";
        return CUDA_ERROR_NO_DEVICE;
    }
#define NT_RESOLVE(name)                                                                           \
    *(void **)&nt_cu.name = dlsym(library, NT_STR(name));                                          \
    if (nt_cu.name == NULL) {                                                                      \
        *what = "dlsym(" NT_STR(name) ")";                                                         \
        return CUDA_ERROR_NOT_FOUND;                                                               \
    }
    NT_DRIVER_CALLS(NT_RESOLVE)
#undef NT_RESOLVE
#define NT_RESOLVE_OPTIONAL(name) *(void **)&nt_cu.name = dlsym(library, NT_STR(name));
    NT_OPTIONAL_CALLS(NT_RESOLVE_OPTIONAL)
#undef NT_RESOLVE_OPTIONAL
    return NT_CU(what, cuInit, 0);
}

CUresult nt_driver_load(const char **what) {
    static const char *failed_call = "";
    if (atomic_load_explicit(&nt_driver_state, memory_order_acquire)) {
        *what = failed_call;
        return nt_driver_error;
    }
    pthread_mutex_lock(&nt_driver_lock);
    if (!atomic_load_explicit(&nt_driver_state, memory_order_relaxed)) {
        nt_driver_error = nt_driver_open(&failed_call);
        atomic_store_explicit(&nt_driver_state, 1, memory_order_release);
    }
    pthread_mutex_unlock(&nt_driver_lock);
    *what = failed_call;
    return nt_driver_error;
}

/* The error's name and text, asked of the driver where it was loaded: the two calls
 * that report failures are not themselves checked. */
const char *nt_error_name(CUresult result) {
    const char *name = NULL;
    if (nt_cu.cuGetErrorName == NULL || nt_cu.cuGetErrorName(result, &name) != CUDA_SUCCESS)
        return "CUDA_ERROR_UNKNOWN";
    return name;
}

const char *nt_error_string(CUresult result) {
    const char *text = NULL;
    if (result == CUDA_ERROR_NO_DEVICE && nt_cu.cuInit == NULL)
        return "the CUDA driver (libcuda.so.1) could not be loaded";
    if (nt_cu.cuGetErrorString == NULL || nt_cu.cuGetErrorString(result, &text) != CUDA_SUCCESS)
        return "unknown error";
    return text;
}
