/* onnx: an ONNX model file as the bundle loader needs it: the graph's nodes in their stored
 * (topological) order, its inputs with their shapes, and every constant tensor (initializers
 * and Constant nodes' values) with its bytes located in the mapped .onnx file or in the
 * external-data file beside it (the `location`, `offset`, `length` entries). Nothing is
 * copied or converted: a tensor's bytes are read where the file holds them.
 *
 * The reader (io/protobuf.h underneath) checks every length and count against the bytes
 * present, every external span against its file, and the byte size of each tensor against
 * its type and shape; it refuses external locations that leave the model's directory. Field
 * numbers are those of onnx.proto (ModelProto.graph 7, GraphProto.node 1 / initializer 5 /
 * input 11, NodeProto, AttributeProto, TensorProto, ValueInfoProto); other fields are skipped. */
#ifndef PP_IO_ONNX_H
#define PP_IO_ONNX_H

#include <stddef.h>
#include <stdint.h>

#define PP_ONNX_MAX_DIMS 8

/* TensorProto.DataType values the loader reads. */
enum {
    PP_ONNX_FLOAT = 1,
    PP_ONNX_UINT8 = 2,
    PP_ONNX_INT8 = 3,
    PP_ONNX_INT32 = 6,
    PP_ONNX_INT64 = 7,
    PP_ONNX_FLOAT16 = 10,
    PP_ONNX_BFLOAT16 = 16
};

typedef struct pp_onnx_tensor {
    const char *name;
    int dtype; /* TensorProto.DataType */
    int ndim;
    int64_t dims[PP_ONNX_MAX_DIMS];
    int64_t numel;
    const uint8_t *data; /* little-endian values, NULL when stored in a form not read (int32_data, strings) */
    size_t nbytes;
} pp_onnx_tensor;

typedef struct pp_onnx_attr {
    const char *name;
    int64_t i; /* INT attribute */
    float f;   /* FLOAT attribute */
    int has_i, has_f;
    int64_t ints[PP_ONNX_MAX_DIMS]; /* INTS attribute (strides, pads, perm ...) */
    int n_ints;                     /* its length; -1 when longer than PP_ONNX_MAX_DIMS or malformed */
    const char *s;                  /* STRING attribute (auto_pad ...), NULL when absent */
} pp_onnx_attr;

typedef struct pp_onnx_node {
    const char *name, *op_type, *domain; /* "" when absent */
    const char **in, **out;              /* an omitted optional input is "" */
    int n_in, n_out, n_attr;
    pp_onnx_attr *attr;
} pp_onnx_node;

typedef struct pp_onnx_value {
    const char *name;
    int ndim;
    int64_t dims[PP_ONNX_MAX_DIMS]; /* -1: a symbolic or unknown dimension */
} pp_onnx_value;

typedef struct pp_onnx_model pp_onnx_model;

/* Reads the model file PATH and maps the external-data files it names (relative to its folder). */
int pp_onnx_open(const char *path, pp_onnx_model **out, char *err);
/* Parses model bytes in memory (no external data may be named; the fuzzer's entry point). */
int pp_onnx_parse(const void *buf, size_t len, const char *label, pp_onnx_model **out, char *err);
void pp_onnx_close(pp_onnx_model *m);

const char *pp_onnx_label(const pp_onnx_model *m);
size_t pp_onnx_node_count(const pp_onnx_model *m);
const pp_onnx_node *pp_onnx_node_at(const pp_onnx_model *m, size_t i);
size_t pp_onnx_input_count(const pp_onnx_model *m);
const pp_onnx_value *pp_onnx_input_at(const pp_onnx_model *m, size_t i);
/* The constant tensor NAME (an initializer or a Constant node's output), or NULL. */
const pp_onnx_tensor *pp_onnx_constant(const pp_onnx_model *m, const char *name);
/* Attribute NAME of node n, or NULL. */
const pp_onnx_attr *pp_onnx_attr_find(const pp_onnx_node *n, const char *name);
/* Bytes per element of an ONNX data type, 0 for the types not read. */
int pp_onnx_dtype_size(int dtype);

#endif
