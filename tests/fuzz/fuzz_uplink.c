/* fuzz_uplink: any byte stream pushed into the uplink (in chunks picked by byte 0) yields
 * only whole frames of finite samples, never more buffered audio than the cap, and no crash
 * or leak, whether libopus accepts the packets or not. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "audio/opus.h"
#include "base/err.h"
#include "base/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP (4 * PP_FRAME_SAMPLES)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    pp_log_set_level(PP_LOG_ERROR);
    char err[PP_ERR_LEN];
    pp_uplink *u;
    if (pp_uplink_open(&u, CAP, err)) abort();
    size_t chunk = 1 + data[0] % 32 * 31;
    static float frame[PP_FRAME_SAMPLES];
    for (size_t at = 1; at < size; at += chunk) {
        size_t n = size - at < chunk ? size - at : chunk;
        if (pp_uplink_push(u, data + at, n, err)) break;
        if (pp_uplink_buffered(u) > CAP) abort();
        if (data[0] & 1) continue; /* odd seeds let the buffer fill up */
        while (pp_uplink_frame(u, frame))
            for (int i = 0; i < PP_FRAME_SAMPLES; i++)
                if (!isfinite(frame[i])) abort();
    }
    pp_uplink_close(u);
    return 0;
}
