/*
 * dtype.c - sizes and names of hk_dtype and hk_op (declared in hk/hk.h).
 * Pure functions over static tables; thread-safe.
 */
#include "hk/hk.h"

/* Indexed by hk_dtype; the order is fixed by the enum in hk/hk.h. */
static const struct {
  size_t size; /* bytes per element */
  const char *name;
} dtypes[] = {
    {2, "float16"}, {2, "bfloat16"}, {4, "float32"}, {8, "float64"},
    {1, "int8"},    {1, "uint8"},    {4, "int32"},   {8, "int64"},
    {2, "int16"},   {1, "bool"},
};

/* Indexed by hk_op. */
static const char *const op_names[] = {"sum", "average", "min", "max",
                                       "product"};

#define COUNT(arr) (sizeof(arr) / sizeof((arr)[0]))

size_t hk_dtype_size(hk_dtype dtype) {
  /* Unsigned compare: negative values are out of range too. */
  return (unsigned)dtype < COUNT(dtypes) ? dtypes[dtype].size : 0;
}

const char *hk_dtype_name(hk_dtype dtype) {
  return (unsigned)dtype < COUNT(dtypes) ? dtypes[dtype].name : "unknown";
}

const char *hk_op_name(hk_op op) {
  return (unsigned)op < COUNT(op_names) ? op_names[op] : "unknown";
}
