/* tensor_list: a growing list of tensor names and shapes, without data: what a catalogue lists,
 * to write stand-in weights of the real shapes (the demo model, the codec benchmark) or to map a
 * converted file onto (io/onnx_mimi.h). */
#ifndef PP_IO_TENSOR_LIST_H
#define PP_IO_TENSOR_LIST_H

#include <stddef.h>
#include <stdint.h>

typedef struct pp_tensor_spec {
    char name[128];
    int ndim;
    int64_t shape[4];
    int conv_stride, conv_groups; /* a convolution weight's stride and groups when the list says (else 0) */
} pp_tensor_spec;

typedef struct pp_tensor_list {
    pp_tensor_spec *v;
    size_t n, cap;
    int failed; /* an append ran out of memory: the list is incomplete */
} pp_tensor_list;

/* Appends NAME with its shape (at most 4 dimensions kept). Shaped as a catalogue callback: ctx is
 * the list. Out of memory sets failed and drops the entry. */
void pp_tensor_list_add(void *ctx, const char *name, int ndim, const int64_t *shape);
/* Records that weight NAME, listed already, is a convolution's run with stride and groups.
 * Shaped as a catalogue callback: ctx is the list. */
void pp_tensor_list_conv(void *ctx, const char *name, int stride, int groups);
void pp_tensor_list_free(pp_tensor_list *l);

#endif
