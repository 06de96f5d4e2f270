/*
 * auth.h - proof that a connection's peer knows the job's secret.
 *
 * Every connection into a job (rendezvous, control, data) runs this
 * handshake before any other byte is read:
 *
 *   server -> client : nonce_s                       (HK_NONCE_LEN bytes)
 *   client -> server : nonce_c || proof_c            (HK_NONCE_LEN +
 * HK_PROOF_LEN) proof_c = HMAC-SHA256(secret, "hk1-client" || nonce_s ||
 * nonce_c) server -> client : proof_s                       (HK_PROOF_LEN)
 *                      proof_s = HMAC-SHA256(secret, "hk1-server" || nonce_c ||
 * nonce_s)
 *
 * The server reads exactly the fixed-size client message and verifies it in
 * constant time before reading anything else; on failure it closes the
 * connection without answering. Fresh random nonces on both sides stop
 * replay. HMAC-SHA256 (RFC 2104, FIPS 180-4) comes from OpenSSL's libcrypto.
 * The I/O itself lives with whoever owns the socket (collectives/transport
 * for workers, launcher/ for hkrun's libuv server); this file is pure.
 */
#ifndef HK_COMMON_AUTH_H
#define HK_COMMON_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "hk/hk.h"

#define HK_SECRET_LEN 32 /* bytes; HK_SECRET is 64 hex digits */
#define HK_NONCE_LEN 32
#define HK_PROOF_LEN 32
#define HK_AUTH_CLIENT_MSG_LEN (HK_NONCE_LEN + HK_PROOF_LEN)

typedef struct hk_secret {
  uint8_t bytes[HK_SECRET_LEN];
} hk_secret;

/**
 * Parses `hex` (exactly 64 hex digits, either case) into *out.
 * Errors: HK_ERR_CONFIG naming what is wrong ("HK_SECRET is not set" for
 * NULL or "", the length, a non-hex digit).
 */
hk_status hk_secret_parse(const char *hex, hk_secret *out);

/** Writes the secret as 64 lower-case hex digits plus NUL into hex[65]. */
void hk_secret_format(const hk_secret *secret, char hex[2 * HK_SECRET_LEN + 1]);

/**
 * Fills buf with len bytes from the kernel's CSPRNG (getrandom(2)).
 * Errors: HK_ERR_SYSTEM.
 */
hk_status hk_random_bytes(void *buf, size_t len);

/** Fills a fresh random secret. Errors: HK_ERR_SYSTEM. */
hk_status hk_secret_generate(hk_secret *out);

/**
 * out = HMAC-SHA256(secret, label || data): a value tied to the job that
 * nobody without the secret can compute (the shared-memory segment's name,
 * collectives/transport/shm_seg.h). label is a NUL-terminated string of at
 * most 32 bytes, data len bytes (at most 64).
 */
void hk_secret_derive(const hk_secret *secret, const char *label,
                      const void *data, size_t len, uint8_t out[HK_PROOF_LEN]);

/** Computes the client's message: msg = nonce_c || proof_c (see above).
 *  nonce_c must be fresh random bytes chosen by the client. */
void hk_auth_client_msg(const hk_secret *secret,
                        const uint8_t nonce_s[HK_NONCE_LEN],
                        const uint8_t nonce_c[HK_NONCE_LEN],
                        uint8_t msg[HK_AUTH_CLIENT_MSG_LEN]);

/**
 * Server side: checks the client's message against nonce_s; on success
 * writes the server's proof into proof_s and returns 1, else returns 0.
 * Constant time in the message contents.
 */
int hk_auth_server_check(const hk_secret *secret,
                         const uint8_t nonce_s[HK_NONCE_LEN],
                         const uint8_t msg[HK_AUTH_CLIENT_MSG_LEN],
                         uint8_t proof_s[HK_PROOF_LEN]);

/** Client side: returns 1 if proof_s is the server's valid answer to our
 *  message (so the server knows the secret too), else 0. */
int hk_auth_client_check(const hk_secret *secret,
                         const uint8_t nonce_s[HK_NONCE_LEN],
                         const uint8_t nonce_c[HK_NONCE_LEN],
                         const uint8_t proof_s[HK_PROOF_LEN]);

#endif
