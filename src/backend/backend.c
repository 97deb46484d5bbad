/* backend: picking a backend by name; the calls every backend answers, with or without a hook. */
#include "backend/backend.h"

#include "base/err.h"

#include <stdatomic.h>
#include <string.h>

#ifndef PP_HAVE_CUDA
int pp_backend_cuda_create(int device, pp_backend **out, char *err) {
    (void)device;
    (void)out;
    return pp_fail(err, PP_EUNSUPPORTED, "--device cuda: this build has no CUDA backend (built without a CUDA toolkit)");
}
#endif

int pp_backend_create(const char *name, int n_threads, pp_backend **out, char *err) {
    if (!name || strcmp(name, "auto") == 0) {
        if (pp_backend_cuda_create(0, out, NULL) == PP_OK) return PP_OK;
        return pp_backend_cpu_create(n_threads, out, err);
    }
    if (strcmp(name, "cpu") == 0) return pp_backend_cpu_create(n_threads, out, err);
    if (strcmp(name, "cuda") == 0) return pp_backend_cuda_create(0, out, err);
    return pp_fail(err, PP_EINVAL, "unknown device '%s' (expected cpu, cuda or auto)", name);
}

static const char *const kv_format_names[] = {"f32", "bf16", "int8"};

const char *pp_kv_format_name(pp_kv_format kv) { return kv_format_names[kv]; }

int pp_kv_format_parse(const char *name, pp_kv_format *out) {
    for (int f = PP_KV_F32; f <= PP_KV_INT8; f++)
        if (strcmp(name, kv_format_names[f]) == 0) {
            *out = (pp_kv_format)f;
            return 0;
        }
    return -1;
}

void pp_backend_destroy(pp_backend *be) {
    if (be) be->ops->destroy(be);
}

int pp_backend_check_head_dim(pp_backend *be, int head_dim, const char *what, char *err) {
    int most = be->ops->max_head_dim;
    if (most > 0 && head_dim > most)
        return pp_fail(err, PP_EUNSUPPORTED, "%s: heads of %d values; the %s backend's attention takes at most %d", what,
                       head_dim, be->ops->name, most);
    return PP_OK;
}

int pp_backend_device_error(pp_backend *be, char *err) {
    return be->ops->last_error ? be->ops->last_error(be, err) : PP_OK;
}

int pp_backend_uses_host_memory(pp_backend *be) {
    int shared = !be->ops->mem_info;
    char name[64];
    if (be->ops->describe) be->ops->describe(be, name, sizeof name, &shared);
    return shared;
}

int pp_backend_run_recorded(pp_backend *be, uint64_t key, void (*issue)(void *arg), void *arg, char *err) {
    if (be->ops->run_recorded) return be->ops->run_recorded(be, key, issue, arg, err);
    issue(arg);
    return PP_OK;
}

static atomic_uint_fast64_t next_key = 1;

uint64_t pp_backend_new_key(void) { return (uint64_t)atomic_fetch_add(&next_key, 1); }

void pp_backend_forget_recorded(pp_backend *be, uint64_t key) {
    if (be->ops->forget_recorded) be->ops->forget_recorded(be, key);
}

uint64_t pp_backend_shape_key(pp_backend *be, pp_recorded_shape *shapes, int count, uint64_t shape, uint64_t *clock) {
    pp_recorded_shape *e = NULL;
    for (int i = 0; i < count && !e; i++)
        if (shapes[i].key && shapes[i].shape == shape) e = &shapes[i];
    if (!e) {
        e = &shapes[0];
        for (int i = 1; i < count; i++)
            if (shapes[i].used < e->used) e = &shapes[i];
        if (e->key) pp_backend_forget_recorded(be, e->key);
        *e = (pp_recorded_shape){.key = pp_backend_new_key(), .shape = shape};
    }
    e->used = ++*clock;
    return e->key;
}

void pp_backend_forget_shapes(pp_backend *be, pp_recorded_shape *shapes, int count) {
    for (int i = 0; i < count; i++)
        if (shapes[i].key) pp_backend_forget_recorded(be, shapes[i].key);
}
