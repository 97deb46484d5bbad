/* tls: TLS versions and ciphers, certificate reload (see tls.h). */
#include "server/tls.h"

#include "base/err.h"
#include "base/log.h"

#include <stdio.h>
#include <sys/stat.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

/* TLS 1.2: forward-secret key exchange and AEAD ciphers only. */
#define TLS12_CIPHERS                                                                           \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"  \
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
#define TLS13_CIPHERS "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"

/* A private key others can read is worth a warning (the generated one is written 0600). */
static void check_key_mode(const char *key_path) {
    struct stat st;
    if (stat(key_path, &st) == 0 && (st.st_mode & 077))
        PP_WARN("tls", "%s is readable by other users (mode %03o); chmod 600 it", key_path, (unsigned)(st.st_mode & 0777));
}

void tls_configure(struct lws_context_creation_info *info, const char *cert_path, const char *key_path) {
    check_key_mode(key_path);
    info->options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    info->ssl_cert_filepath = cert_path;
    info->ssl_private_key_filepath = key_path;
    info->ssl_cipher_list = TLS12_CIPHERS;
    info->tls1_3_plus_cipher_list = TLS13_CIPHERS;
    info->ssl_options_set = (long)(SSL_OP_NO_SSLv3 | SSL_OP_NO_TLSv1 | SSL_OP_NO_TLSv1_1 | SSL_OP_NO_COMPRESSION |
                                   SSL_OP_NO_RENEGOTIATION);
}

static int ssl_fail(char *err, const char *path, const char *what) {
    char buf[256];
    unsigned long e = ERR_get_error();
    ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    return pp_fail(err, PP_EFORMAT, "%s: %s%s%s", path, what, e ? ": " : "", e ? buf : "");
}

/* Checks that cert_path holds a certificate and key_path the matching private key. */
static int check_pair(const char *cert_path, const char *key_path, char *err) {
    FILE *f = fopen(cert_path, "r");
    if (!f) return pp_fail(err, PP_EIO, "cannot open %s", cert_path);
    X509 *cert = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    if (!cert) return ssl_fail(err, cert_path, "no PEM certificate");
    int rc = PP_OK;
    EVP_PKEY *key = NULL;
    if (!(f = fopen(key_path, "r"))) {
        rc = pp_fail(err, PP_EIO, "cannot open %s", key_path);
    } else {
        key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
        fclose(f);
        if (!key) rc = ssl_fail(err, key_path, "no PEM private key");
        else if (X509_check_private_key(cert, key) != 1) rc = ssl_fail(err, key_path, "does not match the certificate");
    }
    EVP_PKEY_free(key);
    X509_free(cert);
    return rc;
}

int tls_reload(struct lws_context *ctx, const char *cert_path, const char *key_path, char *err) {
    int rc = check_pair(cert_path, key_path, err);
    if (rc) return rc;
    check_key_mode(key_path); /* a renewed key may come with another mode than the first */
    /* lws re-reads both files into every vhost whose paths match (SSL_CTX_use_*_file). */
    lws_tls_cert_updated(ctx, cert_path, key_path, NULL, 0, NULL, 0);
    PP_INFO("tls", "certificate reloaded from %s", cert_path);
    return PP_OK;
}
