/* test_hostmem: the memory the process may take, read from fake /proc and /sys/fs/cgroup trees:
 * MemAvailable alone, under a systemd unit's MemoryMax= (cgroup v2, a tighter parent), in a
 * container whose group is the mount's root (v2 and v1), and v1's "no limit". */
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/hostmem.h"

#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)

static char g_root[64];

/* Writes text to root/rel, making the folders on the way. */
static void put(const char *rel, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_root, rel);
    for (char *p = path + strlen(g_root) + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0700);
            *p = '/';
        }
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void fresh_root(void) {
    if (g_root[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
        if (system(cmd) != 0) TEST_COND("cleanup", 0);
    }
    snprintf(g_root, sizeof g_root, "/tmp/pp_test_hostmem_XXXXXX");
    if (!mkdtemp(g_root)) abort();
    /* 16 GiB of RAM, 12 GiB available */
    put("proc/meminfo", "MemTotal:       16777216 kB\nMemFree:         1000000 kB\nMemAvailable:   12582912 kB\n");
}

int main(void) {
    uint64_t total, avail;
    fresh_root();
    TEST_COND("no cgroup file: MemTotal and MemAvailable",
              pp_host_memory_under(g_root, &total, &avail) == 0 && total == 16 * GIB && avail == 12 * GIB);

    /* a systemd unit with MemoryMax=2G: 1 GiB in use of which 512 MiB inactive page cache */
    put("proc/self/cgroup", "0::/system.slice/personaplex.service\n");
    put("sys/fs/cgroup/system.slice/memory.max", "max\n");
    put("sys/fs/cgroup/system.slice/personaplex.service/memory.max", "2147483648\n");
    put("sys/fs/cgroup/system.slice/personaplex.service/memory.current", "1073741824\n");
    put("sys/fs/cgroup/system.slice/personaplex.service/memory.stat", "anon 536870912\nfile 536870912\n"
                                                                     "inactive_file 536870912\nactive_file 0\n");
    TEST_COND("v2 MemoryMax=2G: total 2 GiB, 1.5 GiB left (the inactive cache counts as free)",
              pp_host_memory_under(g_root, &total, &avail) == 0 && total == 2 * GIB && avail == 1536 * MIB);
    put("sys/fs/cgroup/system.slice/memory.max", "1073741824\n");
    put("sys/fs/cgroup/system.slice/memory.current", "943718400\n");
    TEST_COND("v2: a tighter parent group limits too (1 GiB, 900 MiB used: 124 MiB left)",
              pp_host_memory_under(g_root, &total, &avail) == 0 && total == GIB && avail == 124 * MIB);
    put("sys/fs/cgroup/system.slice/memory.current", "1200000000\n");
    TEST_COND("v2: a group over its limit leaves nothing", pp_host_memory_under(g_root, &total, &avail) == 0 &&
                                                               avail == 0);

    /* a container: its group's path is the host's, the mount shows the group itself */
    fresh_root();
    put("proc/self/cgroup", "0::/kubepods/burstable/pod1/abc\n");
    put("sys/fs/cgroup/memory.max", "4294967296\n");
    put("sys/fs/cgroup/memory.current", "1073741824\n");
    TEST_COND("v2 container: the mount's own limit (4 GiB, 3 GiB left)",
              pp_host_memory_under(g_root, &total, &avail) == 0 && total == 4 * GIB && avail == 3 * GIB);

    fresh_root();
    put("proc/self/cgroup", "12:cpuset:/docker/abc\n5:memory:/docker/abc\n1:name=systemd:/docker/abc\n");
    put("sys/fs/cgroup/memory/memory.limit_in_bytes", "3221225472\n");
    put("sys/fs/cgroup/memory/memory.usage_in_bytes", "2147483648\n");
    put("sys/fs/cgroup/memory/memory.stat", "cache 1073741824\ntotal_inactive_file 1073741824\n");
    TEST_COND("v1 container: 3 GiB limit, 2 GiB used of which 1 GiB inactive cache: 2 GiB left",
              pp_host_memory_under(g_root, &total, &avail) == 0 && total == 3 * GIB && avail == 2 * GIB);
    put("proc/self/cgroup", "5:memory:/machine/vm1\n");
    put("sys/fs/cgroup/memory/machine/vm1/memory.limit_in_bytes", "9223372036854771712\n");
    put("sys/fs/cgroup/memory/machine/vm1/memory.usage_in_bytes", "1000\n");
    TEST_COND("v1: a parent's limit counts (the group's own is 'no limit')",
              pp_host_memory_under(g_root, &total, &avail) == 0 && total == 3 * GIB && avail == 2 * GIB);
    put("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    TEST_COND("v1's 'no limit' (2^63 rounded to a page) is no limit",
              pp_host_memory_under(g_root, &total, &avail) == 0 && total == 16 * GIB && avail == 12 * GIB);

    fresh_root();
    put("proc/self/cgroup", "0::/\n");
    TEST_COND("the root group without limit files: the host's figures",
              pp_host_memory_under(g_root, &total, &avail) == 0 && total == 16 * GIB && avail == 12 * GIB);
    TEST_COND("this machine: figures read", pp_host_memory(&total, &avail) == 0 && total > 0 && avail <= total);
    printf("this machine: %.1f GiB total, %.1f GiB the process may take\n", (double)total / GIB, (double)avail / GIB);
    char meminfo[96];
    snprintf(meminfo, sizeof meminfo, "%s/proc/meminfo", g_root);
    remove(meminfo);
    TEST_COND("no /proc/meminfo: -1", pp_host_memory_under(g_root, &total, &avail) == -1 && total == 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (system(cmd) != 0) TEST_COND("cleanup", 0);
    return test_report();
}
