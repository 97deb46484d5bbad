/* safetensors: read-only access to a .safetensors file through mmap.
 *
 * pp_st_open validates the whole container as docs/formats.md §1 lists it (header length,
 * JSON, dtype names, shapes, offsets contiguous and covering the buffer, duplicate keys,
 * __metadata__ string map) before returning, so every tensor handed out is in bounds.
 * Tensor data may be unaligned: read it with memcpy or the st_load_* helpers.
 * The writer streams tensors one at a time so a converter never holds a whole model.
 * Implemented in safetensors.c (reader) and st_writer.c (writer); fp16/bf16 in io/half.h. */
#ifndef PP_IO_SAFETENSORS_H
#define PP_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "io/half.h"

#define ST_MAX_DIMS 8

typedef enum {
    ST_BOOL,
    ST_U8,
    ST_I8,
    ST_I16,
    ST_U16,
    ST_F16,
    ST_BF16,
    ST_I32,
    ST_U32,
    ST_F32,
    ST_I64,
    ST_U64,
    ST_F64,
    ST_C64,
    ST_F8_E4M3,
    ST_F8_E5M2,
    ST_F8_E8M0,
    ST_F8_E4M3FNUZ,
    ST_F8_E5M2FNUZ,
    ST_F6_E2M3,
    ST_F6_E3M2,
    ST_F4,
    /* ggml block formats, from GGUF files only (io/gguf.h); pp_st_dtype_bits gives 0 */
    ST_Q4_0,
    ST_Q8_0,
    ST_Q4_K,
    ST_DTYPE_COUNT
} st_dtype;

typedef struct st_tensor {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;
    const uint8_t *data; /* into the mapping; possibly unaligned */
    size_t nbytes;
} st_tensor;

typedef struct st_file st_file;

int pp_st_open(const char *path, st_file **out, char *err);
/* Same checks on a buffer in memory (the fuzzer's entry point); buf must outlive the file. */
int pp_st_open_memory(const void *buf, size_t len, const char *label, st_file **out, char *err);
void pp_st_close(st_file *f);
typedef struct onnx_bundle onnx_bundle;
/* A file over tensors an ONNX loader converted (io/onnx_bundle.h, io/onnx_mimi.h): takes the
 * table and the bundle owning their memory, freeing both with the file (or at once on failure). */
int pp_st_from_bundle(const char *label, st_tensor *tensors, size_t count, const void *base, size_t size,
                      onnx_bundle *bundle, st_file **out, char *err);

const char *pp_st_path(const st_file *f);
size_t pp_st_size(const st_file *f); /* bytes of the file (of all its shards together) */
/* The file in memory: pp_st_size bytes from here hold every tensor's data (a GGUF shard read into
 * memory rather than mapped lies elsewhere). */
const void *pp_st_base(const st_file *f);
/* Tells the kernel t's bytes will not be read again soon: the mapped pages it owns alone go back
 * (they are the file's, read again on a later access). Quantizing at load calls it after each
 * source tensor, so the dense source never stays resident. */
void pp_st_release(const st_file *f, const st_tensor *t);
/* The tensors' bytes will not be read again (a device holds its own copy of every weight): an ONNX
 * bundle's converted weights, memory of its own, are freed and its tensors' data set to NULL.
 * Mapped files are left as they are (their pages are the kernel's to reclaim). */
void pp_st_drop_data(st_file *f);
size_t pp_st_count(const st_file *f);
const st_tensor *pp_st_at(const st_file *f, size_t i); /* in header order */
const st_tensor *pp_st_find(const st_file *f, const char *name);
/* __metadata__ value for key (GGUF: the KV value as text), or NULL. */
const char *pp_st_metadata(const st_file *f, const char *key);

const char *pp_st_dtype_name(st_dtype dt);
int pp_st_dtype_bits(st_dtype dt);

/* Converts n elements of a F32/F16/BF16 tensor, starting at element `first`, to float.
 * Returns PP_EUNSUPPORTED (with the tensor's name in err) for other dtypes. */
int pp_st_load_f32(const st_file *f, const st_tensor *t, int64_t first, int64_t n, float *dst, char *err);
/* Reads an integer tensor (I64/I32/U8...) into int64. */
int pp_st_load_i64(const st_file *f, const st_tensor *t, int64_t first, int64_t n, int64_t *dst, char *err);
/* Fetches a tensor by name, checking dtype class and exact shape; err names file, tensor and both shapes. */
int pp_st_expect(const st_file *f, const char *name, int ndim, const int64_t *shape, const st_tensor **out, char *err);

/* Writer: declare every tensor first (name, dtype, shape), then write their bytes in the
 * declared order. The header is written by pp_st_writer_begin. The file is written as
 * "<path>.tmp" and renamed over path by pp_st_writer_finish, so path only ever holds a
 * complete file (a previous one stays until then). */
typedef struct st_writer st_writer;
int pp_st_writer_create(const char *path, st_writer **out, char *err);
int pp_st_writer_declare(st_writer *w, const char *name, st_dtype dt, int ndim, const int64_t *shape, char *err);
int pp_st_writer_metadata(st_writer *w, const char *key, const char *value, char *err);
int pp_st_writer_begin(st_writer *w, char *err);
/* Appends bytes of the current tensor; a tensor may be written in several calls. */
int pp_st_writer_write(st_writer *w, const void *data, size_t nbytes, char *err);
/* Checks every declared byte was written, closes the file and renames it into place. Frees w in all cases. */
int pp_st_writer_finish(st_writer *w, char *err);
void pp_st_writer_abort(st_writer *w); /* closes and removes the partial '.tmp' file */

#endif
