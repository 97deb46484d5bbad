/* fuzz_json: any byte string either is refused by pp_json_parse or yields a tree whose
 * strings are NUL-terminated at string_len and whose objects answer lookups by their keys. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk(const pp_json *v, int depth) {
    if (depth > 65) abort(); /* the parser promises at most 64 levels of containers */
    switch (v->type) {
    case PP_JSON_STRING:
        if (strlen(v->string) != v->string_len) abort();
        break;
    case PP_JSON_OBJECT:
        (void)pp_json_dup_key(v);
        for (size_t i = 0; i < v->count; i++)
            if (!pp_json_get(v, v->keys[i])) abort();
        /* An object's items are walked like an array's. */
        /* fall through */
    case PP_JSON_ARRAY:
        for (size_t i = 0; i < v->count; i++) walk(v->items[i], depth + 1);
        break;
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pp_json_doc *doc = NULL;
    char err[PP_ERR_LEN];
    if (pp_json_parse((const char *)data, size, &doc, err)) {
        if (doc || !strstr(err, "at byte")) abort();
        return 0;
    }
    walk(pp_json_root(doc), 0);
    pp_json_free(doc);
    return 0;
}
