/* cert: self-signed certificate generation with OpenSSL's EVP and X509 APIs. */
#include "server/cert.h"

#include "base/err.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#define CERT_DAYS 365
#define CERT_RENEW_DAYS 30 /* a browser's exception for the old one would lapse within this */

int cert_mkdirs(const char *dir, char *err) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return pp_fail(err, PP_EIO, "state directory path too long: %s", dir);
    /* Walk the path creating each missing component, like mkdir -p. */
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p) continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            return pp_fail(err, PP_EIO, "cannot create directory %s: %s", path, strerror(errno));
        if (!saved) break;
        *p = saved;
    }
    return PP_OK;
}

static int ssl_fail(char *err, const char *what) {
    unsigned long e = ERR_get_error();
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    return pp_fail(err, PP_EFORMAT, "TLS certificate: %s failed: %s", what, e ? buf : "unknown error");
}

static int add_ext(X509 *cert, int nid, const char *value, char *err) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, cert, cert, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (!ext) return ssl_fail(err, value);
    int ok = X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
    return ok ? PP_OK : ssl_fail(err, "X509_add_ext");
}

static int make_cert(EVP_PKEY *key, X509 **out, char *err) {
    X509 *c = X509_new();
    if (!c) return ssl_fail(err, "X509_new");
    unsigned char serial[16];
    BIGNUM *bn = NULL;
    X509_NAME *name = X509_get_subject_name(c);
    int rc = PP_EFORMAT;
    if (!X509_set_version(c, 2) || RAND_bytes(serial, sizeof serial) != 1) goto fail;
    serial[0] &= 0x7f; /* a positive serial number */
    if (!(bn = BN_bin2bn(serial, sizeof serial, NULL)) || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(c)))
        goto fail;
    if (!X509_gmtime_adj(X509_getm_notBefore(c), -3600) ||
        !X509_gmtime_adj(X509_getm_notAfter(c), (long)CERT_DAYS * 24 * 3600))
        goto fail;
    if (!X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"personaplex-server", -1, -1, 0) ||
        !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1, 0) ||
        !X509_set_issuer_name(c, name) || !X509_set_pubkey(c, key))
        goto fail;
    /* Browsers match the host against the SAN only, never the CN. */
    if ((rc = add_ext(c, NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1,IP:::1", err)) ||
        (rc = add_ext(c, NID_basic_constraints, "critical,CA:FALSE", err)) ||
        (rc = add_ext(c, NID_key_usage, "critical,digitalSignature,keyEncipherment", err)) ||
        (rc = add_ext(c, NID_ext_key_usage, "serverAuth", err)))
        goto out;
    if (!X509_sign(c, key, EVP_sha256())) goto fail;
    BN_free(bn);
    *out = c;
    return PP_OK;
fail:
    rc = ssl_fail(err, "building the certificate");
out:
    BN_free(bn);
    X509_free(c);
    return rc;
}

/* Writes the key (when key is set) or else the certificate as PEM to path, atomically (temp
 * file + rename), with the given mode. */
static int write_pem(const char *path, mode_t mode, EVP_PKEY *key, X509 *cert, char *err) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, mode);
    if (fd < 0) return pp_fail(err, PP_EIO, "cannot create %s: %s", tmp, strerror(errno));
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlink(tmp);
        return pp_fail(err, PP_EIO, "cannot open %s: %s", tmp, strerror(errno));
    }
    int ok = key ? PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL) : PEM_write_X509(f, cert);
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return pp_fail(err, PP_EIO, "cannot write %s", path);
    }
    return PP_OK;
}

static int generate(const char *cert_path, const char *key_path, char *err) {
    EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    if (!key) return ssl_fail(err, "EC P-256 key generation");
    X509 *cert = NULL;
    int rc = make_cert(key, &cert, err);
    if (!rc) rc = write_pem(key_path, 0600, key, NULL, err);
    if (!rc) rc = write_pem(cert_path, 0644, NULL, cert, err);
    X509_free(cert);
    EVP_PKEY_free(key);
    return rc;
}

/* Whole days from now until the certificate in path expires (negative once it has): 0, or -1 when
 * path holds no readable PEM certificate. */
static int days_left(const char *path, int *days) {
    FILE *f = fopen(path, "r");
    X509 *c = f ? PEM_read_X509(f, NULL, NULL, NULL) : NULL;
    if (f) fclose(f);
    int secs, ok = c && ASN1_TIME_diff(days, &secs, NULL, X509_get0_notAfter(c));
    if (ok && *days == 0 && secs < 0) *days = -1; /* expired within the last day */
    X509_free(c);
    ERR_clear_error(); /* a failed read must not show up in a later ssl_fail */
    return ok ? 0 : -1;
}

void cert_warn_expiry(const char *path) {
    int days;
    if (days_left(path, &days) || days >= CERT_RENEW_DAYS) return;
    if (days < 0)
        PP_WARN("tls", "--cert %s expired %d day%s ago: clients will refuse it", path, -days, days == -1 ? "" : "s");
    else
        PP_WARN("tls", "--cert %s expires in %d day%s: renew it (SIGHUP reloads it)", path, days, days == 1 ? "" : "s");
}

int cert_ensure(const char *dir, char *cert_path, char *key_path, size_t cap, char *err) {
    if ((size_t)snprintf(cert_path, cap, "%s/cert.pem", dir) >= cap ||
        (size_t)snprintf(key_path, cap, "%s/key.pem", dir) >= cap)
        return pp_fail(err, PP_EIO, "state directory path too long: %s", dir);
    int days = 0;
    if (access(key_path, R_OK) == 0 && days_left(cert_path, &days) == 0) {
        if (days >= CERT_RENEW_DAYS) {
            PP_INFO("tls", "using the certificate in %s", cert_path);
            return PP_OK;
        }
        PP_WARN("tls", "the generated certificate in %s %s %d day%s%s: generating a new one", cert_path,
                days < 0 ? "expired" : "expires in", days < 0 ? -days : days, days == 1 || days == -1 ? "" : "s",
                days < 0 ? " ago" : "");
    }
    int rc = cert_mkdirs(dir, err);
    if (!rc) rc = generate(cert_path, key_path, err);
    if (!rc) PP_INFO("tls", "generated a self-signed certificate for localhost/127.0.0.1: %s", cert_path);
    return rc;
}
