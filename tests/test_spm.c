/* test_spm: the demo tokenizer trains to the same bytes twice, loads from memory and from a
 * file, round-trips text through ids and pieces, wraps prompts as lm.md §6.3 says and
 * enforces the prompt length bound; byte-fallback pieces give their bytes, which pp_utf8_join
 * joins into whole characters. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "test.h"
#include "text/spm.h"
#include "text/utf8.h"

#define VOCAB 200

/* Joins the pieces of ids (with "▁" already turned into spaces by pp_spm_piece). */
static void detok(const pp_spm *s, const int32_t *ids, size_t n, char *out, size_t cap) {
    char err[PP_ERR_LEN], piece[256];
    out[0] = 0;
    for (size_t i = 0; i < n; i++)
        if (pp_spm_piece(s, ids[i], piece, sizeof piece, err) == 0 &&
            strlen(out) + strlen(piece) < cap)
            strcat(out, piece);
}

static void test_wrap(void) {
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"You are kind.", "<system> You are kind. <system>"},
        {"  \t You are kind.\n", "<system> You are kind. <system>"},
        {"<system> Already wrapped <system>", "<system> Already wrapped <system>"},
        {" <system>x<system> ", "<system>x<system>"},
        {"<system> only at the start", "<system> <system> only at the start <system>"},
        {"only at the end <system>", "<system> only at the end <system> <system>"},
        {"<system>", "<system>"},
        {"", ""},
        {" \n\t\r ", ""},
        /* Unicode whitespace at the edges goes as Python's str.strip() takes it: before, an
         * ideographic space or NBSP outside the tags wrapped them again, and U+0085 (NEL) stayed
         * to become <unk>, id 0 */
        {"\xe3\x80\x80<system> Be kind. <system>\xe3\x80\x80", "<system> Be kind. <system>"},
        {"<system> Be kind. <system>\xc2\xa0", "<system> Be kind. <system>"},
        {"\xc2\x85" "Be kind.\xc2\x85", "<system> Be kind. <system>"},
        {"\xe2\x80\x83 x\xe2\x80\x83y \xe2\x81\x9f\xe1\x9a\x80", "<system> x\xe2\x80\x83y <system>"},
        {"\xc3\xa9", "<system> \xc3\xa9 <system>"},
        {"\xf0\x9f\x98\x80 \xe2\x80\xa8", "<system> \xf0\x9f\x98\x80 <system>"},
    };
    char err[PP_ERR_LEN];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *w = NULL;
        int rc = pp_spm_wrap_prompt(cases[i].in, &w, err);
        TEST_COND(cases[i].in, rc == 0 && w && strcmp(w, cases[i].out) == 0);
        if (w && strcmp(w, cases[i].out) != 0) fprintf(stderr, "  got \"%s\"\n", w);
        free(w);
    }
}

/* The demo model with the 256 byte-fallback pieces <0x00>..<0xFF> appended (ids vocab + byte,
 * as the real tokenizer has them, which spells "’" U+2019 <0xE2> <0x80> <0x99>) and its
 * trainer spec's byte_fallback set: serialized protobuf fields appended to a message merge
 * into it. */
static unsigned char *with_byte_pieces(const void *model, size_t len, size_t *out_len) {
    enum { PIECE = 17 };
    unsigned char *m = malloc(len + 256 * PIECE + 5);
    if (!m) abort();
    memcpy(m, model, len);
    size_t n = len;
    for (int byte = 0; byte < 256; byte++) {
        /* pieces (field 1): {piece (1) = "<0xHH>", score (2) = 0.0f, type (3) = BYTE (6)} */
        static const unsigned char head[] = {0x0a, PIECE - 2, 0x0a, 6};
        static const unsigned char tail[] = {0x15, 0, 0, 0, 0, 0x18, 6};
        char spelling[7];
        snprintf(spelling, sizeof spelling, "<0x%02X>", byte);
        memcpy(m + n, head, sizeof head), n += sizeof head;
        memcpy(m + n, spelling, 6), n += 6;
        memcpy(m + n, tail, sizeof tail), n += sizeof tail;
    }
    static const unsigned char spec[] = {0x12, 3, 0x98, 0x02, 1}; /* trainer_spec (2): byte_fallback (35) = true */
    memcpy(m + n, spec, sizeof spec), n += sizeof spec;
    *out_len = n;
    return m;
}

/* Byte-fallback ids give their byte (they were sent as the spelling "<0xE2>"), and the session's
 * joining hands on the character only once its last byte has come, whole. */
static void check_byte_fallback(const void *model, size_t len, int vocab) {
    char err[PP_ERR_LEN], piece[64];
    size_t n;
    unsigned char *m = with_byte_pieces(model, len, &n);
    pp_spm *s = NULL;
    TEST_COND("model with byte pieces loads", pp_spm_load_memory(&s, m, n, err) == 0 && s &&
                                                  pp_spm_vocab_size(s) == vocab + 256);
    static const unsigned char quote[3] = {0xe2, 0x80, 0x99};
    int bytes_ok = 1;
    for (int i = 0; s && i < 3; i++)
        bytes_ok &= pp_spm_piece(s, vocab + quote[i], piece, sizeof piece, err) == 0 &&
                    (unsigned char)piece[0] == quote[i] && !piece[1];
    TEST_COND("a byte-fallback piece is its byte, not its spelling", bytes_ok);
    pp_utf8_carry carry = {0};
    char out[PP_UTF8_JOIN_MAX(8)];
    size_t a = pp_utf8_join(&carry, "it\xe2", 3, out);
    size_t b = pp_utf8_join(&carry, "\x80", 1, out + a);
    size_t c = pp_utf8_join(&carry, "\x99s", 2, out + a + b);
    TEST_COND("a character over three pieces comes whole with its last byte",
              a == 2 && b == 0 && c == 4 && !memcmp(out, "it\xe2\x80\x99s", 6) && carry.len == 0);
    size_t d = pp_utf8_join(&carry, "\xe2\x80", 2, out);
    size_t e = pp_utf8_join(&carry, " x", 2, out + d);
    TEST_COND("a character that never completes becomes U+FFFD per byte",
              d == 0 && e == 8 && !memcmp(out, "\xef\xbf\xbd\xef\xbf\xbd x", 8));
    pp_spm_free(s);
    free(m);
}

static void test_model(void) {
    char err[PP_ERR_LEN];
    void *m1 = NULL, *m2 = NULL;
    size_t n1 = 0, n2 = 0;
    TEST_COND("demo trains", pp_spm_make_demo(VOCAB, &m1, &n1, err) == 0 && n1 > 1000);
    TEST_COND("demo trains again", pp_spm_make_demo(VOCAB, &m2, &n2, err) == 0);
    TEST_COND("demo model is deterministic", n1 == n2 && m1 && m2 && memcmp(m1, m2, n1) == 0);
    free(m2);
    m2 = NULL;
    TEST_COND("bad demo size refused", pp_spm_make_demo(5, &m2, &n2, err) == PP_EINVAL && !m2);
    if (!m1) return;

    pp_spm *s = NULL;
    TEST_COND("loads from memory", pp_spm_load_memory(&s, m1, n1, err) == 0);
    if (!s) {
        free(m1);
        return;
    }
    TEST_COND("vocab size", pp_spm_vocab_size(s) == VOCAB);
    char piece[64];
    TEST_COND("id 3 is <pad>", pp_spm_piece(s, 3, piece, sizeof piece, err) == 0 &&
                                   strcmp(piece, "<pad>") == 0);
    TEST_COND("id 0 is <unk>", pp_spm_piece(s, 0, piece, sizeof piece, err) == 0 &&
                                   strcmp(piece, "<unk>") == 0);
    TEST_COND("id out of range", pp_spm_piece(s, VOCAB, piece, sizeof piece, err) == PP_EINVAL &&
                                     pp_spm_piece(s, -1, piece, sizeof piece, err) == PP_EINVAL);

    /* Round trip: pieces joined give back the text with one leading space (from "▁"). */
    const char *text = "Hello there, how is the weather this morning?";
    int32_t ids[256];
    size_t n = 0;
    TEST_COND("encode", pp_spm_encode(s, text, ids, 256, &n, err) == 0 && n > 3 && n < strlen(text));
    int in_range = 1, no_special = 1;
    for (size_t i = 0; i < n; i++) {
        in_range &= ids[i] >= 0 && ids[i] < VOCAB;
        no_special &= ids[i] != 1 && ids[i] != 2; /* no BOS/EOS added */
    }
    TEST_COND("ids in range, no BOS/EOS", in_range && no_special);
    char back[1024];
    detok(s, ids, n, back, sizeof back);
    TEST_COND("round trip", back[0] == ' ' && strcmp(back + 1, text) == 0);
    int has_space = 0;
    for (size_t i = 0; i < n; i++)
        if (pp_spm_piece(s, ids[i], piece, sizeof piece, err) == 0 && piece[0] == ' ') has_space = 1;
    TEST_COND("pieces carry their leading space", has_space);
    TEST_COND("small piece buffer", pp_spm_piece(s, ids[0], piece, 1, err) == PP_EFULL);
    const char *ascii = "Quick! ~`@#$%^&*()_+-={}[]|\\:;\"'<>,.?/ 0123456789 XYZ";
    TEST_COND("printable ASCII encodes", pp_spm_encode(s, ascii, ids, 256, &n, err) == 0);
    int unk = 0;
    for (size_t i = 0; i < n; i++) unk |= ids[i] == 0;
    detok(s, ids, n, back, sizeof back);
    TEST_COND("printable ASCII never maps to <unk>", !unk && strcmp(back + 1, ascii) == 0);
    pp_spm_encode(s, text, ids, 256, &n, err);
    size_t m;
    TEST_COND("encode bound", pp_spm_encode(s, text, ids, n - 1, &m, err) == PP_EFULL && m == 0);

    /* The prompt: wrapped, "<system>" is one piece in the demo model, bounded length. */
    size_t np = 0;
    TEST_COND("prompt encodes", pp_spm_encode_prompt(s, "  Be kind.  ", ids, 256, &np, err) == 0);
    detok(s, ids, np, back, sizeof back);
    TEST_COND("prompt decodes to the wrapped text", strcmp(back, " <system> Be kind. <system>") == 0);
    if (strcmp(back, " <system> Be kind. <system>") != 0) fprintf(stderr, "  got \"%s\"\n", back);
    int32_t direct[256];
    size_t nd = 0;
    pp_spm_encode(s, "<system> Be kind. <system>", direct, 256, &nd, err);
    TEST_COND("prompt = encode(wrap(prompt))", nd == np && memcmp(direct, ids, np * sizeof *ids) == 0);
    TEST_COND("empty prompt: zero tokens", pp_spm_encode_prompt(s, " \n ", ids, 256, &np, err) == 0 && np == 0);
    err[0] = 0;
    TEST_COND("prompt over the limit", pp_spm_encode_prompt(s, "You are a wise and friendly teacher.",
                                                            ids, 4, &np, err) == PP_EFULL &&
                                           np == 0 && strstr(err, "limit of 4") != NULL);

    /* Same model through a file. */
    FILE *f = fopen("test_spm_demo.model", "wb");
    if (f) {
        fwrite(m1, 1, n1, f);
        fclose(f);
    }
    pp_spm *s2 = NULL;
    TEST_COND("loads from file", pp_spm_load_file(&s2, "test_spm_demo.model", err) == 0 && s2 &&
                                     pp_spm_vocab_size(s2) == VOCAB);
    remove("test_spm_demo.model");
    pp_spm_free(s2);
    err[0] = 0;
    TEST_COND("missing file", pp_spm_load_file(&s2, "/nonexistent/x.model", err) < 0 && !s2 &&
                                  strstr(err, "/nonexistent/x.model") != NULL);
    TEST_COND("garbage model", pp_spm_load_memory(&s2, "not a model", 11, err) < 0 && !s2);

    check_byte_fallback(m1, n1, VOCAB);
    pp_spm_free(s);
    free(m1);
}

/* Both ends of the supported demo range give exactly the requested size. */
static void test_demo_range(void) {
    char err[PP_ERR_LEN];
    int sizes[] = {PP_SPM_DEMO_MIN_VOCAB, PP_SPM_DEMO_MAX_VOCAB};
    for (int i = 0; i < 2; i++) {
        void *m = NULL;
        size_t n = 0;
        pp_spm *s = NULL;
        int rc = pp_spm_make_demo(sizes[i], &m, &n, err);
        if (rc == 0) rc = pp_spm_load_memory(&s, m, n, err);
        TEST_COND("demo range end", rc == 0 && pp_spm_vocab_size(s) == sizes[i]);
        if (rc) fprintf(stderr, "  %s\n", err);
        pp_spm_free(s);
        free(m);
    }
    void *m = NULL;
    size_t n;
    TEST_COND("past the range refused",
              pp_spm_make_demo(PP_SPM_DEMO_MAX_VOCAB + 1, &m, &n, err) == PP_EINVAL && !m);
}

int main(void) {
    test_wrap();
    test_demo_range();
    test_model();
    return test_report();
}
