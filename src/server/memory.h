/* memory: the server process's memory as the system and the allocator see it, and handing
 * back what the allocator keeps after conversations end.
 *
 * glibc's malloc keeps freed memory for reuse: after a burst of conversations the resident
 * size stays at the burst's peak, and its dynamic mmap threshold moves per-conversation
 * buffers onto the heap after the first one is freed, so repeated bursts ratchet it up.
 * memory_configure fixes the threshold and caps the arenas at start-up; memory_trim returns
 * free heap pages to the system (the engine calls it when the server has been quiet a while).
 * Elsewhere than glibc these do nothing and the allocator figures read 0. */
#ifndef PP_SERVER_MEMORY_H
#define PP_SERVER_MEMORY_H

#include <stddef.h>

typedef struct memory_stats {
    size_t resident;  /* resident set size (bytes) */
    size_t heap;      /* bytes the allocator holds from the system in its arenas (not mmapped chunks) */
    size_t heap_free; /* of those, free: retained by the allocator, not in use */
    size_t mmapped;   /* large allocations mapped one by one (returned at free) */
} memory_stats;

/* Allocator settings, once before any thread starts. */
void memory_configure(void);
/* The figures now; a figure that cannot be read is 0. */
memory_stats memory_read(void);
/* Returns free heap memory to the system. */
void memory_trim(void);
/* Appends the figures as Prometheus gauges to buf (cap bytes, NUL-terminated); the length. */
size_t memory_render(char *buf, size_t cap);

#endif
