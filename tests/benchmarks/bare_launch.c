/* The driver's floor for bench_launch.py: host microseconds per cuLaunchKernel of a
 * 4-argument kernel that does nothing, launched from C in a loop on the caller's stream
 * (torch's current one) in the caller's current context (torch's). The benchmark
 * compiles it with the system's C compiler and loads it with ctypes; libcuda is opened
 * at run time, so no CUDA headers are needed. */
#include <dlfcn.h>
#include <stddef.h>
#include <time.h>

typedef int (*load_t)(void **module, const void *image);
typedef int (*get_t)(void **function, void *module, const char *name);
typedef int (*launch_t)(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, void *stream, void **params,
                        void **extra);
typedef int (*sync_t)(void *stream);

static const char noop_ptx[] = ".version 7.0\n"
                               ".target sm_80\n"
                               ".address_size 64\n"
                               ".visible .entry noop(.param .u64 a, .param .u64 b,\n"
                               "                     .param .u64 c, .param .u64 d)\n"
                               "{\n"
                               "    ret;\n"
                               "}\n";

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* Microseconds of host time per launch over `calls` launches, after the stream drained;
 * a negative value is the failing driver call's result, negated. */
double bare_launch_us(void *stream, int calls) {
    static void *function;
    static launch_t launch;
    static sync_t sync;
    if (function == NULL) {
        void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        if (cuda == NULL)
            return -1e9;
        load_t load = (load_t)dlsym(cuda, "cuModuleLoadData");
        get_t get = (get_t)dlsym(cuda, "cuModuleGetFunction");
        launch = (launch_t)dlsym(cuda, "cuLaunchKernel");
        sync = (sync_t)dlsym(cuda, "cuStreamSynchronize");
        void *module = NULL;
        int result = load(&module, noop_ptx);
        if (result == 0)
            result = get(&function, module, "noop");
        if (result != 0)
            return -(double)result;
    }
    unsigned long long values[4] = {0, 0, 0, 0};
    void *params[4] = {&values[0], &values[1], &values[2], &values[3]};
    int result = sync(stream);
    if (result != 0)
        return -(double)result;
    double start = now_us();
    for (int i = 0; i < calls; i++)
        if ((result = launch(function, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL)) != 0)
            return -(double)result;
    double elapsed = now_us() - start;
    return elapsed / calls;
}
