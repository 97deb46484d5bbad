/* frame: the model's time step, which every layer shares: the codec turns 1920 samples at
 * 24 kHz (80 ms) into one column of codes, the LM takes one step per column, the server paces
 * conversations by it. */
#ifndef PP_BASE_FRAME_H
#define PP_BASE_FRAME_H

#include "personaplex.h" /* PP_SAMPLE_RATE, PP_FRAME_SAMPLES */

#define PP_FRAME_NS ((long long)PP_FRAME_SAMPLES * 1000000000LL / PP_SAMPLE_RATE) /* 80 ms */

#endif
