/* torchpt: `torch.save` files holding a flat dict of tensors ({"name": tensor, ...}),
 * read without Python and written so that torch.load accepts them.
 *
 * A torch.save file is a zip (io/zip.h) with <archive>/data.pkl (a pickle, protocol 2),
 * <archive>/data/<key> (each storage's raw little-endian bytes), <archive>/version and,
 * in newer torch, <archive>/byteorder. The pickle is interpreted by a small, strict machine
 * that knows only the opcodes and globals torch writes for such a dict (the tensor rebuild
 * function, the typed storage classes and OrderedDict for backward hooks). Anything else is
 * refused with a message naming the opcode or global: nothing is ever imported or executed.
 * Tensors must be contiguous (strides of size-1 dimensions are ignored), lie inside their
 * storage, and every storage entry must hold exactly its declared element count. */
#ifndef PP_IO_TORCHPT_H
#define PP_IO_TORCHPT_H

#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h" /* st_dtype, ST_MAX_DIMS */

typedef struct pt_tensor {
    const char *name; /* dict key */
    st_dtype dtype;   /* ST_BF16, ST_F16, ST_F32, ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;
    const uint8_t *data; /* numel elements, little-endian, possibly unaligned */
    size_t nbytes;
} pt_tensor;

typedef struct pt_file pt_file;

int pp_pt_open(const char *path, pt_file **out, char *err);
/* Same on a buffer in memory (the fuzzer's entry point); buf must outlive the file. */
int pp_pt_open_memory(const void *buf, size_t len, const char *label, pt_file **out, char *err);
void pp_pt_close(pt_file *f);

size_t pp_pt_count(const pt_file *f);
const pt_tensor *pp_pt_at(const pt_file *f, size_t i); /* in the dict's insertion order */
const pt_tensor *pp_pt_find(const pt_file *f, const char *name);

/* Writes a dict of n contiguous CPU tensors (name, dtype, ndim, shape, data; numel and nbytes
 * are recomputed) in torch's layout under the archive name "archive". Atomic. */
int pp_pt_save(const char *path, const pt_tensor *tensors, size_t n, char *err);

#endif
