/* hostmem: how much memory this process may still take on its host. The kernel's MemAvailable
 * alone overstates it inside a container or a systemd unit with MemoryMax=: the cgroup's limit
 * ends the process (the OOM killer) long before the host runs short. */
#ifndef PP_BASE_HOSTMEM_H
#define PP_BASE_HOSTMEM_H

#include <stdint.h>

/* total: MemTotal, or the tightest cgroup limit above the process when lower; available:
 * MemAvailable, or the least headroom under those limits (limit minus usage, where the usage
 * leaves out inactive page cache, which the kernel reclaims before it kills). -1 when
 * /proc/meminfo cannot be read (both 0). Every group up the tree counts, in cgroup v2 and in
 * v1's memory controller. */
int pp_host_memory(uint64_t *total, uint64_t *available);
/* The same with every path under root ("" is the real system; tests build a tree). */
int pp_host_memory_under(const char *root, uint64_t *total, uint64_t *available);

#endif
