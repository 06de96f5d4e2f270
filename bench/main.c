/*
 * hkbench - hk's allreduce benchmark:
 *
 *   hkrun -np 4 hkbench -b 8 -e 256M -f 4 [-n 50] [-w 5] [-c 1]
 *                       [-d float32|...|all] [-o sum|...|all] [--raw]
 *                       [--csv FILE]                 a size sweep (sweep.h)
 *   hkrun -np 4 hkbench --model resnet50 [-n 10] [-w 2]
 *                                                    a model replay (model.h)
 *   hkbench --model list                             the models available
 *   hkrun -np N hkbench --device gpu [...]           either, device buffers
 *   hkbench --device gpu --kernels [-b -e -f -n -w]  pack/unpack bandwidth
 *
 * See bench/README.md for how to run it next to Open MPI's MPI_Allreduce
 * (bench/peers) and plot the results (bench/plot.sh).
 */
#include <stdio.h>
#include <string.h>

#include "devbuf.h"
#include "hk/hk.h"
#include "model.h"
#include "options.h"
#include "planner/gradset.h"
#include "stats.h"
#include "sweep.h"

int main(int argc, char **argv) {
  hkb_opts o;
  int rc = hkb_parse_options(argc, argv, &o);
  if (rc != 0)
    return rc == 1 ? 0 : rc;
  if (o.model && !strcmp(o.model, "list"))
    return hk_gradset_list("hkbench", o.model_dir) == 0 ? 0 : 1;
  hk_gradset m = {0};
  if (o.model && hk_gradset_load("hkbench", o.model, o.model_dir, &m) != 0)
    return 2; /* every rank read the file before joining: all stop here */
  hkb_ok(hk_init(), "hk_init");
  if (o.kernels)
    hkb_kernels(&o);
  else if (o.model)
    hkb_model_run(&o, &m);
  else
    hkb_sweep(&o);
  hk_gradset_free(&m);
  hkb_ok(hk_shutdown(), "hk_shutdown");
  return 0;
}
