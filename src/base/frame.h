/* frame: the model's time step, which every layer shares: the codec turns 1920 samples at
 * 24 kHz (80 ms) into one column of codes, the LM takes one step per column, the server paces
 * conversations by it. */
#ifndef PP_BASE_FRAME_H
#define PP_BASE_FRAME_H

#define PP_SAMPLE_RATE 24000  /* Hz: Mimi's rate, the uplink's and the downlink's */
#define PP_FRAME_SAMPLES 1920 /* samples per frame */
#define PP_FRAME_NS ((long long)PP_FRAME_SAMPLES * 1000000000LL / PP_SAMPLE_RATE) /* 80 ms */

#endif
