/* cert: the server's TLS certificate when the user gives none.
 *
 * cert_ensure returns the paths of a PEM certificate and key in the state directory,
 * generating them on first use with OpenSSL: an EC P-256 key and a self-signed X.509 v3
 * certificate (SAN localhost, 127.0.0.1, ::1; one year). The key file is created with mode
 * 0600 and never widened; an existing pair is reused as it is, so browsers that accepted the
 * certificate once keep accepting it across restarts, until it has 30 days left or less: then a
 * new pair replaces it (an expired one would fail every client). */
#ifndef PP_SERVER_CERT_H
#define PP_SERVER_CERT_H

#include <stddef.h>

/* Creates dir (and its parents, mode 0700) if missing. 0 or PP_EIO naming the path. */
int cert_mkdirs(const char *dir, char *err);

/* Fills cert_path/key_path (cap bytes each) with dir/cert.pem and dir/key.pem, generating the
 * pair when either is missing. 0, PP_EIO (file system) or PP_EFORMAT (OpenSSL failure). */
int cert_ensure(const char *dir, char *cert_path, char *key_path, size_t cap, char *err);

/* Logs a warning when the certificate in path (an operator's --cert) has expired or has 30 days
 * left or less; nothing when it cannot be read (lws says why). */
void cert_warn_expiry(const char *path);

#endif
