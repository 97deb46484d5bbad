/* memory: /proc/self/statm, mallinfo2, mallopt and malloc_trim (see memory.h). */
#define _GNU_SOURCE
#include "server/memory.h"

#include <stdio.h>
#include <unistd.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

/* Per-conversation buffers (KV caches, codec state) are far above this, so they are mapped on
 * their own and unmapped at free; small objects stay on the heap. */
#define MMAP_THRESHOLD (256 << 10)
/* Threads that allocate: the service thread, the engine, the loader and the pool workers.
 * Fewer arenas leave less free memory stranded in arenas nobody uses any more. */
#define ARENAS 2

void memory_configure(void) {
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    mallopt(M_ARENA_MAX, ARENAS);
#endif
}

memory_stats memory_read(void) {
    memory_stats s = {0};
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size, resident;
    if (f && fscanf(f, "%lu %lu", &size, &resident) == 2) s.resident = resident * (size_t)sysconf(_SC_PAGESIZE);
    if (f) fclose(f);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();
    s.heap = mi.arena;
    s.heap_free = mi.fordblks;
    s.mmapped = mi.hblkhd;
#endif
    return s;
}

void memory_trim(void) {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

size_t memory_render(char *buf, size_t cap) {
    if (!cap) return 0;
    memory_stats s = memory_read();
    int n = snprintf(buf, cap,
                     "# HELP personaplex_resident_memory_bytes Resident set size of the server process.\n"
                     "# TYPE personaplex_resident_memory_bytes gauge\n"
                     "personaplex_resident_memory_bytes %zu\n"
                     "# HELP personaplex_allocator_bytes Host heap held by the allocator: in arenas, of that "
                     "retained free (not in use, not yet returned), and mapped one by one.\n"
                     "# TYPE personaplex_allocator_bytes gauge\n"
                     "personaplex_allocator_bytes{kind=\"heap\"} %zu\n"
                     "personaplex_allocator_bytes{kind=\"retained\"} %zu\n"
                     "personaplex_allocator_bytes{kind=\"mmapped\"} %zu\n",
                     s.resident, s.heap, s.heap_free, s.mmapped);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}
