/* frame: the model's time step, which every layer shares: the codec turns 1920 samples at
 * 24 kHz (80 ms) into one column of codes, the LM takes one step per column, the server paces
 * conversations by it. */
#ifndef PP_BASE_FRAME_H
#define PP_BASE_FRAME_H

#include "personaplex.h" /* PP_SAMPLE_RATE, PP_FRAME_SAMPLES */

#define PP_FRAME_NS ((long long)PP_FRAME_SAMPLES * 1000000000LL / PP_SAMPLE_RATE) /* 80 ms */

/* The sum of squares of one frame's samples (echo metrics, speech detection). */
static inline double pp_frame_energy(const float *pcm) {
    double e = 0;
    for (int i = 0; i < PP_FRAME_SAMPLES; i++) e += (double)pcm[i] * pcm[i];
    return e;
}

#endif
