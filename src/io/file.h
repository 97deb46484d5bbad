/* file: whole-file reads and atomic whole-file replacement, for the small files (voices,
 * WAV clips, JSON) that are parsed from memory rather than mapped. */
#ifndef PP_IO_FILE_H
#define PP_IO_FILE_H

#include <stddef.h>
#include <stdio.h>

/* Reads path into a new malloc'd buffer (*out, *len; one extra NUL byte follows the data so
 * text parsers may rely on it). Files larger than max_bytes are refused with PP_EFULL. */
int pp_file_read_all(const char *path, size_t max_bytes, unsigned char **out, size_t *len, char *err);

/* Maps the regular file path read-only: *map (NULL for an empty file) and its *size bytes;
 * release with pp_file_unmap. The range is noted for pp_file_explain_sigbus. */
int pp_file_map(const char *path, void **map, size_t *size, char *err);
/* Unmaps what pp_file_map (or a caller that noted it with pp_file_note_mapping) mapped. */
void pp_file_unmap(void *map, size_t size);

/* A mapped file's pages are read from the file itself whenever they are not in memory (first
 * use, or after pp_file_release_pages or page-cache pressure). A file rewritten in place while
 * mapped (`cp new.safetensors model.safetensors` truncates the same inode, then fills it) gives
 * another model's bytes, or, past its new end, SIGBUS: replace a file by renaming a new one over
 * it (the writers below and personaplex-fetch-weights do), which leaves the mapped inode intact.
 *
 * pp_file_note_mapping records [p, p + n) as the file `label` (pp_file_map does it itself; up to
 * 64 mappings are recorded); pp_file_explain_sigbus installs a SIGBUS handler that, when the
 * faulting address lies in a recorded mapping, writes one line to stderr naming the file and the
 * offset before the process dies of the signal as it would have. */
void pp_file_note_mapping(const void *p, size_t n, const char *label);
void pp_file_explain_sigbus(void);

/* Gives the kernel back the pages of a read-only file mapping that lie wholly within [p, p + n)
 * (read again from the file on a later access). */
void pp_file_release_pages(const void *p, size_t n);

/* Atomic replacement: pp_file_create opens "<path>.tmp" for writing; pp_file_commit flushes,
 * closes and renames it over path (readers never see a half-written file); pp_file_discard
 * closes and removes it. Both take ownership of f. A path that is there as a FIFO or a device
 * (/dev/stdout, a pipe) is written directly instead; a symbolic link's target is replaced, the
 * link kept. The data is synced before the rename. */
int pp_file_create(const char *path, FILE **f, char *err);
int pp_file_commit(const char *path, FILE *f, char *err);
void pp_file_discard(const char *path, FILE *f);
/* The temporary file pp_file_create writes for path (beside a link's target), for a program to
 * remove when it is stopped before the commit; "" for a path written directly. PP_EINVAL when it
 * does not fit in cap. */
int pp_file_tmp_path(const char *path, char *buf, size_t cap, char *err);

#endif
