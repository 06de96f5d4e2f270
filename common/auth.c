#include "common/auth.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>
#include <sys/random.h>

#include "common/status.h"

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

hk_status hk_secret_parse(const char *hex, hk_secret *out) {
  if (!hex || !*hex)
    return hk_fail(HK_ERR_CONFIG, "HK_SECRET is not set");
  size_t len = strlen(hex);
  if (len != 2 * HK_SECRET_LEN)
    return hk_fail(HK_ERR_CONFIG,
                   "HK_SECRET must be %d hex digits, got %zu characters",
                   2 * HK_SECRET_LEN, len);
  for (size_t i = 0; i < HK_SECRET_LEN; i++) {
    int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return hk_fail(HK_ERR_CONFIG,
                     "HK_SECRET has a non-hex character at position %zu",
                     hi < 0 ? 2 * i : 2 * i + 1);
    out->bytes[i] = (uint8_t)(hi << 4 | lo);
  }
  return HK_OK;
}

void hk_secret_format(const hk_secret *secret,
                      char hex[2 * HK_SECRET_LEN + 1]) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < HK_SECRET_LEN; i++) {
    hex[2 * i] = digits[secret->bytes[i] >> 4];
    hex[2 * i + 1] = digits[secret->bytes[i] & 15];
  }
  hex[2 * HK_SECRET_LEN] = '\0';
}

hk_status hk_random_bytes(void *buf, size_t len) {
  uint8_t *p = buf;
  while (len > 0) {
    ssize_t n = getrandom(p, len, 0);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return hk_fail_errno(HK_ERR_SYSTEM, errno, "getrandom");
    }
    p += n;
    len -= (size_t)n;
  }
  return HK_OK;
}

hk_status hk_secret_generate(hk_secret *out) {
  return hk_random_bytes(out->bytes, sizeof out->bytes);
}

static void proof(const hk_secret *secret, const char *label,
                  const uint8_t a[HK_NONCE_LEN], const uint8_t b[HK_NONCE_LEN],
                  uint8_t out[HK_PROOF_LEN]) {
  uint8_t input[16 + 2 * HK_NONCE_LEN];
  size_t label_len = strlen(label);
  memcpy(input, label, label_len);
  memcpy(input + label_len, a, HK_NONCE_LEN);
  memcpy(input + label_len + HK_NONCE_LEN, b, HK_NONCE_LEN);
  unsigned int out_len = HK_PROOF_LEN;
  HMAC(EVP_sha256(), secret->bytes, HK_SECRET_LEN, input,
       label_len + 2 * HK_NONCE_LEN, out, &out_len);
}

void hk_secret_derive(const hk_secret *secret, const char *label,
                      const void *data, size_t len, uint8_t out[HK_PROOF_LEN]) {
  uint8_t input[32 + 64];
  size_t label_len = strnlen(label, 32);
  if (len > 64)
    len = 64;
  memcpy(input, label, label_len);
  if (len)
    memcpy(input + label_len, data, len);
  unsigned int out_len = HK_PROOF_LEN;
  HMAC(EVP_sha256(), secret->bytes, HK_SECRET_LEN, input, label_len + len, out,
       &out_len);
}

void hk_auth_client_msg(const hk_secret *secret,
                        const uint8_t nonce_s[HK_NONCE_LEN],
                        const uint8_t nonce_c[HK_NONCE_LEN],
                        uint8_t msg[HK_AUTH_CLIENT_MSG_LEN]) {
  memcpy(msg, nonce_c, HK_NONCE_LEN);
  proof(secret, "hk1-client", nonce_s, nonce_c, msg + HK_NONCE_LEN);
}

int hk_auth_server_check(const hk_secret *secret,
                         const uint8_t nonce_s[HK_NONCE_LEN],
                         const uint8_t msg[HK_AUTH_CLIENT_MSG_LEN],
                         uint8_t proof_s[HK_PROOF_LEN]) {
  uint8_t expect[HK_PROOF_LEN];
  const uint8_t *nonce_c = msg;
  proof(secret, "hk1-client", nonce_s, nonce_c, expect);
  if (CRYPTO_memcmp(expect, msg + HK_NONCE_LEN, HK_PROOF_LEN) != 0)
    return 0;
  proof(secret, "hk1-server", nonce_c, nonce_s, proof_s);
  return 1;
}

int hk_auth_client_check(const hk_secret *secret,
                         const uint8_t nonce_s[HK_NONCE_LEN],
                         const uint8_t nonce_c[HK_NONCE_LEN],
                         const uint8_t proof_s[HK_PROOF_LEN]) {
  uint8_t expect[HK_PROOF_LEN];
  proof(secret, "hk1-server", nonce_c, nonce_s, expect);
  return CRYPTO_memcmp(expect, proof_s, HK_PROOF_LEN) == 0;
}
