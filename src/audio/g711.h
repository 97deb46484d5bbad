/* g711: ITU-T G.711 μ-law and A-law companding (8-bit codes of 16-bit linear samples), the
 * telephone formats of /v1/twilio and the realtime endpoint's g711_ulaw / g711_alaw. */
#ifndef PP_AUDIO_G711_H
#define PP_AUDIO_G711_H

#include <stdint.h>

uint8_t pp_ulaw_encode(int16_t s);
int16_t pp_ulaw_decode(uint8_t u);
uint8_t pp_alaw_encode(int16_t s);
int16_t pp_alaw_decode(uint8_t a);

#endif
