/* One call, in the binding: launch() reads the arguments (reading.c, checks.c), checks
 * writes and allocates outputs (writing.c) around the core's shapes and layout, chooses
 * the kernel and launches it on torch's current stream of the tensors' device (the
 * driver layer); plan() goes as far as the choice, for a device of any capability,
 * without one. */
#include <stdatomic.h>
#include <time.h>

#include "binding.h"

/* The kernel this thread launched last: lets tests see which specialisation ran. */
static _Thread_local const nt_kernel *nt_last_kernel;

static void nt_state_init(nt_state *s, const nt_group *group, int plan) {
    nt_request *r = &s->request;
    r->group = group;
    r->plan = plan;
    r->empty = 0;
    r->call.ndim = 0; /* unknown until the call is shaped: a not-built error may come first */
    r->call.dtype = -1;
    r->call.workspace = 0; /* a launch allocates it; a plan shows 0 */
    r->call.launch = 0;
    r->has_given = 0;
    s->python_api = 0;
    for (int a = 0; a < NT_MAX_ARGS; a++) {
        r->tensor[a].object = NULL;
        s->allocated[a] = NULL;
        s->owned[a] = NULL;
        s->write_back[a] = NULL;
    }
}

static const nt_group *nt_group_arg(PyObject *object) {
    long index = PyLong_AsLong(object);
    if (index == -1 && PyErr_Occurred())
        return NULL;
    if (index < 0 || (unsigned long)index >= nt_num_groups) {
        PyErr_Format(PyExc_ValueError, "no group %ld in this wheel", index);
        return NULL;
    }
    return &nt_groups[index];
}

/* The steps of a launch, timed where a caller passes `spent` (_phases): nanoseconds
 * added to spent[step] since the last mark. */
enum {
    NT_P_READ,
    NT_P_CHECK,
    NT_P_SHAPES,
    NT_P_ALLOCATE,
    NT_P_LAYOUT,
    NT_P_CHOOSE,
    NT_P_STREAM,
    NT_P_LAUNCH,
    NT_P_AFTER,
    NT_PHASES
};
static const char *const nt_phase_names[NT_PHASES] = {
    "read", "check", "shapes", "allocate", "layout", "choose", "stream", "launch", "after"};

static int64_t nt_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void nt_mark(int64_t *spent, int step) {
    if (spent == NULL)
        return;
    int64_t now = nt_now();
    spent[step] += now - spent[NT_PHASES];
    spent[NT_PHASES] = now;
}

/* The whole of a call up to the choice of kernel: the binding reads and checks what
 * only torch can tell, the core the shapes; outputs are allocated between the two. */
static int nt_prepare(nt_state *s, PyObject *const *args, Py_ssize_t nargs, int64_t *spent) {
    nt_request *r = &s->request;
    if (nt_torch_init())
        return -1;
    if (r->group->num_kernels == 0) {              /* an op this wheel was built without */
        if (!nt_refuse_subclasses(s, args, nargs)) /* those go to the op, built or not */
            nt_not_built(s, -1);
        return -1;
    }
    if (nt_read_args(s, args, nargs))
        return -1;
    nt_mark(spent, NT_P_READ);
    if (nt_check_devices_and_dtypes(s) || nt_check_writes(s))
        return -1;
    nt_mark(spent, NT_P_CHECK);
    if (nt_check_shapes(r))
        return nt_raise(&r->error);
    nt_mark(spent, NT_P_SHAPES);
    if (nt_allocate_outputs(s))
        return -1;
    nt_mark(spent, NT_P_ALLOCATE);
    int failed = nt_layout(r) ? nt_raise(&r->error) : 0;
    nt_mark(spent, NT_P_LAYOUT);
    return failed;
}

/* Once per process, when the driver first JIT-compiles PTX: that costs time at
 * first use (and compiles again in every new process unless its JIT cache keeps it). */
static atomic_int nt_ptx_warned;

int nt_warn_ptx(const nt_device *device, const nt_kernel *kernel) {
    if (atomic_exchange(&nt_ptx_warned, 1))
        return 0;
    return PyErr_WarnFormat(
        PyExc_RuntimeWarning, 1,
        "ntops_prebuilt: this wheel has no cubin for sm_%d; the CUDA driver is JIT-compiling "
        "the PTX of sm_%d it was built with (--ptx), starting with %s. Build with --arch sm_%d "
        "for kernels that load without compiling.",
        device->capability, kernel->capability, kernel->id, device->capability);
}

/* Kernel `index` as a function of the call's device: its first use there loads the
 * module, without holding the GIL. */
static int nt_loaded(const nt_request *r, const nt_device *device, uint32_t index,
                     CUfunction *function) {
    if ((*function = nt_function_loaded(device, index)) != NULL)
        return 0;
    const char *what = "";
    CUresult result;
    Py_BEGIN_ALLOW_THREADS
    result = nt_function(device, index, function, &what);
    Py_END_ALLOW_THREADS
    if (result != CUDA_SUCCESS)
        return nt_cuda_fail(r->group->op, nt_kernels[index].id, what, result);
    return nt_kernels[index].ptx ? nt_warn_ptx(device, &nt_kernels[index]) : 0;
}

static int nt_run(nt_state *s, int64_t *spent) {
    nt_request *r = &s->request;
    const char *what = "";
    const nt_device *device;
    CUresult result = nt_driver_load(&what);
    if (result == CUDA_SUCCESS)
        result = nt_device_get(r->call.device, &device, &what);
    if (result != CUDA_SUCCESS)
        return nt_cuda_fail(r->group->op, "loading the CUDA driver", what, result);
    r->call.capability = device->capability;
    r->call.multiprocessors = device->multiprocessors;
    r->call.launch = nt_next_launch();
    uint32_t index;
    if (!nt_select(r, device->arches, device->num_arches, &index)) {
        nt_not_built(s, device->capability);
        return -1;
    }
    const nt_kernel *kernel = &nt_kernels[index];
    int64_t grid = kernel->grid(&r->call);
    nt_mark(spent, NT_P_CHOOSE);
    if (grid <= 0)
        return 0;
    if (grid > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: %s would need %lld programs; CUDA allows %d",
                     r->group->op, kernel->id, (long long)grid, INT32_MAX);
        return -1;
    }
    CUstream stream;
    CUfunction function;
    if (nt_current_stream(r->call.device, &stream) || nt_loaded(r, device, index, &function))
        return -1;
    nt_mark(spent, NT_P_STREAM);
    result = nt_launch_call(device, kernel, function, grid, stream, &r->call, &what);
    if (result != CUDA_SUCCESS)
        return nt_cuda_fail(r->group->op, kernel->id, what, result);
    nt_last_kernel = kernel;
    nt_mark(spent, NT_P_LAUNCH);
    return 0;
}

static void nt_release(nt_state *s) {
    for (int a = 0; a < s->request.group->num_args; a++) {
        Py_XDECREF(s->allocated[a]);
        Py_XDECREF(s->owned[a]);
    }
}

static PyObject *nt_first_output(const nt_state *s) {
    const nt_group *g = s->request.group;
    for (int a = 0; a < g->num_args; a++)
        if (g->args[a].flags & NT_OUTPUT) {
            PyObject *out = nt_given(s, a);
            Py_INCREF(out);
            return out;
        }
    Py_RETURN_NONE;
}

/* An empty call launches nothing, but only where the wheel has the op for its
 * dtype: an empty tensor of a dtype no kernel takes is refused as a full one is. */
static int nt_has_dtype(const nt_state *s) {
    const nt_group *g = s->request.group;
    for (uint32_t k = g->first_kernel; k < g->first_kernel + g->num_kernels; k++)
        if (nt_kernels[k].dtype == s->request.call.dtype)
            return 1;
    nt_not_built(s, -1);
    return 0;
}

/* A launch's steps, reading to written back (launch()'s; _phases times them). */
static int nt_steps(nt_state *s, PyObject *const *args, Py_ssize_t nargs, int64_t *spent) {
    const nt_request *r = &s->request;
    if (nt_prepare(s, args, nargs, spent) || (r->empty && !nt_has_dtype(s)) ||
        (!r->empty && nt_run(s, spent)) || nt_write_back(s) || nt_bump_versions(s))
        return -1;
    nt_mark(spent, NT_P_AFTER);
    return 0;
}

/* launch(group, *args) -> the (first) output tensor */
PyObject *nt_py_launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 1)
        return PyErr_Format(PyExc_TypeError, "launch(group, *args)");
    const nt_group *group = nt_group_arg(args[0]);
    if (group == NULL)
        return NULL;
    nt_state s;
    nt_state_init(&s, group, 0);
    PyObject *result = NULL;
    if (nt_steps(&s, args + 1, nargs - 1, NULL) == 0)
        result = nt_first_output(&s);
    nt_release(&s);
    return result;
}

/* The values a launch of `kernel` would pass it, as Python numbers. */
static PyObject *nt_param_values(const nt_kernel *kernel, const nt_call *call) {
    PyObject *params = PyList_New(0);
    for (int n = 0; params != NULL && n < kernel->num_params; n++) {
        int64_t integer = 0;
        double real = 0;
        PyObject *value = nt_value(call, &kernel->params[n], &integer, &real)
                              ? PyFloat_FromDouble(real)
                              : PyLong_FromLongLong(integer);
        if (value == NULL || PyList_Append(params, value))
            Py_CLEAR(params);
        Py_XDECREF(value);
    }
    return params;
}

/* plan(group, capability, *args) -> {kernel, grid, params, ndim, width}: the
 * launch a call would make on a device of that capability, made without one. */
PyObject *nt_py_plan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 2)
        return PyErr_Format(PyExc_TypeError, "plan(group, capability, *args)");
    const nt_group *group = nt_group_arg(args[0]);
    if (group == NULL)
        return NULL;
    nt_state s;
    nt_state_init(&s, group, 1);
    nt_request *r = &s.request;
    int capability = (int)PyLong_AsLong(args[1]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *result = NULL;
    if (nt_prepare(&s, args + 2, nargs - 2, NULL))
        goto done;
    uint16_t arches[NT_MAX_ARCHES];
    int num_arches = nt_arches_for(capability, arches);
    r->call.capability = capability;
    r->call.multiprocessors = nt_default_multiprocessors(capability);
    uint32_t index;
    if (!nt_select(r, arches, num_arches, &index)) {
        nt_not_built(&s, capability);
        goto done;
    }
    const nt_kernel *kernel = &nt_kernels[index];
    PyObject *params = nt_param_values(kernel, &r->call);
    if (params == NULL)
        goto done;
    result = Py_BuildValue("{s:s,s:L,s:N,s:i,s:i,s:O,s:(LL),s:i,s:I,s:I,s:i}", "kernel", kernel->id,
                           "grid", (long long)(r->empty ? 0 : kernel->grid(&r->call)), "params",
                           params, "ndim", r->call.ndim, "width", r->call.width, "empty",
                           r->empty ? Py_True : Py_False, "bucket_keys",
                           (long long)nt_bucket_key(r, 0), (long long)nt_bucket_key(r, 1),
                           "num_warps", kernel->num_warps, "scratch", kernel->scratch, "workspace",
                           kernel->workspace, "num_ctas", kernel->num_ctas);
done:
    nt_release(&s);
    return result;
}

/* last_kernel() -> id of the kernel this thread launched last, or None */
PyObject *nt_py_last_kernel(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    if (nt_last_kernel == NULL)
        Py_RETURN_NONE;
    return PyUnicode_FromString(nt_last_kernel->id);
}

/* _phases(group, repeats, *args) -> {phase: mean ns}: launch(group, *args) `repeats`
 * times, timing each step of the path launch() takes (reading the tensors, checking
 * devices, dtypes and writes, shapes, allocating outputs, layout, choosing the kernel,
 * the stream and module lookup, the launch, write-back and versions), for host-cost
 * work; no output is returned. */
PyObject *nt_py_phases(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 2)
        return PyErr_Format(PyExc_TypeError, "_phases(group, repeats, *args)");
    const nt_group *group = nt_group_arg(args[0]);
    long repeats = PyLong_AsLong(args[1]);
    if (group == NULL || (repeats == -1 && PyErr_Occurred()))
        return NULL;
    int64_t spent[NT_PHASES + 1] = {0}; /* and the last mark's time */
    for (long n = 0; n < repeats; n++) {
        nt_state s;
        nt_state_init(&s, group, 0);
        spent[NT_PHASES] = nt_now();
        int failed = nt_steps(&s, args + 2, nargs - 2, spent);
        nt_release(&s);
        if (failed)
            return NULL;
    }
    PyObject *result = PyDict_New();
    for (int p = 0; result != NULL && p < NT_PHASES; p++) {
        PyObject *value = PyFloat_FromDouble(repeats > 0 ? (double)spent[p] / repeats : 0.0);
        if (value == NULL || PyDict_SetItemString(result, nt_phase_names[p], value))
            Py_CLEAR(result);
        Py_XDECREF(value);
    }
    return result;
}
