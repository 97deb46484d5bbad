/* backend: picking and destroying a backend by name. */
#include "backend/backend.h"

#include "base/err.h"

#include <string.h>

void pp_backend_cpu_destroy(pp_backend *be);
#ifdef PP_HAVE_CUDA
void pp_backend_cuda_destroy(pp_backend *be);
#else
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

void pp_backend_destroy(pp_backend *be) {
    if (!be) return;
#ifdef PP_HAVE_CUDA
    if (strcmp(be->ops->name, "cuda") == 0) {
        pp_backend_cuda_destroy(be);
        return;
    }
#endif
    pp_backend_cpu_destroy(be);
}
