/* test_cuda_host_emu: the CUDA backend's host code (src/backend/cuda.c) on the emulated device,
 * with the emulation's failure hooks (tests/cuda_emu/cuda_runtime_api.h) making one call fail
 * at a time: creating the backend, loading the golden mimi-synth codec and running its batched
 * frames must each fail with an error naming the call, leave no allocation behind, and never
 * report a frame whose device work failed as done. Also: the environment switches' parse, and
 * the codec's recorded calls when the batch's row count alternates from frame to frame (as
 * conversations whose frame clocks are out of phase make it). */
#include "test.h"

#include "backend/backend.h"
#include "model/mimi.h"

#include <cuda_runtime_api.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- environment switches ---- */

/* Whether the backend is created with `name` set to `value`; on refusal err says why. */
static int creates_with(const char *name, const char *value, char *err) {
    setenv(name, value, 1);
    pp_backend *be;
    int rc = pp_backend_create("cuda", 1, &be, err);
    if (!rc) pp_backend_destroy(be);
    unsetenv(name);
    return rc == PP_OK;
}

static void test_env(void) {
    char err[PP_ERR_LEN];
    static const char *const imma_ok[] = {"0", "2", "9", " 4", "+3"};
    static const char *const imma_bad[] = {"1", "10", "-2", "abc", "", "4x", "4 ", "99999999999999999999"};
    int ok = 1, named = 1;
    for (size_t i = 0; i < sizeof imma_ok / sizeof *imma_ok; i++) ok &= creates_with("PP_CUDA_IMMA_MIN", imma_ok[i], err);
    for (size_t i = 0; i < sizeof imma_bad / sizeof *imma_bad; i++) {
        ok &= !creates_with("PP_CUDA_IMMA_MIN", imma_bad[i], err);
        named &= strstr(err, "PP_CUDA_IMMA_MIN=") != NULL;
    }
    TEST_COND("PP_CUDA_IMMA_MIN: whole integers 0 or 2..9 only", ok && named);
    ok = creates_with("PP_CUDA_ATTN_SPAN", "0", err) && creates_with("PP_CUDA_ATTN_SPAN", "128", err) &&
         !creates_with("PP_CUDA_ATTN_SPAN", "100", err) && !creates_with("PP_CUDA_ATTN_SPAN", "-64", err) &&
         !creates_with("PP_CUDA_ATTN_SPAN", "64k", err) && !creates_with("PP_CUDA_ATTN_SPAN", "1114112", err);
    TEST_COND("PP_CUDA_ATTN_SPAN: whole multiples of 64 up to 2^20 only",
              ok && strstr(err, "PP_CUDA_ATTN_SPAN=1114112") != NULL);
    ok = creates_with("PP_CUDA_ATTN_AHEAD", "1", err) && creates_with("PP_CUDA_IMMA_L1_AHEAD", "0", err) &&
         !creates_with("PP_CUDA_ATTN_AHEAD", "2", err) && !creates_with("PP_CUDA_ATTN_AHEAD", "1.0", err) &&
         !creates_with("PP_CUDA_IMMA_L1_AHEAD", "", err);
    TEST_COND("the on/off switches: 0 or 1 only", ok && strstr(err, "PP_CUDA_IMMA_L1_AHEAD=") != NULL);
    creates_with("PP_CUDA_IMMA_L1_AHEAD", "1", err); /* back to the defaults for what follows */
}

/* ---- failures while creating the backend ---- */

static const struct {
    enum pk_emu_call call;
    const char *named; /* what the error must name */
} CREATE_CALLS[] = {
    {PK_EMU_MALLOC, "cudaMalloc"}, {PK_EMU_MALLOC_HOST, "cudaMallocHost"}, {PK_EMU_CREATE, "Create"},
    {PK_EMU_SYNC, "Synchronize"},  {PK_EMU_LAUNCH, "kernel"},
};

static void test_create_failures(void) {
    char err[PP_ERR_LEN];
    const long live = pk_emu_live_objects();
    for (size_t k = 0; k < sizeof CREATE_CALLS / sizeof *CREATE_CALLS; k++) {
        int failures = 0, named = 1, leaks = 0;
        for (long nth = 1; nth < 64; nth++) {
            pk_emu_fail_nth(CREATE_CALLS[k].call, nth);
            pp_backend *be;
            err[0] = 0;
            int rc = pp_backend_create("cuda", 1, &be, err);
            pk_emu_fail_nth(CREATE_CALLS[k].call, 0);
            if (!rc) {
                pp_backend_destroy(be);
                leaks += pk_emu_live_objects() != live;
                break;
            }
            failures++;
            if (!strstr(err, CREATE_CALLS[k].named)) {
                fprintf(stderr, "call %zu, %ld-th: error '%s' does not name %s\n", k, nth, err, CREATE_CALLS[k].named);
                named = 0;
            }
            leaks += pk_emu_live_objects() != live;
        }
        char what[160];
        snprintf(what, sizeof what, "creating the backend: each failing %s is an error naming it, nothing left behind",
                 CREATE_CALLS[k].named);
        TEST_COND(what, failures > 0 && named && !leaks);
    }
}

int main(void) {
    test_env();
    test_create_failures();
    return test_report();
}
