/* test_json: the strict JSON parser on valid documents (values, escapes, numbers) and on
 * documents RFC 8259 refuses; every refusal must say at which byte. */
#include <string.h>

#include "base/err.h"
#include "base/json.h"
#include "test.h"

static pp_json_doc *parse(const char *text) {
    pp_json_doc *doc = NULL;
    char err[PP_ERR_LEN] = "";
    if (pp_json_parse(text, strlen(text), &doc, err)) return NULL;
    return doc;
}

/* A document that must be refused with a message naming a byte offset. */
static void check_bad(const char *text, size_t len, const char *why) {
    pp_json_doc *doc = NULL;
    char err[PP_ERR_LEN] = "";
    int rc = pp_json_parse(text, len, &doc, err);
    int ok = rc < 0 && !doc && strstr(err, "at byte") != NULL;
    if (!ok) fprintf(stderr, "accepted or bad message (%s): '%s' -> '%s'\n", why, text, err);
    TEST_COND(why, ok);
    pp_json_free(doc);
}

static void test_values(void) {
    pp_json_doc *doc = parse(" {\"a\": [1, -2, 3.5, 1e3, true, false, null], \"b\": {\"c\": \"d\"}, \"e\": []} \n");
    TEST_COND("object parses", doc != NULL);
    if (!doc) return;
    const pp_json *r = pp_json_root(doc), *a = pp_json_get(r, "a");
    TEST_COND("root is an object of 3", r->type == PP_JSON_OBJECT && r->count == 3);
    TEST_COND("array of 7", a && a->type == PP_JSON_ARRAY && a->count == 7);
    if (!a || a->type != PP_JSON_ARRAY || a->count != 7) {
        pp_json_free(doc);
        return;
    }
    TEST_COND("1 is integer", a->items[0]->is_integer && a->items[0]->integer == 1);
    TEST_COND("-2 is integer", a->items[1]->is_integer && a->items[1]->integer == -2);
    TEST_COND("3.5 is not integer", !a->items[2]->is_integer && a->items[2]->number == 3.5);
    TEST_COND("1e3 is a number, not integer", !a->items[3]->is_integer && a->items[3]->number == 1000.0);
    TEST_COND("true", a->items[4]->type == PP_JSON_BOOL && a->items[4]->boolean == 1);
    TEST_COND("false", a->items[5]->type == PP_JSON_BOOL && a->items[5]->boolean == 0);
    TEST_COND("null", a->items[6]->type == PP_JSON_NULL);
    const pp_json *c = pp_json_get(pp_json_get(r, "b"), "c");
    TEST_COND("nested string", c && c->type == PP_JSON_STRING && !strcmp(c->string, "d") && c->string_len == 1);
    const pp_json *e = pp_json_get(r, "e");
    TEST_COND("empty array", e && e->type == PP_JSON_ARRAY && e->count == 0);
    TEST_COND("missing key", pp_json_get(r, "zz") == NULL && pp_json_get(a, "a") == NULL);
    TEST_COND("no duplicate", pp_json_dup_key(r) == NULL);
    pp_json_free(doc);
}

static void test_integers(void) {
    pp_json_doc *doc = parse("[9223372036854775807, -9223372036854775808, 9223372036854775808, -0, 12345678901234]");
    TEST_COND("integer array parses", doc != NULL);
    if (!doc) return;
    pp_json *const *it = pp_json_root(doc)->items;
    TEST_COND("INT64_MAX exact", it[0]->is_integer && it[0]->integer == INT64_MAX);
    TEST_COND("INT64_MIN exact", it[1]->is_integer && it[1]->integer == INT64_MIN);
    TEST_COND("2^63 does not fit", !it[2]->is_integer && it[2]->number == 9223372036854775808.0);
    TEST_COND("-0 is integer 0", it[3]->is_integer && it[3]->integer == 0);
    TEST_COND("large integer exact", it[4]->integer == 12345678901234LL);
    pp_json_free(doc);
}

static void test_strings(void) {
    pp_json_doc *doc = parse("[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\", \"\\u00e9\\u20AC\", \"\\ud83d\\ude00\", \"h\xc3\xa9\"]");
    TEST_COND("escapes parse", doc != NULL);
    if (!doc) return;
    pp_json *const *it = pp_json_root(doc)->items;
    TEST_COND("simple escapes", !strcmp(it[0]->string, "\"\\/\b\f\n\r\t") && it[0]->string_len == 8);
    TEST_COND("BMP \\u escapes to UTF-8", !strcmp(it[1]->string, "\xc3\xa9\xe2\x82\xac"));
    TEST_COND("surrogate pair to 4-byte UTF-8", !strcmp(it[2]->string, "\xf0\x9f\x98\x80"));
    TEST_COND("raw UTF-8 kept", !strcmp(it[3]->string, "h\xc3\xa9"));
    pp_json_free(doc);
}

static void test_dups_and_depth(void) {
    pp_json_doc *doc = parse("{\"x\": 1, \"y\": 2, \"x\": 3}");
    TEST_COND("duplicate keys are kept", doc && pp_json_root(doc)->count == 3);
    if (doc) {
        const char *d = pp_json_dup_key(pp_json_root(doc));
        TEST_COND("duplicate key found", d && !strcmp(d, "x"));
        TEST_COND("first match wins", pp_json_get(pp_json_root(doc), "x")->integer == 1);
    }
    pp_json_free(doc);

    char deep[200];
    memset(deep, '[', 64);
    memset(deep + 64, ']', 64);
    deep[128] = 0;
    doc = parse(deep);
    TEST_COND("depth 64 accepted", doc != NULL);
    pp_json_free(doc);
    memset(deep, '[', 65);
    memset(deep + 65, ']', 65);
    deep[130] = 0;
    check_bad(deep, 130, "depth 65 refused");
}

static void test_invalid(void) {
    static const char *bad[] = {
        "",             "  ",          "{",            "}",           "[1,]",         "[,1]",
        "{\"a\"}",      "{\"a\":}",    "{\"a\":1,}",   "{a:1}",       "{'a':1}",      "[01]",
        "[-01]",        "[1.]",        "[.5]",         "[1e]",        "[1e+]",        "[+1]",
        "[-]",          "[0x10]",      "[NaN]",        "[Infinity]",  "[1e999]",      "[tru]",
        "[nul]",        "[True]",      "\"abc",        "\"\\x\"",     "\"\\u12\"",    "\"\\u12g4\"",
        "\"\\ud800\"",  "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"\\u0000\"", "\"\t\"",    "\"a\nb\"",
        "[1] x",        "{} {}",       "[1]]",         "\xef\xbb\xbf[1]", "[1 2]",     "{\"a\" 1}",
        "\"\xc3\"",     "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "\"\xff\"", "\"\x80\"",
        "\"\xe2\x82\"", "//c\n1",      "[1,\v2]",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) check_bad(bad[i], strlen(bad[i]), bad[i]);
    check_bad("[1]\0", 4, "embedded NUL after the value");
    check_bad("\"a\0b\"", 5, "raw NUL inside a string");
    /* the length bounds the parse: a valid prefix of a longer buffer is what counts */
    pp_json_doc *doc = NULL;
    char err[PP_ERR_LEN];
    TEST_COND("length bounds the input", pp_json_parse("[12]garbage", 4, &doc, err) == 0 &&
                                             pp_json_root(doc)->items[0]->integer == 12);
    pp_json_free(doc);
    TEST_COND("error names the byte", pp_json_parse("[1, 2, x]", 9, &doc, err) == PP_EFORMAT &&
                                          strstr(err, "at byte 7") != NULL);
}

/* A bounded parse counts every value: [1,2,3] is four; the unbounded one takes any number. */
static void test_value_bound(void) {
    pp_json_doc *doc = NULL;
    char err[PP_ERR_LEN];
    TEST_COND("four values within a bound of 4", pp_json_parse_bounded("[1,2,3]", 7, 4, &doc, err) == 0);
    pp_json_free(doc);
    TEST_COND("four values past a bound of 3", pp_json_parse_bounded("[1,{},3]", 8, 3, &doc, err) == PP_EFORMAT &&
                                                  !doc && strstr(err, "more values"));
    enum { N = 100000 };
    char *many = malloc(2 * N + 1);
    if (!many) return;
    many[0] = '[';
    for (int i = 0; i < N; i++) many[1 + 2 * i] = '1', many[2 + 2 * i] = i + 1 < N ? ',' : ']';
    TEST_COND("unbounded: 100001 values", pp_json_parse(many, 2 * N + 1, &doc, err) == 0 &&
                                               pp_json_root(doc)->count == N);
    pp_json_free(doc);
    free(many);
}

/* The writer's strings: the short escapes, \u00XX for other controls, UTF-8 copied, and an
 * ill-formed byte (a character cut by a truncation like "%.64s") as \ufffd, so every event
 * stays valid UTF-8 and parses back. */
static void test_writer_strings(void) {
    char buf[128];
    pp_jw w;
    pp_jw_init(&w, buf, sizeof buf);
    static const char in[] = "a\"\\\n\t\r\x01\x7f \xc3\xa9 \xe2\x82\xac \xff \xc3";
    pp_jw_str(&w, in, sizeof in - 1);
    long n = pp_jw_end(&w);
    static const char want[] = "\"a\\\"\\\\\\n\\t\\r\\u0001\\u007f \xc3\xa9 \xe2\x82\xac \\ufffd \\ufffd\"";
    TEST_COND("writer: escapes, UTF-8 and U+FFFD", n == (long)strlen(want) && !strcmp(buf, want));
    pp_json_doc *doc = NULL;
    char err[PP_ERR_LEN];
    TEST_COND("writer: its string parses back", n > 0 && pp_json_parse(buf, (size_t)n, &doc, err) == 0);
    pp_json_free(doc);
}

int main(void) {
    test_writer_strings();
    test_value_bound();
    test_values();
    test_integers();
    test_strings();
    test_dups_and_depth();
    test_invalid();
    return test_report();
}
