/* tls: the server's TLS policy and certificate reload.
 *
 * Policy: TLS 1.2 and 1.3 only (SSLv3, TLS 1.0 and 1.1 are switched off), on TLS 1.2 only
 * ECDHE key exchange with AEAD ciphers (AES-GCM, ChaCha20-Poly1305), on TLS 1.3 its three
 * AEAD suites; no compression, no renegotiation. Every browser of the last years speaks this.
 *
 * Reload: on SIGHUP the certificate chain and key are read again from the same files (a
 * renewed certificate, e.g. by certbot, takes effect without dropping conversations). The new
 * pair is checked first (both parse, the key matches the certificate); a bad pair is logged
 * and the old one stays in use, a key readable by other users is warned of as at start. Open
 * connections keep the certificate they started with. */
#ifndef PP_SERVER_TLS_H
#define PP_SERVER_TLS_H

#include <libwebsockets.h>

/* Sets the vhost's certificate files and the policy above in info (and warns when the key is
 * readable by other users). The paths must outlive the context. */
void tls_configure(struct lws_context_creation_info *info, const char *cert_path, const char *key_path);
/* Re-reads the certificate and key of every vhost using them (service thread). 0, or a
 * negative code when the files do not form a usable pair (err says why; nothing changed). */
int tls_reload(struct lws_context *ctx, const char *cert_path, const char *key_path, char *err);

#endif
