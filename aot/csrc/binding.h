/* The binding: the launcher as CPython sees it, on the limited API (abi3), around the
 * core's half of a call. Files, each calling only those listed before it:
 *   torch.c    torch's objects the launcher uses, looked up once; its current stream
 *   errors.c   the exceptions and how each failure is raised
 *   reading.c  tensors read into the core's nt_request (DLPack, or torch's Python API)
 *   checks.c   the tensors read, checked together: one device, their dtypes
 *   writing.c  writes into given tensors checked, outputs allocated, versions moved
 *   call.c     launch() and plan(): one call, read, shaped, chosen and launched
 *   rules.c    the composite ops' argument rules, checked before their wrappers' Python
 *   debug.c    the entry points for tests and tuning (_candidate, _fault_next_load, ...)
 *   module.c   the module: its other entry points, its method table and its init */
#ifndef NTOPS_BINDING_H
#define NTOPS_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "core.h"
#include "dlpack.h"
#include "driver.h"

typedef struct {
    nt_request request;
    int python_api; /* this call reads tensors through torch's Python API */
    PyObject *allocated[NT_MAX_ARGS];
    PyObject *owned[NT_MAX_ARGS]; /* an input read from a copy (a negative view resolved) */
    /* A given output the kernel cannot write itself (a negative view, or a dtype other
     * than the kernel's): written into owned[arg], then copied here (borrowed). */
    PyObject *write_back[NT_MAX_ARGS];
} nt_state;

/* What the caller passed for argument `a` (an output written through a copy: the
 * tensor the copy goes back to). */
static inline PyObject *nt_given(const nt_state *s, int a) {
    return s->write_back[a] != NULL ? s->write_back[a] : s->request.tensor[a].object;
}

/* A METH_NOARGS builtin of torch's (a tensor method or a module function), called
 * through its C function: the checks every launch makes cost more in method lookup
 * and call machinery than in the calls. Else, called the usual way. */
typedef struct {
    PyCFunction function;
    PyObject *self;     /* a module function's module; NULL for tensor methods */
    PyObject *callable; /* the usual way: a module function, or NULL (the method `name`) */
    PyObject *name;
} nt_builtin;

static inline PyObject *nt_builtin_call(const nt_builtin *b, PyObject *tensor) {
    if (b->function != NULL)
        return b->function(tensor != NULL ? tensor : b->self, NULL);
    if (tensor != NULL)
        return PyObject_CallMethodObjArgs(tensor, b->name, NULL);
    return PyObject_CallObject(b->callable, NULL);
}

#define NT_API_TYPES 8

/* torch, as nt_torch_init found it. */
typedef struct {
    int ready;
    PyObject *tensor_type;
    PyObject *dtypes[NT_MAX_DTYPES];
    PyObject *dtype_kwargs[NT_MAX_DTYPES]; /* {"dtype": torch.<dtype>} for new outputs */
    const nt_dl_api *exchange_api;         /* published on torch.Tensor; NULL: none */
    const nt_dl_api *api;                  /* the one readers take: exchange_api, or NULL */
    PyTypeObject *api_types[NT_API_TYPES]; /* tensor subclasses seen, and theirs */
    const nt_dl_api *apis[NT_API_TYPES];
    int dispatches[NT_API_TYPES]; /* the type overrides __torch_dispatch__ */
    int num_api_types;
    PyObject *plain_dispatch; /* torch.Tensor.__torch_dispatch__ */
    PyObject *strided, *increment_version;
    PyCFunction increment_function; /* its C function, where it takes one argument */
    int increment_takes_tuple;      /* 2.11 wants an iterable, 2.4 a tensor, 2.15 either */
    nt_builtin is_neg, is_inference, is_grad_enabled, is_inference_mode_enabled;
    PyObject *raw_stream; /* torch._C._cuda_getCurrentRawStream */
    PyObject *empty_like;
    PyObject *s_dtype, *s_data_ptr, *s_shape, *s_stride, *s_get_device, *s_is_cuda,
        *s_new_empty_strided, *s_cuda_stream, *s_api, *s_torch_dispatch, *s_func, *s_is_neg,
        *s_resolve_neg, *s_requires_grad, *s_is_inference, *s_layout, *s_is_nested, *s_version;
} nt_torch_objects;

/* torch.c */
extern nt_torch_objects nt_torch;
int nt_torch_init(void);
/* The exchange API published on tensor type `type` (looked up once per type), or NULL;
 * and whether the type overrides __torch_dispatch__. */
const nt_dl_api *nt_api_of(PyTypeObject *type, int *dispatch);
void nt_use_exchange_api(int use); /* 0: every reader takes torch's Python API */
int nt_current_stream(int device, CUstream *stream);
PyObject *nt_dtype_object(const nt_tensor *tensor); /* new reference, for messages */

/* errors.c */
extern PyObject *nt_cuda_error;
extern PyObject *nt_subclass_error; /* a tensor subclass that overrides __torch_dispatch__ */
int nt_add_errors(PyObject *module);
int nt_raise(const nt_error *error); /* a failed check of the core; returns -1 */
/* A driver call failed: "`where`: `kernel`: `what` failed: ..."; returns -1. */
int nt_cuda_fail(const char *where, const char *kernel, const char *what, CUresult result);
void nt_subclass(const nt_state *s, const char *name, PyObject *object);
void nt_not_built(const nt_state *s, int capability); /* what the wheel has instead */

/* reading.c */
int nt_read_args(nt_state *s, PyObject *const *args, Py_ssize_t nargs);
int nt_read_tensor(nt_state *s, int arg, PyObject *object);
int nt_read_plain(PyObject *object, nt_tensor *t); /* -1, nothing raised: not readable so */
/* Output `a` written through a new tensor like `given` (empty_like with `kwargs`),
 * copied back by nt_write_back; returns 1, or -1 on error. */
int nt_redirect(nt_state *s, int a, PyObject *given, PyObject *kwargs);
/* 1, with SubclassError set, where an argument overrides __torch_dispatch__: for
 * calls whose arguments are not read (an op this wheel lacks). */
int nt_refuse_subclasses(const nt_state *s, PyObject *const *args, Py_ssize_t nargs);

/* checks.c */
int nt_check_devices_and_dtypes(nt_state *s);

/* writing.c */
int nt_check_writes(const nt_state *s);
int nt_allocate_outputs(nt_state *s); /* those the caller left to the launcher */
int nt_write_back(const nt_state *s);
int nt_bump_versions(const nt_state *s);
int nt_increment_versions(PyObject *tensors); /* a tuple of tensors */
/* A new row-major tensor of `size` like `like` (its device; its dtype, or kwargs'). */
PyObject *nt_new_contiguous(PyObject *like, const int64_t *size, int ndim, PyObject *kwargs);

/* call.c */
int nt_warn_ptx(const nt_device *device, const nt_kernel *kernel);
PyObject *nt_py_launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *nt_py_plan(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *nt_py_last_kernel(PyObject *self, PyObject *unused);
PyObject *nt_py_phases(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* rules.c */
PyObject *nt_py_attention_rules(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *nt_py_rotary_rules(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *nt_py_rms_norm_rules(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* debug.c */
PyObject *nt_py_candidate(PyObject *self, PyObject *arg);
PyObject *nt_py_force_python_api(PyObject *self, PyObject *arg);
PyObject *nt_py_fault_next_load(PyObject *self, PyObject *arg);

#endif
