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
 * release with munmap(*map, *size). */
int pp_file_map(const char *path, void **map, size_t *size, char *err);

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

#endif
