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

#include <cmath>

namespace {
constexpr size_t kChunk = PP_SAMPLE_RATE / 100;        // 10 ms, the module's unit
constexpr size_t kPendingMax = PP_AEC_FAR_MAX_MS / 10; // far chunks waiting for their near chunk
constexpr size_t kMaxLag = PP_AEC_MAX_DELAY_MS / 10;   // the coarse search, in chunks
constexpr size_t kRing = 256;                          // > kPendingMax + kMaxLag
constexpr size_t kMargin = 3; // the module is left this many chunks of delay to find itself
constexpr double kForget = 0.995;   // the envelopes' statistics: about 2 s
constexpr double kMinCorr = 0.3;    // a lag is taken once its envelopes correlate this well
constexpr size_t kRecheck = 50;     // chunks between looks at the best lag
static_assert(kRing > kPendingMax + kMaxLag + 1, "far ring too small");

// A chunk's level in dB: its envelope, which follows speech and noise alike.
double level_db(const float *x) {
    double e = 0;
    for (size_t i = 0; i < kChunk; i++) e += (double)x[i] * x[i];
    return 10 * std::log10(e / kChunk + 1e-8); // -80 dB: silence, not a deep dip
}
} // namespace

struct pp_aec {
    webrtc::AudioProcessing *apm = nullptr;
    webrtc::StreamConfig stream{PP_SAMPLE_RATE, 1};
    float ring[kRing][kChunk];  // far chunks by number modulo kRing
    double far_db[kRing];
    uint64_t written = 0, read = 0; // far chunks pushed; paired with a near chunk
    float partial[kChunk];          // a far chunk being filled
    size_t partial_len = 0;
    // Coarse delay: correlation of the near level with the far level lag chunks earlier.
    double corr[kMaxLag + 1] = {0}, mean_near = 0, mean_far = 0, var_near = 0, var_far = 0;
    size_t since_check = 0, shift = 0; // chunks the reference is taken back by
};

extern "C" int pp_aec_available(void) { return 1; }

extern "C" int pp_aec_create(pp_aec **out, char *err) {
    *out = nullptr;
    try {
        pp_aec *a = new (std::nothrow) pp_aec;
        if (!a) return pp_fail(err, PP_ENOMEM, "echo canceller: out of memory");
        webrtc::Config config;
        // The extended filter covers a long room response; the delay-agnostic mode tracks
        // what delay remains after the coarse shift.
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

// One non-finite sample would stay in WebRTC's filter state (and the delay tracker's means) for
// the rest of the call: it goes in as silence, as it goes to the Opus encoder.
static float finite_or_zero(float x) { return std::isfinite(x) ? x : 0.0f; }

extern "C" int pp_aec_far(pp_aec *a, const float *pcm, size_t n, char *err) {
    (void)err;
    while (n) {
        size_t take = kChunk - a->partial_len < n ? kChunk - a->partial_len : n;
        for (size_t i = 0; i < take; i++) a->partial[a->partial_len + i] = finite_or_zero(pcm[i]);
        a->partial_len += take, pcm += take, n -= take;
        if (a->partial_len < kChunk) break;
        size_t slot = (size_t)(a->written % kRing);
        std::memcpy(a->ring[slot], a->partial, sizeof a->partial);
        a->far_db[slot] = level_db(a->partial);
        a->written++;
        a->partial_len = 0;
        if (a->written - a->read > kPendingMax) a->read++; // the uplink stalled: drop the oldest
    }
    return PP_OK;
}

// Near chunk `level` paired with far chunk f: updates the correlations and, now and then,
// the shift to the lag whose envelopes match best.
static void track_delay(pp_aec *a, double level, uint64_t f) {
    double far_now = a->far_db[f % kRing];
    if (f == 0) a->mean_near = level, a->mean_far = far_now; // no start-up transient
    a->mean_near = kForget * a->mean_near + (1 - kForget) * level;
    a->mean_far = kForget * a->mean_far + (1 - kForget) * far_now;
    double dn = level - a->mean_near, df = far_now - a->mean_far;
    a->var_near = kForget * a->var_near + (1 - kForget) * dn * dn;
    a->var_far = kForget * a->var_far + (1 - kForget) * df * df;
    for (size_t lag = 0; lag <= kMaxLag && lag <= f; lag++)
        a->corr[lag] = kForget * a->corr[lag] + (1 - kForget) * dn * (a->far_db[(f - lag) % kRing] - a->mean_far);
    if (++a->since_check < kRecheck) return;
    a->since_check = 0;
    size_t best = 0;
    for (size_t lag = 1; lag <= kMaxLag; lag++)
        if (a->corr[lag] > a->corr[best]) best = lag;
    double norm = std::sqrt(a->var_near * a->var_far);
    if (norm > 0 && a->corr[best] / norm >= kMinCorr) a->shift = best > kMargin ? best - kMargin : 0;
}

extern "C" int pp_aec_near(pp_aec *a, float *pcm, size_t n, char *err) {
    if (n % kChunk) return pp_fail(err, PP_EINVAL, "echo canceller: %zu samples is not a whole number of 10 ms", n);
    for (size_t i = 0; i < n; i++) pcm[i] = finite_or_zero(pcm[i]);
    try {
        float reference[kChunk];
        for (size_t off = 0; off < n; off += kChunk) {
            float *near = pcm + off, *far = reference;
            std::memset(reference, 0, sizeof reference);
            if (a->read < a->written) { // the far chunk of this moment, taken back by the shift
                uint64_t f = a->read++;
                track_delay(a, level_db(near), f);
                if (a->shift <= f && a->written - (f - a->shift) <= kRing)
                    std::memcpy(reference, a->ring[(f - a->shift) % kRing], sizeof reference);
            }
            int rc = a->apm->ProcessReverseStream(&far, a->stream, a->stream, &far);
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
