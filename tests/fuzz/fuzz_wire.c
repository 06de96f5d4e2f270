/*
 * fuzz_wire - libFuzzer target for hk_wire_decode, the one function that
 * reads bytes from the network. Any input must either decode (and then
 * re-encode to exactly the same bytes) or be rejected with
 * HK_ERR_PROTOCOL; never crash, leak or read out of bounds (built with
 * ASan+UBSan). Also feeds the header check alone.
 *
 *   cmake -DHK_FUZZ=ON -DCMAKE_C_COMPILER=clang ... && ./fuzz_wire corpus/
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size >= HK_WIRE_HEADER_LEN) {
    uint8_t type;
    uint32_t payload;
    (void)hk_wire_header(data, &type, &payload);
  }
  hk_msg m;
  hk_status st = hk_wire_decode(data, size, &m);
  if (st == HK_OK) {
    hk_buf b = {0};
    if (hk_wire_encode(&m, &b) != HK_OK)
      abort(); /* what decodes must encode */
    if (b.len != size || memcmp(b.data, data, size) != 0)
      abort(); /* and round-trip byte for byte */
    hk_buf_free(&b);
    hk_msg_free(&m);
  } else if (st != HK_ERR_PROTOCOL && st != HK_ERR_NOMEM) {
    abort();
  }
  return 0;
}
