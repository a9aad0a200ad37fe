/* The parts of DLPack 1.x (dlpack.h) that torch's C exchange API hands over: torch
 * publishes the API on its tensor type (`__dlpack_c_exchange_api__`), one C call fills
 * a DLTensor and another returns the current stream, with no Python objects made. */
#ifndef NTOPS_DLPACK_H
#define NTOPS_DLPACK_H

#include <stdint.h>

typedef struct {
    uint32_t major, minor;
} nt_dl_version;

typedef struct {
    void *data;
    struct {
        int32_t type, id;
    } device;
    int32_t ndim;
    struct {
        uint8_t code, bits;
        uint16_t lanes;
    } dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; NULL: compact row-major */
    uint64_t byte_offset;
} nt_dl_tensor;

typedef struct nt_dl_header {
    nt_dl_version version;
    struct nt_dl_header *prev_api;
} nt_dl_header;

typedef struct {
    nt_dl_header header;
    void *managed_tensor_allocator;
    void *managed_tensor_from_py_object_no_sync;
    void *managed_tensor_to_py_object_no_sync;
    int (*dltensor_from_py_object_no_sync)(void *py_object, nt_dl_tensor *out);
    int (*current_work_stream)(int32_t device_type, int32_t device_id, void **stream);
} nt_dl_api;

enum { NT_DL_CUDA = 2, NT_DL_MAJOR = 1 };

#endif
