/* The entry points for tests and tuning: each changes state the launch path already
 * reads (the candidate kernels may be chosen from, the API tensors are read through,
 * an entry of the driver's table), so that the path itself has no branch for them. */
#include "binding.h"
#include "cu.h"

/* _candidate(index) -> previous setting: launch only kernels built as candidate
 * `index` of their bucket (a tuning wheel's); -1 lifts it. Per thread. */
PyObject *nt_py_candidate(PyObject *self, PyObject *arg) {
    (void)self;
    long index = PyLong_AsLong(arg);
    if (index == -1 && PyErr_Occurred())
        return NULL;
    if (index < -1 || index > UINT16_MAX)
        return PyErr_Format(PyExc_ValueError, "_candidate(%ld): expected -1 or an index", index);
    return PyLong_FromLong(nt_set_candidate((int)index));
}

static int nt_forced; /* the last _force_python_api setting */

/* _force_python_api(force) -> previous setting: read tensors through torch's Python
 * API even where the DLPack exchange API is available (for tests of that path): the
 * readers find no exchange API, as on a torch without one. */
PyObject *nt_py_force_python_api(PyObject *self, PyObject *arg) {
    (void)self;
    int force = PyObject_IsTrue(arg);
    if (force < 0 || nt_torch_init())
        return NULL;
    int previous = nt_forced;
    nt_forced = force;
    nt_use_exchange_api(!force);
    return PyBool_FromLong(previous);
}

/* A failed module load, on purpose: the driver's entry for cuModuleGetFunction (stage
 * 1) or cuFuncSetAttribute, the shared-memory opt-in (stage 2), is swapped for one that
 * fails once and puts the real call back; functions.c unloads the module as for any
 * failure. Swapped under the driver's lock, which module loads hold. */
static __typeof__(nt_cu.cuModuleGetFunction) nt_real_get_function;
static __typeof__(nt_cu.cuFuncSetAttribute) nt_real_set_attribute;

static CUresult CUDAAPI nt_failing_get_function(CUfunction *function, CUmodule module,
                                                const char *name) {
    (void)function;
    (void)module;
    (void)name;
    nt_cu.cuModuleGetFunction = nt_real_get_function;
    return CUDA_ERROR_NOT_FOUND;
}

static CUresult CUDAAPI nt_failing_set_attribute(CUfunction function,
                                                 CUfunction_attribute attribute, int value) {
    (void)function;
    (void)attribute;
    (void)value;
    nt_cu.cuFuncSetAttribute = nt_real_set_attribute;
    return CUDA_ERROR_INVALID_VALUE;
}

static void nt_fault_next_load(int stage) {
    pthread_mutex_lock(&nt_driver_lock);
    if (nt_cu.cuModuleGetFunction == nt_failing_get_function)
        nt_cu.cuModuleGetFunction = nt_real_get_function;
    if (nt_cu.cuFuncSetAttribute == nt_failing_set_attribute)
        nt_cu.cuFuncSetAttribute = nt_real_set_attribute;
    if (stage == 1) {
        nt_real_get_function = nt_cu.cuModuleGetFunction;
        nt_cu.cuModuleGetFunction = nt_failing_get_function;
    } else if (stage == 2) {
        nt_real_set_attribute = nt_cu.cuFuncSetAttribute;
        nt_cu.cuFuncSetAttribute = nt_failing_set_attribute;
    }
    pthread_mutex_unlock(&nt_driver_lock);
}

/* _fault_next_load(stage) -> modules loaded now: the next module load fails after
 * loading (1: at cuModuleGetFunction, 2: at the shared-memory opt-in; 0: none), for
 * tests that a failed load leaves nothing behind. Without a driver nothing loads, and
 * nothing is swapped. */
PyObject *nt_py_fault_next_load(PyObject *self, PyObject *arg) {
    (void)self;
    long stage = PyLong_AsLong(arg);
    if (stage == -1 && PyErr_Occurred())
        return NULL;
    const char *what;
    if (nt_driver_load(&what) == CUDA_SUCCESS)
        nt_fault_next_load((int)stage);
    return PyLong_FromLong(nt_loaded_modules());
}
