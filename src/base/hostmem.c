/* hostmem: see hostmem.h. */
#include "base/hostmem.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* The first line of path as an unsigned number; 0 when missing or not a number ("max"). */
static uint64_t read_number(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    unsigned long long v = 0;
    if (fscanf(f, "%llu", &v) != 1) v = 0;
    fclose(f);
    return v;
}

/* The value of key in a "key value" file (memory.stat); 0 when absent. */
static uint64_t read_key(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256], name[128];
    unsigned long long v, found = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "%127s %llu", name, &v) == 2 && strcmp(name, key) == 0) {
            found = v;
            break;
        }
    fclose(f);
    return found;
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Narrows *total and *avail by one group's limit. v1 reports "no limit" as a number near 2^63. */
static void apply_limit(const char *dir, const char *limit_file, const char *usage_file, const char *inactive_key,
                        uint64_t *total, uint64_t *avail) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, limit_file);
    uint64_t limit = read_number(path);
    if (!limit || limit >= (UINT64_C(1) << 60)) return;
    snprintf(path, sizeof path, "%s/%s", dir, usage_file);
    uint64_t used = read_number(path);
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    uint64_t inactive = read_key(path, inactive_key);
    used = used > inactive ? used - inactive : 0;
    uint64_t headroom = limit > used ? limit - used : 0;
    if (limit < *total) *total = limit;
    if (headroom < *avail) *avail = headroom;
}

/* The group's folder under mount, or the mount itself when the group's path is not visible there
 * (a container that sees its own group as the mount's root). */
static void group_dir(const char *mount, const char *group, char *out, size_t cap) {
    snprintf(out, cap, "%s%s", mount, group);
    if (!is_dir(out)) snprintf(out, cap, "%s", mount);
}

/* Every group from the process's up to the mount may limit it (v1 accounts hierarchically too). */
static void apply_tree(const char *mount, const char *group, int v2, uint64_t *total, uint64_t *avail) {
    char dir[4200];
    group_dir(mount, group, dir, sizeof dir);
    for (;;) {
        if (v2) apply_limit(dir, "memory.max", "memory.current", "inactive_file", total, avail);
        else apply_limit(dir, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file", total, avail);
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= strlen(mount) || !slash) break;
        *slash = '\0';
    }
}

static void apply_cgroups(const char *root, uint64_t *total, uint64_t *avail) {
    char path[4200], line[4200], mount[4200];
    snprintf(path, sizeof path, "%s/proc/self/cgroup", root);
    FILE *f = fopen(path, "r");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *controllers = strchr(line, ':'), *group = controllers ? strchr(controllers + 1, ':') : NULL;
        if (!group) continue;
        *group++ = '\0';
        *controllers++ = '\0'; /* line is the hierarchy's number */
        if (strcmp(line, "0") == 0 && !controllers[0]) {
            snprintf(mount, sizeof mount, "%s/sys/fs/cgroup", root);
            apply_tree(mount, group, 1, total, avail);
        } else if (strstr(controllers, "memory")) {
            snprintf(mount, sizeof mount, "%s/sys/fs/cgroup/memory", root);
            apply_tree(mount, group, 0, total, avail);
        }
    }
    fclose(f);
}

int pp_host_memory_under(const char *root, uint64_t *total, uint64_t *available) {
    char path[4200], line[256];
    *total = *available = 0;
    snprintf(path, sizeof path, "%s/proc/meminfo", root);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    unsigned long long kb;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) *total = kb * 1024;
        else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) *available = kb * 1024;
    }
    fclose(f);
    if (!*total) return -1;
    apply_cgroups(root, total, available);
    return 0;
}

int pp_host_memory(uint64_t *total, uint64_t *available) { return pp_host_memory_under("", total, available); }
