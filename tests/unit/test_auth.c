/* Unit tests of the secret handshake's pure part: a client that knows the
 * secret is accepted and can verify the server; anyone else is refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/auth.h"

static void test_secret_parse(void **state) {
  (void)state;
  hk_secret s, t;
  assert_int_equal(hk_secret_generate(&s), HK_OK);
  char hex[2 * HK_SECRET_LEN + 1];
  hk_secret_format(&s, hex);
  assert_int_equal(strlen(hex), 64);
  assert_int_equal(hk_secret_parse(hex, &t), HK_OK);
  assert_memory_equal(s.bytes, t.bytes, HK_SECRET_LEN);
  assert_int_equal(hk_secret_parse("abc", &t), HK_ERR_CONFIG);
  assert_non_null(strstr(hk_last_error(), "64 hex digits"));
  hex[10] = 'g';
  assert_int_equal(hk_secret_parse(hex, &t), HK_ERR_CONFIG);
  assert_non_null(strstr(hk_last_error(), "position 10"));
  assert_int_equal(hk_secret_parse(NULL, &t), HK_ERR_CONFIG);
}

static void test_handshake(void **state) {
  (void)state;
  hk_secret good, bad;
  assert_int_equal(hk_secret_generate(&good), HK_OK);
  assert_int_equal(hk_secret_generate(&bad), HK_OK);
  uint8_t ns[HK_NONCE_LEN], nc[HK_NONCE_LEN];
  assert_int_equal(hk_random_bytes(ns, sizeof ns), HK_OK);
  assert_int_equal(hk_random_bytes(nc, sizeof nc), HK_OK);
  uint8_t msg[HK_AUTH_CLIENT_MSG_LEN], proof[HK_PROOF_LEN];

  hk_auth_client_msg(&good, ns, nc, msg);
  assert_int_equal(hk_auth_server_check(&good, ns, msg, proof), 1);
  assert_int_equal(hk_auth_client_check(&good, ns, nc, proof), 1);
  /* A server that does not know the secret cannot fake its proof. */
  uint8_t fake[HK_PROOF_LEN];
  memset(fake, 0, sizeof fake);
  assert_int_equal(hk_auth_client_check(&good, ns, nc, fake), 0);

  /* Wrong secret, replay against a fresh nonce, one flipped bit. */
  hk_auth_client_msg(&bad, ns, nc, msg);
  assert_int_equal(hk_auth_server_check(&good, ns, msg, proof), 0);
  hk_auth_client_msg(&good, ns, nc, msg);
  uint8_t ns2[HK_NONCE_LEN];
  assert_int_equal(hk_random_bytes(ns2, sizeof ns2), HK_OK);
  assert_int_equal(hk_auth_server_check(&good, ns2, msg, proof), 0);
  msg[HK_AUTH_CLIENT_MSG_LEN - 1] ^= 1;
  assert_int_equal(hk_auth_server_check(&good, ns, msg, proof), 0);
  memset(msg, 0, sizeof msg);
  assert_int_equal(hk_auth_server_check(&good, ns, msg, proof), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_secret_parse),
      cmocka_unit_test(test_handshake),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
