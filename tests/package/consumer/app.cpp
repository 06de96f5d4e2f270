// app.cpp - a user's C++ program: <hk/hk.h> from C++ (extern "C"),
// std::vector buffers, a broadcast and an allgather of ragged rows.
// Prints "app_cxx: rank R of N ok" on success.
#include <hk/hk.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main() {
  if (hk_init() != HK_OK) {
    std::fprintf(stderr, "app_cxx: hk_init: %s\n", hk_last_error());
    return 1;
  }
  const int rank = hk_rank(), size = hk_size();
  std::vector<double> w(8, rank == 0 ? 2.5 : 0.0);
  if (hk_broadcast("w", w.data(), w.size(), HK_FLOAT64, 0) != HK_OK) {
    std::fprintf(stderr, "app_cxx: hk_broadcast: %s\n", hk_last_error());
    return 1;
  }
  for (double v : w)
    if (v != 2.5)
      return 1;
  // rank r contributes r + 1 rows of 2 elements
  std::vector<std::int32_t> mine(2 * static_cast<std::size_t>(rank + 1), rank);
  void *all = nullptr;
  std::vector<std::size_t> rows(static_cast<std::size_t>(size));
  if (hk_allgather("g", mine.data(), static_cast<std::size_t>(rank + 1), 2,
                   HK_INT32, &all, rows.data()) != HK_OK) {
    std::fprintf(stderr, "app_cxx: hk_allgather: %s\n", hk_last_error());
    return 1;
  }
  const std::int32_t *got = static_cast<const std::int32_t *>(all);
  std::size_t k = 0;
  for (int r = 0; r < size; r++) {
    if (rows[static_cast<std::size_t>(r)] != static_cast<std::size_t>(r + 1))
      return 1;
    for (int i = 0; i < 2 * (r + 1); i++)
      if (got[k++] != r)
        return 1;
  }
  std::free(all);
  std::printf("app_cxx: rank %d of %d ok\n", rank, size);
  std::fflush(stdout);
  return hk_shutdown() == HK_OK ? 0 : 1;
}
