/* The CPython side of the launcher: torch's tensors read into the core's nt_request
 * (tensors.c, through DLPack or torch's Python API), outputs allocated, the written
 * tensors' autograd bookkeeping, and the module's entry points (module.c). */
#ifndef NTOPS_BINDING_H
#define NTOPS_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "core.h"
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

/* A failed check of the core, raised as its kind of Python exception; returns -1. */
int nt_raise(const nt_error *error);

/* tensors.c: torch, reached through DLPack's C exchange API where torch offers it
 * (no Python calls per tensor), through its Python API otherwise. */
int nt_torch_init(void);
int nt_read_args(nt_state *s, PyObject *const *args, Py_ssize_t nargs);
int nt_check_devices_and_dtypes(nt_state *s);
int nt_read_tensor(nt_state *s, int arg, PyObject *object);
/* Raised for a tensor subclass that overrides __torch_dispatch__ (module.c). */
extern PyObject *nt_subclass_error;
int nt_refuse_subclasses(const nt_state *s, PyObject *const *args, Py_ssize_t nargs);
int nt_check_writes(const nt_state *s);
int nt_allocate_outputs(nt_state *s); /* those the caller left to the launcher */
int nt_bump_versions(const nt_state *s);
int nt_write_back(const nt_state *s);
PyObject *nt_given(const nt_state *s, int arg); /* what the caller passed for an output */
int nt_current_stream(int device, CUstream *stream);
PyObject *nt_dtype_object(const nt_tensor *tensor); /* new reference, for messages */
int nt_force_python_api(int force);

#endif
