/* onnx_graph: what the ONNX loaders (io/onnx_bundle.c for the LM's two step graphs, io/onnx_mimi.c
 * for the codec's two) share: a graph indexed by the values its nodes produce, a weight operand
 * resolved through the nodes that only select or convert it, and the converted tensors, planned
 * first (names, shapes, sizes, where each comes from) and then filled into one buffer that becomes
 * a checkpoint's tensor table. Internal to io/. */
#ifndef PP_IO_ONNX_GRAPH_H
#define PP_IO_ONNX_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "io/onnx.h"
#include "io/onnx_bundle.h"
#include "io/safetensors.h"

#define NAME_LEN 128

/* ---- what a weight operand is, through the nodes that only select or convert it ---- */

typedef struct og_wref {
    const pp_onnx_tensor *t;     /* the stored values or codes */
    const pp_onnx_tensor *scale; /* DequantizeLinear / MatMulInteger scale, else NULL */
    const pp_onnx_tensor *zero;  /* its zero point, NULL when absent */
    const pp_onnx_node *dq;      /* the DequantizeLinear node, NULL when none */
    int stacked;                 /* t is [steps, ...], one slice selected per step by a Gather */
} og_wref;

typedef struct og_graph {
    pp_onnx_model *m;
    const char *file;
    const char **prod_names; /* sorted output names, and the node producing each */
    size_t *prod_nodes, n_prod;
} og_graph;

/* ---- the converted tensors: planned first (names, shapes, sizes), filled into one buffer ---- */

typedef enum { F_COPY, F_TRANSPOSE, F_NBITS_CODES, F_SCALES127, F_NBITS_ZEROS, F_ZEROS, F_ONES } fill_kind;

typedef struct og_tensor {
    char name[NAME_LEN];
    st_dtype dtype;
    int ndim;
    int64_t shape[3];
    size_t nbytes, off;
    fill_kind kind;
    const uint8_t *src;
    int src_dtype;
    int64_t steps, K, N; /* F_TRANSPOSE: src [steps][K][N] -> [steps·N][K]; F_NBITS_*: N rows of K */
    int bits, block;
    int64_t count; /* F_SCALES127, F_ZEROS, F_ONES: values written */
    int bcast;     /* F_SCALES127, F_ZEROS: one source value for all */
    int flip;      /* uint8 codes or zero points: minus 128 */
} og_tensor;

struct onnx_bundle {
    og_tensor *outs;
    size_t n_outs, cap_outs;
    uint8_t *buf;
    size_t size;
    st_tensor *tensors;
};

/* Opens DIR/FILE and indexes it (g owns the model from here on; og_close frees it). */
int og_open(og_graph *g, const char *dir, const char *file, char *err);
/* Indexes the producers of the model already in g->m (path names it in messages). */
int og_index(og_graph *g, const char *path, char *err);
/* The same from model bytes in memory (no external data may be named). */
int og_parse(og_graph *g, const void *buf, size_t len, const char *file, char *err);
void og_close(og_graph *g);
/* The node producing value NAME, or NULL. */
const pp_onnx_node *og_producer(const og_graph *g, const char *name);
/* The first node of type OP reading value NAME, or NULL. */
const pp_onnx_node *og_consumer(const og_graph *g, const char *name, const char *op);
int og_is_op(const pp_onnx_node *n, const char *op);
int64_t og_attr_i(const pp_onnx_node *n, const char *name, int64_t dflt);
/* The weight behind value NAME: a constant, through Identity and Cast, a Gather of one step's
 * slice from a stack (axis 0, a computed index) and DequantizeLinear. 0 when NAME is not one. */
int og_resolve(const og_graph *g, const char *name, og_wref *w, int hops);
/* Whether NAME is one of the graph's inputs. */
int og_is_input(const og_graph *g, const char *name);
/* The one-value int64/int32 constant NAME in *v; 0 when NAME is not one. */
int og_const_int(const og_graph *g, const char *name, int64_t *v);
int og_is_float(int dt);
/* The float constant behind value NAME (og_resolve's, neither a step's slice nor dequantised), or NULL. */
const pp_onnx_tensor *og_float_const(const og_graph *g, const char *name);
/* Whether t holds dim values along its last axis and no other (a norm or layer scale of width dim). */
int og_is_width_vector(const pp_onnx_tensor *t, int64_t dim);
int og_is_byte(int dt);
/* PP_EFORMAT naming the graph file and node n. */
int og_bad_node(const og_graph *g, const pp_onnx_node *n, char *err, const char *what);
/* The tensor's data must be readable and of its declared size. */
int og_readable(const og_graph *g, const pp_onnx_node *n, const pp_onnx_tensor *t, char *err);

/* Appends tensor NAME of type dt and shape [d0, d1, d2][:ndim], filled as kind says (the caller
 * sets the source fields); NULL when out of memory. */
og_tensor *og_plan(onnx_bundle *b, const char *name, st_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2,
                   fill_kind kind, char *err);
/* The checkpoint type of a float ONNX type. */
st_dtype og_st_dtype(int onnx_dtype);
/* Plans NAME as a copy of t's bytes from offset on. */
int og_plan_view(onnx_bundle *b, const char *name, const pp_onnx_tensor *t, size_t offset, int ndim, int64_t d0,
                 int64_t d1, int64_t d2, char *err);
/* Places the planned tensors in the buffer: b->size bytes in all. */
void og_layout(onnx_bundle *b);
/* Plans the tensors of two graphs into b. */
typedef int (*og_plan_fn)(onnx_bundle *b, const og_graph *first, const og_graph *second, const void *ctx, char *err);
/* Converts the graphs first and second (rc: how opening them went; nothing is done unless 0),
 * planned by plan, into a new table; closes both graphs. */
int og_convert(int rc, og_graph *first, og_graph *second, og_plan_fn plan, const void *ctx, int release,
               const char *label, st_tensor **tensors, size_t *count, const void **base, size_t *size,
               onnx_bundle **out_bundle, char *err);
/* Lays out, allocates and fills b's tensors and hands out the table (release: give back each
 * source's mapped pages once read); on failure frees b. */
int og_materialize(onnx_bundle *b, int release, const char *label, st_tensor **tensors, size_t *count,
                   const void **base, size_t *size, onnx_bundle **out_bundle, char *err);

#endif
