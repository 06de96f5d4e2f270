/*
 * fuzz_hosts - libFuzzer target for the -H and host-file parsers
 * (launcher/hosts.h), the code that reads what users type. The first byte
 * picks the parser; the rest is the input. Any input must parse or be
 * refused with HK_ERR_INVALID_ARG naming where; a parsed list must hold
 * 1..HK_HOSTS_MAX hosts with slots in range adding up to total_slots,
 * names without duplicates, and -H input must re-parse from its join to
 * the same list. Never crash or read out of bounds (ASan+UBSan).
 *
 *   cmake -DHK_FUZZ=ON -DCMAKE_C_COMPILER=clang ... && ./fuzz_hosts dir/
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "launcher/hosts.h"

static void check(const hk_hostlist *l) {
  int64_t total = 0;
  if (l->n < 1 || l->n > HK_HOSTS_MAX)
    abort();
  for (int i = 0; i < l->n; i++) {
    const hk_host *h = &l->v[i];
    if (h->slots < 1 || h->slots > HK_HOST_MAX_SLOTS || !h->name[0] ||
        strlen(h->name) > HK_HOST_NAME_MAX)
      abort();
    for (int j = 0; j < i; j++)
      if (!strcmp(l->v[j].name, h->name))
        abort(); /* a repeated host is merged into its first entry */
    total += h->slots;
  }
  if (total != l->total_slots)
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 65536)
    return 0;
  const int file = data[0] & 1;
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  hk_hostlist l = {0};
  hk_status st;
  if (file) {
    st = hk_hosts_parse_file(text, len, "hosts", &l);
  } else {
    char *s = malloc(len + 1); /* -H takes a C string */
    if (!s)
      return 0;
    memcpy(s, text, len);
    s[len] = '\0';
    st = hk_hosts_parse_list(s, "-H", &l);
    free(s);
  }
  if (st == HK_OK) {
    check(&l);
    /* the join parses back to the same hosts and slots */
    char *joined = hk_hosts_join(&l);
    hk_hostlist again = {0};
    if (!joined || hk_hosts_parse_list(joined, "-H", &again) != HK_OK ||
        again.n != l.n || again.total_slots != l.total_slots)
      abort();
    for (int i = 0; i < l.n; i++)
      if (strcmp(again.v[i].name, l.v[i].name) ||
          again.v[i].slots != l.v[i].slots)
        abort();
    hk_hosts_free(&again);
    free(joined);
    hk_hosts_free(&l);
  } else if (st != HK_ERR_INVALID_ARG && st != HK_ERR_NOMEM) {
    abort();
  } else if (l.v || l.n) {
    abort(); /* nothing left allocated on an error */
  }
  return 0;
}
