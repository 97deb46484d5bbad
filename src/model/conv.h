/* conv: Mimi's streaming convolutions (moshi modules/conv.py StreamingConv1d and
 * StreamingConvTranspose1d; causal, no dilation, weight norm already folded): the weights,
 * the state each one carries from call to call, and one streaming step.
 *
 * A Conv1d carries its last k−stride inputs (zeros after reset, or copies of the first input
 * column with replicate padding: pass PP_CONV_REPLICATE on the first call). A ConvTranspose1d
 * carries the k−stride outputs that overlap the next call. No layer adds lag: t inputs give
 * t/stride (Conv1d) or t·stride (ConvTranspose1d) outputs at once. */
#ifndef PP_MODEL_CONV_H
#define PP_MODEL_CONV_H

#include "backend/backend.h"
#include "model/codec_arena.h"

typedef struct mimi_conv {
    pp_conv c;      /* backend weights and shape */
    int transposed; /* ConvTranspose1d */
} mimi_conv;

/* Loads `<prefix>.weight` ([cout][cin][k], or [cin][cout/groups][k] when transposed) and,
 * when has_bias, `<prefix>.bias` [cout] into the arena. err names the key and both shapes. */
int pp_conv_load(codec_arena *a, const st_file *f, const char *prefix, int cin, int cout, int k, int stride, int groups,
                 int has_bias, int transposed, mimi_conv *out, char *err);

/* Outputs for t inputs. */
int pp_conv_out_len(const mimi_conv *c, int t);
/* Floats of state the conv carries between calls. */
size_t pp_conv_state_floats(const mimi_conv *c);
/* Floats of scratch one call on t inputs needs. */
size_t pp_conv_scratch_floats(const mimi_conv *c, int t);

/* One streaming call for rows->n conversations: x [n][cin][t] -> y [n][cout][pp_conv_out_len],
 * updating each row's state (backend.h pp_state_rows; base NULL for a conv without state).
 * scratch: n times pp_conv_scratch_floats. flags (PP_CONV_ACCUMULATE, PP_CONV_REPLICATE) apply
 * to Conv1d only. */
void pp_conv_step(pp_backend *be, const mimi_conv *c, const pp_state_rows *rows, const float *x, int t, float *y,
                  float *scratch, int flags);

#endif
