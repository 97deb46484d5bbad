/* gguf: the GGUF container (ggml's single-file checkpoint, v2 and v3) as an st_file.
 *
 * pp_st_open recognises the "GGUF" magic and hands the mapping to pp_gguf_parse, which validates the
 * header (every length, count and offset against the bytes present; the tensors' data in table
 * order, each right after the previous one's padded bytes, as ggml writes and reads it) and fills the same tensor
 * table the safetensors reader builds: names, torch-order shapes (GGUF's dims reversed), dtypes
 * (ST_Q4_K, ST_Q4_0 and ST_Q8_0 for ggml's block formats) and data pointers into the mapping.
 * KV pairs with string or scalar values become metadata strings (pp_st_metadata); arrays are
 * skipped. moshi.cpp's `lm.` name prefix is dropped so both namings address the same keys.
 *
 * A checkpoint split into byte shards (`NAME.shard-00`, `-01`, ...) maps as one file: the
 * shards are placed back to back in one reserved address range, so no tensor is copied (from a
 * shard that starts inside a page on, which mmap cannot place, they are read instead). */
#ifndef PP_IO_GGUF_H
#define PP_IO_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h"

typedef struct gguf_meta gguf_meta;

/* Parses the GGUF bytes [base, base+size). On success *tensors (count entries, header order)
 * and *meta (owning the names and metadata strings) are the caller's to free (pp_gguf_meta_free). */
int pp_gguf_parse(const uint8_t *base, size_t size, const char *label, st_tensor **tensors, size_t *count,
                  gguf_meta **meta, char *err);
void pp_gguf_meta_free(gguf_meta *m);
/* Value of KV key as text (numbers in decimal), or NULL. */
const char *pp_gguf_meta_get(const gguf_meta *m, const char *key);

/* Maps PATH, or the shards PATH.shard-00... when PATH ends in `.shard-00` or does not exist
 * while its shards do, as one read-only range. *label names what was mapped, for messages.
 * Returns 1, mapping nothing, when PATH is a plain existing file (the caller maps it). Release
 * the range with pp_file_unmap. */
int pp_gguf_map(const char *path, void **map, size_t *size, char **label, char *err);

#endif
