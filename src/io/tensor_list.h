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
} pp_tensor_spec;

typedef struct pp_tensor_list {
    pp_tensor_spec *v;
    size_t n, cap;
    int failed; /* an append ran out of memory: the list is incomplete */
} pp_tensor_list;

/* Appends NAME with its shape (at most 4 dimensions kept). Shaped as a catalogue callback: ctx is
 * the list. Out of memory sets failed and drops the entry. */
void pp_tensor_list_add(void *ctx, const char *name, int ndim, const int64_t *shape);
void pp_tensor_list_free(pp_tensor_list *l);

#endif
