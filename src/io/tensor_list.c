#include "io/tensor_list.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pp_tensor_list_add(void *ctx, const char *name, int ndim, const int64_t *shape) {
    pp_tensor_list *l = ctx;
    if (l->failed) return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        pp_tensor_spec *v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            l->failed = 1;
            return;
        }
        l->v = v, l->cap = cap;
    }
    pp_tensor_spec *s = &l->v[l->n++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->ndim = ndim < 4 ? ndim : 4;
    memcpy(s->shape, shape, (size_t)s->ndim * sizeof *shape);
}

void pp_tensor_list_conv(void *ctx, const char *name, int stride, int groups) {
    pp_tensor_list *l = ctx;
    for (size_t i = l->n; i-- > 0;) /* the weight was listed just before */
        if (!strcmp(l->v[i].name, name)) {
            l->v[i].conv_stride = stride, l->v[i].conv_groups = groups;
            return;
        }
}

void pp_tensor_list_free(pp_tensor_list *l) {
    free(l->v);
    *l = (pp_tensor_list){0};
}
