/* The entry points for tests and tuning: which candidate kernels may be chosen from,
 * which API tensors are read through, a module load that fails on purpose. */
#include "binding.h"

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

/* _force_python_api(force) -> previous setting: read tensors through torch's Python
 * API even where the DLPack exchange API is available (for tests of that path). */
PyObject *nt_py_force_python_api(PyObject *self, PyObject *arg) {
    (void)self;
    int force = PyObject_IsTrue(arg);
    if (force < 0 || nt_torch_init())
        return NULL;
    return PyBool_FromLong(nt_force_python_api(force));
}

/* _fault_next_load(stage) -> modules loaded now: the next module load fails after
 * loading (1: at cuModuleGetFunction, 2: at the shared-memory opt-in), for tests
 * that a failed load leaves nothing behind. */
PyObject *nt_py_fault_next_load(PyObject *self, PyObject *arg) {
    (void)self;
    long stage = PyLong_AsLong(arg);
    if (stage == -1 && PyErr_Occurred())
        return NULL;
    nt_fault_next_load((int)stage);
    return PyLong_FromLong(nt_loaded_modules());
}
