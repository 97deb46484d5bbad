/* zip: the ZIP container that torch.save writes (PKWARE APPNOTE 6.3), read from memory and
 * written to a file.
 *
 * pp_zip_open_memory validates the whole archive before returning: end-of-central-directory
 * record (zip64 when present), every central directory entry, its local header (same name
 * and method, data inside the file and before the central directory), entries apart from each
 * other, at most 1 GiB inflated in all, unique names, and the CRC-32 of every entry. Entries
 * are STORED (what torch writes; the data points into the caller's buffer) or DEFLATE
 * (inflated with zlib into memory the archive owns). Encrypted, multi-disk and other methods
 * are refused. The writer stores entries uncompressed with their data 64-byte aligned, as
 * torch does, so a saved archive can be memory-mapped. */
#ifndef PP_IO_ZIP_H
#define PP_IO_ZIP_H

#include <stddef.h>
#include <stdint.h>

typedef struct zip_entry {
    const char *name;    /* NUL-terminated; contains no NUL */
    const uint8_t *data; /* uncompressed contents */
    size_t size;
} zip_entry;

typedef struct zip_archive zip_archive;

/* buf must outlive the archive; label names the source in messages. */
int pp_zip_open_memory(const void *buf, size_t len, const char *label, zip_archive **out, char *err);
void pp_zip_close(zip_archive *z);
size_t pp_zip_count(const zip_archive *z);
const zip_entry *pp_zip_at(const zip_archive *z, size_t i); /* central directory order */
const zip_entry *pp_zip_find(const zip_archive *z, const char *name);

/* Writer: add entries in order, then finish (atomically replaces path). */
typedef struct zip_writer zip_writer;
int pp_zip_writer_create(const char *path, zip_writer **out, char *err);
int pp_zip_writer_add(zip_writer *w, const char *name, const void *data, size_t size, char *err);
/* Writes the central directory and commits the file. Frees w in all cases. */
int pp_zip_writer_finish(zip_writer *w, char *err);
void pp_zip_writer_abort(zip_writer *w); /* frees w, removes the partial file */

#endif
