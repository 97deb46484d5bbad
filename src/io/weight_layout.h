/* weight_layout: the quantized layouts' loaders, private to io/weight*.c.
 *
 * Each takes the base key X under which the layout's keys were found, validates every key
 * (dtype, lengths, group size, shape against [rows, cols]), runs the load-time sanity checks
 * of docs/formats.md §7 and fills the descriptor. */
#ifndef PP_IO_WEIGHT_LAYOUT_H
#define PP_IO_WEIGHT_LAYOUT_H

#include "io/weight.h"

int pp_wl_load_nf2(const st_file *f, const char *base, int64_t rows, int64_t cols, pp_weight *w, char *err);
int pp_wl_load_int4(const st_file *f, const char *base, int64_t rows, int64_t cols, pp_weight *w, char *err);
int pp_wl_load_nf4(const st_file *f, const char *base, int64_t rows, int64_t cols, pp_weight *w, char *err);
int pp_wl_load_int8(const st_file *f, const char *base, int64_t rows, int64_t cols, pp_weight *w, char *err);
/* INT8's absmax tensor of base key X (bitsandbytes' `P.SCB` beside `P.weight`), or NULL; its key. */
const st_tensor *pp_wl_int8_scales(const st_file *f, const char *base);
int pp_wl_int8_scales_key(const char *base, char *key, size_t cap);
int pp_wl_int8_zeros_key(const char *base, char *key, size_t cap); /* P.zero_point, asymmetric INT8 */

/* Checks the stored dims (entries <= 0 dropped: the quantized layouts' shape keys pad with zeros)
 * are exactly [rows, cols]. */
int pp_wl_check_dims(const st_file *f, const char *key, const int64_t *dims, int ndim, int64_t rows, int64_t cols,
                     char *err);
/* The same for tensor t's own shape, which has no padding: a 0 among its dims leaves it empty. */
int pp_wl_check_shape(const st_file *f, const st_tensor *t, int64_t rows, int64_t cols, char *err);

#endif
