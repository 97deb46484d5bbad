// spm: C API over libsentencepiece (see spm.h). Every extern "C" function catches all
// exceptions: C callers only ever see PP_E* codes.
#include "text/spm.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

extern "C" {
#include "base/err.h"
}

// Exported by libsentencepiece but not declared in its public headers.
namespace sentencepiece {
namespace logging {
int GetMinLogLevel();
void SetMinLogLevel(int v);
} // namespace logging
} // namespace sentencepiece

struct pp_spm {
    sentencepiece::SentencePieceProcessor sp;
};

namespace {

const char kSystemTag[] = "<system>";
const char kSpace[] = "\xe2\x96\x81"; // U+2581, SentencePiece's word-boundary mark

int load_with(pp_spm **out, const char *what, char *err,
              sentencepiece::util::Status (*load)(sentencepiece::SentencePieceProcessor &,
                                                  const void *, size_t),
              const void *a, size_t b) {
    *out = nullptr;
    try {
        pp_spm *s = new pp_spm;
        sentencepiece::util::Status st = load(s->sp, a, b);
        if (!st.ok()) {
            delete s;
            return pp_fail(err, PP_EFORMAT, "spm: cannot load %s: %s", what, st.ToString().c_str());
        }
        *out = s;
        return 0;
    } catch (const std::bad_alloc &) {
        return pp_fail(err, PP_ENOMEM, "spm: out of memory loading %s", what);
    } catch (const std::exception &e) {
        return pp_fail(err, PP_EFORMAT, "spm: cannot load %s: %s", what, e.what());
    } catch (...) {
        return pp_fail(err, PP_EFORMAT, "spm: cannot load %s", what);
    }
}

// Bytes of the whitespace character Python's str.strip() removes at s[i], 0 if none: ASCII's
// space, \t \n \v \f \r and \x1c..\x1f, and U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028,
// U+2029, U+202F, U+205F, U+3000 (what the reference strips before wrapping a prompt).
size_t blank_at(const std::string &s, size_t i) {
    const unsigned char *p = (const unsigned char *)s.data() + i;
    const size_t left = s.size() - i;
    if (p[0] == ' ' || (p[0] >= '\t' && p[0] <= '\r') || (p[0] >= 0x1c && p[0] <= 0x1f)) return 1;
    if (left >= 2 && p[0] == 0xC2 && (p[1] == 0x85 || p[1] == 0xA0)) return 2;
    if (left < 3) return 0;
    const unsigned cp = (p[0] & 0x0Fu) << 12 | (p[1] & 0x3Fu) << 6 | (p[2] & 0x3Fu);
    if ((p[0] & 0xF0) != 0xE0 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
    return cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
                   cp == 0x205F || cp == 0x3000
               ? 3
               : 0;
}

std::string wrap(const char *prompt) {
    std::string s(prompt);
    size_t b = 0, e = s.size();
    for (size_t n; b < e && (n = blank_at(s, b));) b += n;
    while (e > b) { // a blank is at most 3 bytes: the last character's start, at most 2 back, is checked
        size_t start = e - 1;
        while (start > b && e - start < 3 && ((unsigned char)s[start] & 0xC0) == 0x80) start--;
        if (blank_at(s, start) != e - start) break;
        e = start;
    }
    s = s.substr(b, e - b);
    if (s.empty()) return s;
    const size_t n = sizeof kSystemTag - 1;
    bool tagged = s.size() >= n && s.compare(0, n, kSystemTag) == 0 &&
                  s.compare(s.size() - n, n, kSystemTag) == 0;
    return tagged ? s : std::string(kSystemTag) + " " + s + " " + kSystemTag;
}

int encode_into(const pp_spm *s, const std::string &text, int32_t *ids, size_t cap, size_t *n,
                const char *what, char *err) {
    std::vector<int> v;
    sentencepiece::util::Status st = s->sp.Encode(text, &v);
    if (!st.ok()) return pp_fail(err, PP_EINVAL, "spm: cannot encode %s: %s", what, st.ToString().c_str());
    if (v.size() > cap)
        return pp_fail(err, PP_EFULL, "spm: %s is %zu tokens, over the limit of %zu", what, v.size(),
                       cap);
    for (size_t i = 0; i < v.size(); i++) ids[i] = v[i];
    *n = v.size();
    return 0;
}

// Built-in training text for the demo tokenizer: plain sentences of conversational English,
// enough for a few hundred pieces.
const char *const kDemoText[] = {
    "<system> You are a helpful voice assistant. Keep your answers short and friendly. <system>",
    "Hello there, how are you doing today?",
    "I am doing well, thank you for asking.",
    "What would you like to talk about this morning?",
    "Could you tell me a little more about the weather where you live?",
    "It has been raining all week, but the sun came out this afternoon.",
    "That sounds lovely. I hope the garden is enjoying the water.",
    "Yes, the tomatoes and the beans are growing very fast now.",
    "Do you have any plans for the weekend with your family?",
    "We might drive to the coast and walk along the beach.",
    "Remember to bring a warm jacket, because the wind can be cold near the sea.",
    "Thank you, that is good advice. What time is it right now?",
    "It is a quarter past ten, so there is still plenty of time before lunch.",
    "Can you help me write a short note to my neighbour?",
    "Of course. Tell me what you want to say and I will put it into words.",
    "Please ask them to water the plants while we are away on holiday.",
    "Here is a first draft: dear neighbour, would you mind watering our plants this week?",
    "Perfect, that is exactly what I wanted. Thanks a lot for your help.",
    "You are welcome. Is there anything else I can do for you?",
    "Maybe later. I need to make a phone call and then cook dinner.",
    "Good luck with dinner, and enjoy the rest of your day.",
    "The numbers one, two, three, four, five, six, seven, eight, nine and ten.",
    "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday and Sunday.",
    "Questions, answers, stories, ideas, music, books, science and history.",
    // Every printable ASCII character, so that no prompt typed on a keyboard maps to <unk>.
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz 0123456789",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
};

class DemoIterator : public sentencepiece::SentenceIterator {
  public:
    bool done() const override { return i_ >= sizeof kDemoText / sizeof *kDemoText; }
    void Next() override {
        i_++;
        if (!done()) s_ = kDemoText[i_];
    }
    const std::string &value() const override { return s_; }
    sentencepiece::util::Status status() const override { return sentencepiece::util::Status(); }

  private:
    size_t i_ = 0;
    std::string s_ = kDemoText[0];
};

} // namespace

extern "C" {

int pp_spm_load_file(pp_spm **out, const char *path, char *err) {
    return load_with(
        out, path, err,
        [](sentencepiece::SentencePieceProcessor &sp, const void *p, size_t) {
            return sp.Load(static_cast<const char *>(p));
        },
        path, 0);
}

int pp_spm_load_memory(pp_spm **out, const void *data, size_t len, char *err) {
    return load_with(
        out, "model from memory", err,
        [](sentencepiece::SentencePieceProcessor &sp, const void *p, size_t n) {
            return sp.LoadFromSerializedProto(
                absl::string_view(static_cast<const char *>(p), n));
        },
        data, len);
}

void pp_spm_free(pp_spm *s) { delete s; }

int pp_spm_vocab_size(const pp_spm *s) {
    try {
        return s->sp.GetPieceSize();
    } catch (...) {
        return 0;
    }
}

int pp_spm_encode(const pp_spm *s, const char *text, int32_t *ids, size_t cap, size_t *n,
                  char *err) {
    *n = 0;
    try {
        return encode_into(s, text, ids, cap, n, "text", err);
    } catch (const std::bad_alloc &) {
        return pp_fail(err, PP_ENOMEM, "spm: out of memory encoding text");
    } catch (...) {
        return pp_fail(err, PP_EINVAL, "spm: cannot encode text");
    }
}

int pp_spm_piece(const pp_spm *s, int id, char *out, size_t cap, char *err) {
    if (cap) out[0] = 0;
    try {
        if (id < 0 || id >= s->sp.GetPieceSize())
            return pp_fail(err, PP_EINVAL, "spm: token id %d outside the vocabulary (0..%d)", id,
                           s->sp.GetPieceSize() - 1);
        std::string p = s->sp.IdToPiece(id);
        // A byte-fallback piece is spelled "<0xHH>" and stands for that one byte of a character
        // the vocabulary lacks: the client gets the byte, never the spelling.
        if (s->sp.IsByte(id))
            p = std::string(1, static_cast<char>(std::stoi(p.substr(3, 2), nullptr, 16)));
        for (size_t at; (at = p.find(kSpace)) != std::string::npos;)
            p.replace(at, sizeof kSpace - 1, " ");
        if (p.size() + 1 > cap)
            return pp_fail(err, PP_EFULL, "spm: piece of id %d needs %zu bytes, buffer has %zu", id,
                           p.size() + 1, cap);
        memcpy(out, p.c_str(), p.size() + 1);
        return 0;
    } catch (...) {
        return pp_fail(err, PP_ENOMEM, "spm: cannot read piece %d", id);
    }
}

int pp_spm_wrap_prompt(const char *prompt, char **out, char *err) {
    *out = nullptr;
    try {
        std::string w = wrap(prompt);
        char *c = static_cast<char *>(malloc(w.size() + 1));
        if (!c) return pp_fail(err, PP_ENOMEM, "spm: out of memory wrapping the prompt");
        memcpy(c, w.c_str(), w.size() + 1);
        *out = c;
        return 0;
    } catch (...) {
        return pp_fail(err, PP_ENOMEM, "spm: out of memory wrapping the prompt");
    }
}

int pp_spm_encode_prompt(const pp_spm *s, const char *prompt, int32_t *ids, size_t max_tokens,
                         size_t *n, char *err) {
    *n = 0;
    try {
        std::string w = wrap(prompt);
        if (w.empty()) return 0;
        return encode_into(s, w, ids, max_tokens, n, "text prompt", err);
    } catch (const std::bad_alloc &) {
        return pp_fail(err, PP_ENOMEM, "spm: out of memory encoding the text prompt");
    } catch (...) {
        return pp_fail(err, PP_EINVAL, "spm: cannot encode the text prompt");
    }
}

int pp_spm_make_demo(int vocab_size, void **model, size_t *len, char *err) {
    *model = nullptr;
    *len = 0;
    if (vocab_size < PP_SPM_DEMO_MIN_VOCAB || vocab_size > PP_SPM_DEMO_MAX_VOCAB)
        return pp_fail(err, PP_EINVAL, "spm: demo vocab_size %d outside %d..%d", vocab_size,
                       PP_SPM_DEMO_MIN_VOCAB, PP_SPM_DEMO_MAX_VOCAB);
    try {
        // One thread and no sampling or shuffling of the input: the same bytes on every run.
        std::string args = "--model_type=unigram --vocab_size=" + std::to_string(vocab_size) +
                           " --num_threads=1 --input_sentence_size=0"
                           " --shuffle_input_sentence=false"
                           " --character_coverage=1.0 --unk_id=0 --bos_id=1 --eos_id=2"
                           " --pad_id=3 --user_defined_symbols=<system>";
        DemoIterator it;
        std::string proto;
        // The trainer logs its command line at INFO whatever the flags say: silence it.
        int level = sentencepiece::logging::GetMinLogLevel();
        sentencepiece::logging::SetMinLogLevel(2);
        sentencepiece::util::Status st =
            sentencepiece::SentencePieceTrainer::Train(args, &it, &proto);
        sentencepiece::logging::SetMinLogLevel(level);
        if (!st.ok())
            return pp_fail(err, PP_EINVAL, "spm: demo training failed: %s", st.ToString().c_str());
        void *m = malloc(proto.size());
        if (!m) return pp_fail(err, PP_ENOMEM, "spm: out of memory for the demo model");
        memcpy(m, proto.data(), proto.size());
        *model = m;
        *len = proto.size();
        return 0;
    } catch (const std::bad_alloc &) {
        return pp_fail(err, PP_ENOMEM, "spm: out of memory training the demo model");
    } catch (const std::exception &e) {
        return pp_fail(err, PP_EINVAL, "spm: demo training failed: %s", e.what());
    } catch (...) {
        return pp_fail(err, PP_EINVAL, "spm: demo training failed");
    }
}

} // extern "C"
