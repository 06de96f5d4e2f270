#include "common/strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"

typedef struct node {
  struct node *next;
  uint64_t hash;
  void *value;
  char key[]; /* flexible array: the copied key */
} node;

/* Keys shorter than this get a node of one size, kept for reuse when
 * removed (at most SPARE_MAX of them): a step puts and removes every
 * tensor's name in several maps, and malloc/free were a tenth of the
 * background thread's bookkeeping (small1000, perf). Longer keys are
 * allocated to fit and freed. */
#define SMALL_KEY 64
#define SPARE_MAX 4096

struct hk_strmap {
  node **buckets;
  size_t nbuckets; /* a power of two */
  size_t size;
  node *spare; /* removed small nodes, linked by next */
  size_t nspare;
};

static uint64_t fnv1a(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) {
    h ^= (uint8_t)*s;
    h *= 0x100000001b3ull;
  }
  return h;
}

hk_status hk_strmap_create(hk_strmap **out) {
  hk_strmap *m = calloc(1, sizeof *m);
  if (m)
    m->buckets = calloc(64, sizeof *m->buckets);
  if (!m || !m->buckets) {
    free(m);
    return hk_fail(HK_ERR_NOMEM, "cannot allocate a name table");
  }
  m->nbuckets = 64;
  *out = m;
  return HK_OK;
}

void hk_strmap_destroy(hk_strmap *m) {
  if (!m)
    return;
  for (size_t i = 0; i < m->nbuckets; i++)
    for (node *n = m->buckets[i], *next; n; n = next) {
      next = n->next;
      free(n);
    }
  for (node *n = m->spare, *next; n; n = next) {
    next = n->next;
    free(n);
  }
  free(m->buckets);
  free(m);
}

static node **find(const hk_strmap *m, const char *key, uint64_t h) {
  node **slot = &m->buckets[h & (m->nbuckets - 1)];
  while (*slot && ((*slot)->hash != h || strcmp((*slot)->key, key) != 0))
    slot = &(*slot)->next;
  return slot;
}

void *hk_strmap_get(const hk_strmap *m, const char *key) {
  node *n = *find(m, key, fnv1a(key));
  return n ? n->value : NULL;
}

static void grow(hk_strmap *m) {
  size_t nb = m->nbuckets * 2;
  node **b = calloc(nb, sizeof *b);
  if (!b)
    return; /* keep working at a higher load factor */
  for (size_t i = 0; i < m->nbuckets; i++)
    for (node *n = m->buckets[i], *next; n; n = next) {
      next = n->next;
      n->next = b[n->hash & (nb - 1)];
      b[n->hash & (nb - 1)] = n;
    }
  free(m->buckets);
  m->buckets = b;
  m->nbuckets = nb;
}

hk_status hk_strmap_put(hk_strmap *m, const char *key, void *value) {
  uint64_t h = fnv1a(key);
  node **slot = find(m, key, h);
  if (*slot) {
    (*slot)->value = value;
    return HK_OK;
  }
  size_t len = strlen(key);
  node *n;
  if (len < SMALL_KEY && m->spare) {
    n = m->spare;
    m->spare = n->next;
    m->nspare--;
  } else {
    n = malloc(sizeof *n + (len < SMALL_KEY ? SMALL_KEY : len + 1));
  }
  if (!n)
    return hk_fail(HK_ERR_NOMEM, "cannot allocate a name table entry");
  memcpy(n->key, key, len + 1);
  n->hash = h;
  n->value = value;
  n->next = NULL;
  *slot = n;
  if (++m->size > m->nbuckets)
    grow(m);
  return HK_OK;
}

void *hk_strmap_remove(hk_strmap *m, const char *key) {
  node **slot = find(m, key, fnv1a(key));
  node *n = *slot;
  if (!n)
    return NULL;
  *slot = n->next;
  void *v = n->value;
  if (strlen(n->key) < SMALL_KEY && m->nspare < SPARE_MAX) {
    n->next = m->spare;
    m->spare = n;
    m->nspare++;
  } else {
    free(n);
  }
  m->size--;
  return v;
}

size_t hk_strmap_size(const hk_strmap *m) { return m->size; }

void hk_strmap_each(const hk_strmap *m,
                    void (*fn)(const char *key, void *value, void *arg),
                    void *arg) {
  for (size_t i = 0; i < m->nbuckets; i++)
    for (node *n = m->buckets[i]; n; n = n->next)
      fn(n->key, n->value, arg);
}
