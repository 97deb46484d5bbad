/* test_log: one message is one line. Messages quote what clients send; control characters in
 * them are written as \xNN, so a client cannot add a line of its own to the log (once it could,
 * with a newline in an event type) or send escapes to the operator's terminal. */
#include "test.h"

#include "base/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(void) {
    char path[] = "/tmp/pp-test-log-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) TEST_SKIP("no temporary file");
    close(fd);
    TEST_COND("log file opens", pp_log_open(path) == 0);
    PP_WARN("test", "event '%s' unknown", "x\n2026-11-30T16:00:00.000Z info server: FAKE\r\x1b[31m\x7f");
    PP_INFO("test", "plain é text");
    pp_log_open(NULL);
    char text[1024] = "";
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = '\0';
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
    TEST_COND("two messages, two lines", lines == 2);
    TEST_COND("control characters escaped", strstr(text, "x\\x0a2026") && strstr(text, "FAKE\\x0d\\x1b[31m\\x7f'"));
    TEST_COND("other bytes as they are", strstr(text, "plain é text\n") != NULL);
    remove(path);
    return test_report();
}
