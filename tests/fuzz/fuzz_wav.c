/* fuzz_wav: any byte string is either refused by pp_wav_parse or yields samples that were all
 * read from inside the input (both channel modes); short clips at common rates also go through
 * the resampler to 24 kHz. ASan reports any stray access. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "audio/resample.h"
#include "audio/wav.h"
#include "base/err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile float sink; /* keeps the reads from being optimised away */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[PP_ERR_LEN];
    for (int how = PP_WAV_CHANNEL0; how <= PP_WAV_MIX; how++) {
        pp_wav w;
        if (pp_wav_parse(data, size, "fuzz", (pp_wav_channels)how, &w, err)) {
            if (w.pcm) abort();
            continue;
        }
        if (w.frames < 0 || (uint64_t)w.frames * (uint64_t)w.channels * (uint64_t)(w.bits / 8) > size) abort();
        float s = 0;
        for (int64_t i = 0; i < w.frames; i++) s += w.pcm[i];
        /* Odd rates build large filter tables: keep the fuzzer fast with common ones. */
        if (w.frames <= 4096 && (w.rate == 16000 || w.rate == 44100 || w.rate == 48000)) {
            float *out;
            int64_t n;
            if (pp_resample(w.pcm, w.frames, w.rate, 24000, &out, &n, err) == 0) {
                for (int64_t i = 0; i < n; i++) s += out[i];
                free(out);
            }
        }
        sink = s;
        pp_wav_free(&w);
    }
    return 0;
}
