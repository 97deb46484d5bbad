// aec: WebRTC's echo canceller behind the C API of aec.h.
#include "audio/aec.h"

extern "C" {
#include "base/err.h"
}

#include <cstdlib>
#include <cstring>
#include <new>

#ifdef PP_HAVE_AEC
#include <webrtc/modules/audio_processing/include/audio_processing.h>

namespace {
constexpr size_t kChunk = PP_AEC_RATE / 100; // 10 ms
constexpr size_t kFarMax = PP_AEC_RATE / 1000 * PP_AEC_FAR_MAX_MS;
} // namespace

struct pp_aec {
    webrtc::AudioProcessing *apm = nullptr;
    webrtc::StreamConfig stream{PP_AEC_RATE, 1};
    float far[kFarMax];     // queued downlink, oldest first
    size_t far_len = 0;
};

extern "C" int pp_aec_available(void) { return 1; }

extern "C" int pp_aec_create(pp_aec **out, char *err) {
    *out = nullptr;
    try {
        pp_aec *a = new (std::nothrow) pp_aec;
        if (!a) return pp_fail(err, PP_ENOMEM, "echo canceller: out of memory");
        webrtc::Config config;
        // The extended filter covers a long room response; the delay-agnostic mode finds the
        // network + jitter-buffer delay itself, which the server cannot measure.
        config.Set<webrtc::ExtendedFilter>(new webrtc::ExtendedFilter(true));
        config.Set<webrtc::DelayAgnostic>(new webrtc::DelayAgnostic(true));
        a->apm = webrtc::AudioProcessing::Create(config);
        webrtc::EchoCancellation *ec = a->apm ? a->apm->echo_cancellation() : nullptr;
        if (!ec || ec->Enable(true) != 0 || ec->set_suppression_level(webrtc::EchoCancellation::kHighSuppression) != 0 ||
            ec->enable_drift_compensation(false) != 0) {
            pp_aec_destroy(a);
            return pp_fail(err, PP_EUNSUPPORTED, "echo canceller: WebRTC audio processing refused its settings");
        }
        *out = a;
        return PP_OK;
    } catch (...) {
        return pp_fail(err, PP_ENOMEM, "echo canceller: cannot create the WebRTC audio processing module");
    }
}

extern "C" void pp_aec_destroy(pp_aec *a) {
    if (!a) return;
    delete a->apm;
    delete a;
}

extern "C" int pp_aec_far(pp_aec *a, const float *pcm, size_t n, char *err) {
    (void)err;
    if (n > kFarMax) {
        pcm += n - kFarMax;
        n = kFarMax;
    }
    if (a->far_len + n > kFarMax) { // the uplink stalled: keep the newest
        size_t drop = a->far_len + n - kFarMax;
        std::memmove(a->far, a->far + drop, (a->far_len - drop) * sizeof *a->far);
        a->far_len -= drop;
    }
    std::memcpy(a->far + a->far_len, pcm, n * sizeof *pcm);
    a->far_len += n;
    return PP_OK;
}

extern "C" int pp_aec_near(pp_aec *a, float *pcm, size_t n, char *err) {
    if (n % kChunk) return pp_fail(err, PP_EINVAL, "echo canceller: %zu samples is not a whole number of 10 ms", n);
    try {
        float silence[kChunk] = {0};
        for (size_t off = 0; off < n; off += kChunk) {
            float *far = a->far_len >= kChunk ? a->far : silence;
            float *near = pcm + off;
            int rc = a->apm->ProcessReverseStream(&far, a->stream, a->stream, &far);
            if (far != silence) {
                a->far_len -= kChunk;
                std::memmove(a->far, a->far + kChunk, a->far_len * sizeof *a->far);
            }
            // The delay hint is ignored by the delay-agnostic mode, but must be set.
            if (!rc) rc = a->apm->set_stream_delay_ms(0);
            if (!rc) rc = a->apm->ProcessStream(&near, a->stream, a->stream, &near);
            if (rc) return pp_fail(err, PP_EINVAL, "echo canceller: WebRTC audio processing error %d", rc);
        }
        return PP_OK;
    } catch (...) {
        return pp_fail(err, PP_ENOMEM, "echo canceller: WebRTC audio processing failed");
    }
}

#else // built without libwebrtc-audio-processing

struct pp_aec {
    int unused;
};

extern "C" int pp_aec_available(void) { return 0; }

extern "C" int pp_aec_create(pp_aec **out, char *err) {
    *out = nullptr;
    return pp_fail(err, PP_EUNSUPPORTED, "echo canceller: built without libwebrtc-audio-processing");
}

extern "C" void pp_aec_destroy(pp_aec *a) { (void)a; }

extern "C" int pp_aec_far(pp_aec *a, const float *pcm, size_t n, char *err) {
    (void)a, (void)pcm, (void)n;
    return pp_fail(err, PP_EUNSUPPORTED, "echo canceller: built without libwebrtc-audio-processing");
}

extern "C" int pp_aec_near(pp_aec *a, float *pcm, size_t n, char *err) {
    (void)a, (void)pcm, (void)n;
    return pp_fail(err, PP_EUNSUPPORTED, "echo canceller: built without libwebrtc-audio-processing");
}

#endif
