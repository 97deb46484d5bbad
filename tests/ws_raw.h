/* ws_raw: a minimal blocking WebSocket client on a plain socket or OpenSSL, for what
 * libwebsockets' own client cannot send: request lines over its fixed 2048-byte limit.
 *
 * ws_raw_chat sends one upgrade request for `path`, then reads server messages until the
 * 0x00 handshake, an 0x05 error, a close frame or the timeout, and reports what it saw. */
#ifndef PP_TESTS_WS_RAW_H
#define PP_TESTS_WS_RAW_H

typedef struct ws_raw_result {
    int status;        /* HTTP status of the reply (101 on upgrade), 0 if none */
    int handshake;     /* an 0x00 message arrived */
    int error;         /* an 0x05 message arrived */
    char error_text[256];
    int close_code;    /* from a close frame, 0 if none */
} ws_raw_result;

int ws_raw_chat(int port, int tls, const char *path, int timeout_ms, ws_raw_result *out);

#endif
