/* file: see file.h. */
#define _DEFAULT_SOURCE /* madvise */
#include "io/file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"

int pp_file_read_all(const char *path, size_t max_bytes, unsigned char **out, size_t *len, char *err) {
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return pp_fail(err, errno == ENOENT ? PP_ENOTFOUND : PP_EIO, "%s: cannot open: %s", path, strerror(errno));
    int rc = 0;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        rc = pp_fail(err, PP_EIO, "%s: cannot determine the file size (not a regular file?)", path);
    } else if ((unsigned long)size > max_bytes) {
        rc = pp_fail(err, PP_EFULL, "%s: %ld bytes, more than the %zu allowed", path, size, max_bytes);
    } else {
        unsigned char *buf = malloc((size_t)size + 1);
        if (!buf) {
            rc = pp_fail(err, PP_ENOMEM, "%s: cannot allocate %ld bytes", path, size);
        } else if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
            free(buf);
            rc = pp_fail(err, PP_EIO, "%s: short read", path);
        } else {
            buf[size] = 0;
            *out = buf;
            *len = (size_t)size;
        }
    }
    fclose(f);
    return rc;
}

/* "<path>.tmp" into buf; 0 or PP_EINVAL when it does not fit. */
static int tmp_name(const char *path, char *buf, size_t cap, char *err) {
    int n = snprintf(buf, cap, "%s.tmp", path);
    if (n < 0 || (size_t)n >= cap) return pp_fail(err, PP_EINVAL, "%s: path too long", path);
    return 0;
}

/* A path that exists as something other than a regular file (a FIFO, a terminal, /dev/stdout)
 * is written in place: renaming over it would swap the pipe or device for a plain file. */
static int in_place(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && !S_ISREG(sb.st_mode);
}

/* The file a replacement lands on: a symbolic link's target, so that the link stays (a models
 * folder of links into a data volume keeps its links); path itself otherwise, and for a link
 * whose target does not exist yet. */
static const char *landing(const char *path, char resolved[PATH_MAX]) {
    struct stat sb;
    if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode) && realpath(path, resolved)) return resolved;
    return path;
}

int pp_file_tmp_path(const char *path, char *buf, size_t cap, char *err) {
    char resolved[PATH_MAX];
    if (cap) buf[0] = 0;
    if (in_place(path)) return 0;
    int rc = tmp_name(landing(path, resolved), buf, cap, err);
    if (rc && cap) buf[0] = 0; /* never a cut path: a caller may remove it */
    return rc;
}

int pp_file_create(const char *path, FILE **f, char *err) {
    char tmp[4096];
    *f = NULL;
    if (in_place(path)) {
        *f = fopen(path, "wb");
        return *f ? 0 : pp_fail(err, PP_EIO, "%s: cannot open for writing: %s", path, strerror(errno));
    }
    int rc = pp_file_tmp_path(path, tmp, sizeof tmp, err);
    if (rc) return rc;
    *f = fopen(tmp, "wb");
    if (!*f) return pp_fail(err, PP_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    return 0;
}

int pp_file_commit(const char *path, FILE *f, char *err) {
    char tmp[4096], resolved[PATH_MAX];
    int direct = in_place(path);
    /* The data reaches the disk before the rename does: after a power loss the path holds the old
     * file or the whole new one, never an empty one (a pipe or device has no disk to reach).
     * The reason is kept: a disk that fills on the last buffered bytes fails here, in fflush. */
    int e = 0, earlier = ferror(f);
    if (fflush(f))
        e = errno;
    else if (!direct && fsync(fileno(f)))
        e = errno;
    if (fclose(f) != 0 && !e) e = errno;
    const char *why = e ? strerror(e) : "an earlier write failed";
    if (direct) return earlier || e ? pp_fail(err, PP_EIO, "%s: write failed: %s", path, why) : 0;
    const char *target = landing(path, resolved);
    int rc = tmp_name(target, tmp, sizeof tmp, err);
    if (rc) return rc;
    if (earlier || e) {
        remove(tmp);
        return pp_fail(err, PP_EIO, "%s: write failed: %s", tmp, why);
    }
    if (rename(tmp, target) != 0) {
        e = errno;
        remove(tmp);
        return pp_fail(err, PP_EIO, "%s: cannot rename to %s: %s", tmp, target, strerror(e));
    }
    return 0;
}

void pp_file_discard(const char *path, FILE *f) {
    char tmp[4096];
    if (f) fclose(f);
    if (pp_file_tmp_path(path, tmp, sizeof tmp, NULL) == 0 && tmp[0]) remove(tmp);
}

/* ---- mappings named on SIGBUS -------------------------------------------------------------- */

enum { SLOT_FREE, SLOT_FILLING, SLOT_LIVE };
typedef struct {
    atomic_int state; /* a slot is claimed FREE -> FILLING, filled, then published LIVE */
    uintptr_t start, end;
    char label[256];
} mapping_slot;
static mapping_slot g_mappings[64];

void pp_file_note_mapping(const void *p, size_t n, const char *label) {
    if (!p || !n) return;
    for (size_t i = 0; i < sizeof g_mappings / sizeof *g_mappings; i++) {
        int expected = SLOT_FREE;
        mapping_slot *s = &g_mappings[i];
        if (!atomic_compare_exchange_strong(&s->state, &expected, SLOT_FILLING)) continue;
        s->start = (uintptr_t)p, s->end = (uintptr_t)p + n;
        snprintf(s->label, sizeof s->label, "%s", label);
        atomic_store(&s->state, SLOT_LIVE);
        return;
    }
}

void pp_file_unmap(void *map, size_t size) {
    if (!map) return;
    for (size_t i = 0; i < sizeof g_mappings / sizeof *g_mappings; i++) {
        mapping_slot *s = &g_mappings[i];
        if (atomic_load(&s->state) == SLOT_LIVE && s->start == (uintptr_t)map) atomic_store(&s->state, SLOT_FREE);
    }
    munmap(map, size);
}

/* Async-signal-safe output: write(2) of a string, then of a number in decimal. */
static void put_str(const char *s) {
    size_t n = strlen(s);
    while (n) {
        ssize_t k = write(STDERR_FILENO, s, n);
        if (k <= 0) return;
        s += k, n -= (size_t)k;
    }
}
static void put_u64(uint64_t v) {
    char buf[24], *p = buf + sizeof buf;
    *--p = 0;
    do *--p = (char)('0' + v % 10);
    while (v /= 10);
    put_str(p);
}

static void on_sigbus(int sig, siginfo_t *info, void *ctx) {
    (void)sig, (void)ctx;
    uintptr_t at = (uintptr_t)info->si_addr;
    for (size_t i = 0; i < sizeof g_mappings / sizeof *g_mappings; i++) {
        const mapping_slot *s = &g_mappings[i];
        if (atomic_load(&s->state) != SLOT_LIVE || at < s->start || at >= s->end) continue;
        put_str("SIGBUS reading ");
        put_str(s->label);
        put_str(" at byte ");
        put_u64((uint64_t)(at - s->start));
        put_str(": the file was truncated or rewritten in place while mapped; replace a checkpoint by renaming a "
                "new file over it (cp new x.tmp && mv x.tmp x), then restart\n");
        break;
    }
    /* SA_RESETHAND restored the default action: returning re-runs the access, which ends the
     * process with the signal, as if no handler had been installed */
}

void pp_file_explain_sigbus(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

int pp_file_map(const char *path, void **map, size_t *size, char *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return pp_fail(err, PP_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        return pp_fail(err, PP_EIO, "%s: not a regular file", path);
    }
    *size = (size_t)sb.st_size;
    *map = NULL;
    if (*size) {
        void *p = mmap(NULL, *size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return pp_fail(err, PP_EIO, "%s: mmap failed: %s", path, strerror(e));
        }
        *map = p;
        pp_file_note_mapping(p, *size, path);
    }
    close(fd);
    return 0;
}

void pp_file_release_pages(const void *p, size_t n) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p, b = a + n;
    uintptr_t first = (a + page - 1) / page * page, last = b / page * page; /* pages shared at the ends stay */
    if (last > first) madvise((void *)first, last - first, MADV_DONTNEED);
}
