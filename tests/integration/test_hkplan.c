/*
 * test_hkplan - hkplan (planner/): the simulator's fusion equals hk's own
 * on a run recorded here (hkrun -np 3 hkbench --model resnet50 with a
 * timeline and a 4 MB fusion threshold, which splits rounds into many
 * batches); the plan table's values for a fixed input, worked out here;
 * bad inputs (a topology that does not parse, a gradient set with no
 * tensors, a price table without the server, an unknown GPU) named, with
 * exit status 1; hkrun --plan runs it.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"
#include "topology/figures.h"

static char dir[256];

static void put(const char *name, const char *text, char *path, size_t cap) {
  snprintf(path, cap, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_int_equal(fputs(text, f) >= 0, 1);
  assert_int_equal(fclose(f), 0);
}

static void run(char *const argv[], char *const env[], hkt_result *r) {
  assert_int_equal(hkt_run(argv, env, 120, r), 0);
  assert_int_equal(r->exited, 1);
  assert_int_equal(hkt_orphans(NULL, 0), 0);
}

static void recorded_batches(void **s) {
  (void)s;
  char tl[300], envtl[320];
  snprintf(tl, sizeof tl, "%s/timeline.json", dir);
  snprintf(envtl, sizeof envtl, "HK_TIMELINE=%s", tl);
  char *env[] = {envtl, "HK_FUSION_THRESHOLD=4000000", NULL};
  char *bench[] = {HKRUN_PATH, "-np", "3",  HKBENCH_PATH, "--model", "resnet50",
                   "-n",       "2",   "-w", "1",          NULL};
  hkt_result r;
  run(bench, env, &r);
  if (r.exit_code != 0)
    fail_msg("hkbench: %.4000s\n%.4000s", r.out, r.err);
  hkt_result_free(&r);
  char *plan[] = {HKPLAN_PATH, "--model", "resnet50", "--batches",
                  tl,          "--np",    "3",        "--fusion-threshold",
                  "4000000",   NULL};
  run(plan, NULL, &r);
  unsigned rounds = 0, recorded = 0, same = 0;
  const char *line = strstr(r.out, "batches: ");
  if (r.exit_code != 0 || !line ||
      sscanf(line, "batches: %u rounds, %u recorded, %u simulated the same",
             &rounds, &recorded, &same) != 3)
    fail_msg("hkplan --batches: exit %d\n%.6000s\n%.2000s", r.exit_code, r.out,
             r.err);
  /* 3 steps (1 warm-up) of 161 tensors: every tensor of every step ran in
   * a recorded batch, and a 4 MB threshold makes more batches than steps */
  assert_true(rounds >= 3);
  assert_true(recorded > 3 * 10);
  assert_int_equal(same, recorded);
  hkt_result_free(&r);
  unlink(tl);
}

/* The fixed input of the plan tables below: the gradient set m.tsv (a
 * tensor of 2,500,000 floats, then one of 3) and one.txt, a server of one
 * GPU (nvidia-smi topo -m). Paths into model and topo (300 bytes). */
static void two_tensors_one_gpu(char *model, char *topo) {
  put("m.tsv", "# two tensors\na\t2500000\nb\t3\n", model, 300);
  put("one.txt",
      "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
      "GPU0\t X \t0-7\t0\t\tN/A\n",
      topo, 300);
}

/* Two servers of one GPU (named T4) at 10 Gbit/s, 30 µs a step: tensor b
 * (3 floats) is ready first, a (2,500,000 floats, 10 MB) at the end of the
 * backward pass (0.5 x 0.1 s); with one GPU a server the device path is
 * the staged flat ring (hk's choice), which costs, per chunk of at most
 * 4 MiB, the slower of
 *   call + 2 steps x 30 µs + chunk / (1.25 GB/s)   and   chunk / 24 GB/s,
 * plus one chunk's copy in and one out, after a round of 60 µs. One server of
 * one GPU exchanges nothing (a round of 32.6 µs). */
static void table_values(void **s) {
  (void)s;
  char model[300], topo[300], prices[300];
  two_tensors_one_gpu(model, topo);
  put("prices.tsv", "# test\none 3.6\n", prices, sizeof prices);
  char server[320];
  snprintf(server, sizeof server, "%s:T4", topo);
  char *argv[] = {
      HKPLAN_PATH,    "--model",   model,      "--step-s", "0.1",
      "--bwd-frac",   "0.5",       "--batch",  "8",        "--server",
      server,         "--servers", "2",        "--net",    "10",
      "--latency-us", "30",        "--prices", prices,     "--optimizer",
      "adam",         "--act-mib", "100",      "--csv",    NULL};
  hkt_result r;
  run(argv, NULL, &r);
  if (r.exit_code != 0)
    fail_msg("hkplan: %.2000s", r.err);
  double call = hk_fig_base_us(HK_FIG_RING, HK_PROTO_SIMPLE);
  double a = 1e7, b = 12;
  /* 10 MB crosses in 3 chunks of a 4 MiB pinned slot (3,333,333 B), the
   * ring on one chunk overlapping the copies of its neighbours */
  double chunk = 3333333, copy = chunk / 24e3;
  double staged_a = 3 * fmax(call + 60 + chunk / 1.25e3, copy) + 2 * copy;
  double staged_b = call + 60 + b / 1.25e3 + 2 * b / 24e3;
  double exposed = (60 + staged_a) * 1e-6;
  double step = 0.1 + exposed, step1 = 0.1 + 32.6e-6;
  double band = 0.10 * (staged_a + staged_b) * 1e-6 + 0.05 * 0.1;
  double sps = 8 * 2 / step;
  double cost = 3.6 * 2 / 3600 / sps * 1e6;
  double params = 2500003;
  double mem = (params * 16 + (a + b)) / (1024.0 * 1024 * 1024) + 800 / 1024.0;
  char want[512];
  snprintf(want, sizeof want,
           "one,T4,2,2,10,%.3f,%.3f,%.3f,%.1f,%.1f,%.4f,%.2f,yes,%.1f\n",
           step * 1e3, band * 1e3, exposed * 1e3, step1 / step * 100, sps, cost,
           mem, 0.1 / step * 100);
  if (!strstr(r.out, want))
    fail_msg("expected the row\n%sin\n%s", want, r.out);
  assert_int_equal(hkt_count_lines(r.out, ","), 2); /* header and row */
  hkt_result_free(&r);
}

/* --net-bench: a sweep written here, its times the ring's exactly for 20
 * us a step and 10 Gbit/s (1250 bytes/us) at np 2 (t = 2 x 20 + s /
 * 1250; time_us 50 % more, which must not be used while raw_us is
 * there): the fit finds both, and the plan is the one --net 10
 * --latency-us 20 gives. */
static void net_bench(void **s) {
  (void)s;
  char model[300], topo[300], csv[300];
  two_tensors_one_gpu(model, topo);
  char rows[2048] = "size_bytes,count,type,redop,time_us,algbw_gbs,busbw_gbs,"
                    "wrong,iters,nranks,raw_us,raw_busbw_gbs,ctl_us\n";
  for (double b = 8; b <= 64 << 20; b *= 16) {
    double t = 40 + b / 1250;
    size_t len = strlen(rows);
    snprintf(rows + len, sizeof rows - len,
             "%.0f,%.0f,float,sum,%.4f,0,0,0,20,2,%.4f,0,0\n", b, b / 4,
             1.5 * t, t);
  }
  put("sweep.csv", rows, csv, sizeof csv);
  char server[320];
  snprintf(server, sizeof server, "%s:T4", topo);
  char *measured[] = {HKPLAN_PATH, "--model",   model, "--step-s",
                      "0.1",       "--batch",   "8",   "--server",
                      server,      "--servers", "2",   "--net-bench",
                      csv,         "--csv",     NULL};
  char *given[] = {
      HKPLAN_PATH, "--model",      model,  "--step-s",  "0.1", "--batch",
      "8",         "--server",     server, "--servers", "2",   "--net",
      "10",        "--latency-us", "20",   "--csv",     NULL};
  hkt_result a, b;
  run(measured, NULL, &a);
  run(given, NULL, &b);
  char fit[400];
  snprintf(fit, sizeof fit,
           "hkplan: %s: 2 ranks, 6 sizes (the collective alone): 10.000 "
           "Gbit/s, 20.00 us a step",
           csv);
  if (a.exit_code != 0 || b.exit_code != 0 || !strstr(a.err, fit) ||
      strcmp(a.out, b.out) != 0)
    fail_msg("--net-bench: exit %d, expected\n%s\nin\n%s\nand the plan\n%s\n"
             "got\n%s",
             a.exit_code, fit, a.err, b.out, a.out);
  hkt_result_free(&a);
  hkt_result_free(&b);
  /* a shaped link: up to 128 KiB at 100 Gbit/s (the token bucket's
   * burst), then 1 Gbit/s: the rate is the link's, not the burst's */
  char burst[2048] = "size_bytes,time_us,nranks,raw_us,wrong\n";
  for (double b = 8; b <= 32 << 20; b *= 4) {
    double t = 40 + b / (b <= 131072 ? 12500 : 125);
    size_t len = strlen(burst);
    snprintf(burst + len, sizeof burst - len, "%.0f,%.4f,2,%.4f,0\n", b, t + 5,
             t);
  }
  put("burst.csv", burst, csv, sizeof csv);
  run(measured, NULL, &a);
  snprintf(fit, sizeof fit,
           "hkplan: %s: 2 ranks, 12 sizes (the collective "
           "alone): 1.000 Gbit/s, ",
           csv);
  if (a.exit_code != 0 || !strstr(a.err, fit))
    fail_msg("--net-bench of a shaped link: exit %d, expected\n%s\nin\n%s",
             a.exit_code, fit, a.err);
  hkt_result_free(&a);
}

/* --check on a timeline written here: steps start at 0, 10, 30 and 60 ms
 * (the first request of each); the intervals 10, 20, 30 ms lose the first
 * (the warm-up) and their median is 25 ms; each step's exchange ends 4 ms
 * after its start (2 ms in the first), so the span's median (over the
 * same steps) is 4 ms. The prediction for one CPU rank: 5 ms of compute,
 * a round of 32.6 µs and nothing to exchange. */
/* A bad input: exit status `code` and `want` on stderr, nothing on stdout. */
static void refused_with(char *const argv[], int code, const char *want) {
  hkt_result r;
  run(argv, NULL, &r);
  if (r.exit_code != code || !strstr(r.err, want) || r.out[0])
    fail_msg("expected exit %d and '%s', got %d:\n%s\n%s", code, want,
             r.exit_code, r.err, r.out);
  hkt_result_free(&r);
}

/* A bad input: exit status 1 and `want` on stderr. */
static void refused(char *const argv[], const char *want) {
  refused_with(argv, 1, want);
}

/* A timeline of 4 steps of tensors a and b starting at t0[k] µs; each
 * with its ALLREDUCE span when allreduce is set. Into dir/name, path. */
static void check_timeline(const char *name, const double t0[4], int allreduce,
                           char *path, size_t cap) {
  char text[4096] = "[\n";
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < 2; i++) {
      const char *tensor = i ? "a" : "b";
      double at = t0[k] + i * 500, end = t0[k] + (k ? 4000 : 2000);
      snprintf(text + strlen(text), sizeof text - strlen(text),
               "{\"name\":\"NEGOTIATE\",\"cat\":\"hk\",\"ph\":\"X\","
               "\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":100.000,"
               "\"args\":{\"tensor\":\"%s\",\"response\":0}},\n",
               i + 1, at, tensor);
      if (allreduce)
        snprintf(text + strlen(text), sizeof text - strlen(text),
                 "{\"name\":\"ALLREDUCE\",\"cat\":\"hk\",\"ph\":\"X\","
                 "\"pid\":0,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                 "\"args\":{\"tensor\":\"%s\",\"fused_tensors\":1,"
                 "\"bytes\":4}},\n",
                 i + 1, end - 1000, 1000.0, tensor);
    }
  strcat(text, "{}]\n");
  put(name, text, path, cap);
}

/* --check on timelines with no measurable step: exit 1, naming why. */
static void check_refused(void **s) {
  (void)s;
  char model[300], tl[300];
  put("m.tsv", "a\t1000\nb\t10\n", model, sizeof model);
  char *argv[] = {HKPLAN_PATH, "--model", model,      "--step-s", "0.005",
                  "--batch",   "1",       "--server", "cpu:1",    "--servers",
                  "1",         "--check", tl,         NULL};
  const double same[4] = {0, 10000, 10000, 30000};
  check_timeline("same.json", same, 1, tl, sizeof tl);
  refused(argv, "hkplan: --check: step 2 of the timeline lasts 0.000 ms and "
                "its exchange 4.000 ms; both must be > 0");
  const double back[4] = {0, 30000, 10000, 60000};
  check_timeline("back.json", back, 1, tl, sizeof tl);
  refused(argv, "hkplan: --check: step 2 of the timeline lasts -20.000 ms");
  const double t0[4] = {0, 10000, 30000, 60000};
  check_timeline("noar.json", t0, 0, tl, sizeof tl);
  refused(argv, "hkplan: --check: the timeline holds 0 ALLREDUCE span(s) of "
                "tensor a for 4 whole steps; one a step is needed");
}

static void check_measured(void **s) {
  (void)s;
  char model[300], tl[300];
  put("m.tsv", "a\t1000\nb\t10\n", model, sizeof model);
  const double t0[4] = {0, 10000, 30000, 60000};
  check_timeline("check.json", t0, 1, tl, sizeof tl);
  char *argv[] = {HKPLAN_PATH, "--model", model,      "--step-s", "0.005",
                  "--batch",   "1",       "--server", "cpu:1",    "--servers",
                  "1",         "--check", tl,         NULL};
  hkt_result r;
  run(argv, NULL, &r);
  char want[1024];
  snprintf(want, sizeof want,
           "check: %s: measured step 25.000 ms (median of 2), predicted "
           "5.033 +- 0.250 ms for 1 x cpu1 at 10 Gbit/s: error -79.9 %% "
           "(outside the band)\n"
           "check: exchange span (first request -> last allreduce done): "
           "measured 4.000 ms, predicted ",
           tl);
  if (r.exit_code != 0 || !strstr(r.out, want))
    fail_msg("expected\n%s\nin\n%s\n%s", want, r.out, r.err);
  hkt_result_free(&r);
}

/* --samples/--deadline/--budget on the fixed input of table_values at 1
 * and 2 servers: one server (0.1000326 s a step, 8 samples) needs 3.47 h
 * for a million samples at 12.50 a million; two (0.10854 s, table_values'
 * step) need 1.88 h at 13.57. A
 * 3 h deadline takes the two, a 4 h one the cheaper one, a budget of 10
 * neither (nor with the 4 h deadline). */
static void pick(void **s) {
  (void)s;
  char model[300], topo[300], prices[300], server[320];
  put("m.tsv", "a\t2500000\nb\t3\n", model, sizeof model);
  put("one.txt",
      "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
      "GPU0\t X \t0-7\t0\t\tN/A\n",
      topo, sizeof topo);
  put("prices.tsv", "one 3.6\n", prices, sizeof prices);
  snprintf(server, sizeof server, "%s:T4", topo);
  const char *limit[][5] = {{"--deadline", "3",
                             "pick: 2 x one on 10 Gbit/s: 1.88 h for 1000000 "
                             "samples, cost 13.57\n",
                             NULL, NULL},
                            {"--deadline", "4",
                             "pick: 1 x one: 3.47 h for 1000000 "
                             "samples, cost 12.50\n",
                             NULL, NULL},
                            {"--budget", "10",
                             "pick: no candidate meets the budget (and fits in "
                             "memory)\n",
                             NULL, NULL},
                            {"--budget", "10",
                             "pick: no candidate meets the deadline and the "
                             "budget (and fits in memory)\n",
                             "--deadline", "4"}};
  for (int i = 0; i < 4; i++) {
    char *argv[] = {HKPLAN_PATH,
                    "--model",
                    model,
                    "--step-s",
                    "0.1",
                    "--bwd-frac",
                    "0.5",
                    "--batch",
                    "8",
                    "--server",
                    server,
                    "--servers",
                    "1,2",
                    "--net",
                    "10",
                    "--latency-us",
                    "30",
                    "--prices",
                    prices,
                    "--samples",
                    "1e6",
                    (char *)limit[i][0],
                    (char *)limit[i][1],
                    (char *)limit[i][3],
                    (char *)limit[i][4],
                    NULL};
    hkt_result r;
    run(argv, NULL, &r);
    if (r.exit_code != 0 || !strstr(r.out, limit[i][2]))
      fail_msg("%s %s: expected '%s' in:\n%s\n%s", limit[i][0], limit[i][1],
               limit[i][2], r.out, r.err);
    hkt_result_free(&r);
  }
}

static void bad_inputs(void **s) {
  (void)s;
  char model[300], empty[300], bad[300], prices[300], topo[300], msg[700];
  put("m.tsv", "a\t1000\n", model, sizeof model);
  put("empty.tsv", "# nothing but comments\n\n", empty, sizeof empty);
  put("bad.xml", "<system version=\"1\"><cpu><pci busid=", bad, sizeof bad);
  put("prices.tsv", "t4-4gpu-pcie-2socket 4\n", prices, sizeof prices);
  snprintf(topo, sizeof topo, "%s/a100-sxm4-8gpu-nvswitch.xml", HK_CONFIGS_DIR);
  char *unparsable[] = {HKPLAN_PATH, "--model", model,      "--step-s", "0.1",
                        "--batch",   "8",       "--server", bad,        NULL};
  snprintf(msg, sizeof msg, "hkplan: server '%s': %s: line 1: malformed XML",
           bad, bad);
  refused(unparsable, msg);
  char *no_tensors[] = {HKPLAN_PATH, "--model", empty,      "--step-s", "0.1",
                        "--batch",   "8",       "--server", topo,       NULL};
  snprintf(msg, sizeof msg, "hkplan: %s: no tensors", empty);
  refused(no_tensors, msg);
  char *unpriced[] = {HKPLAN_PATH, "--model",  model,  "--step-s",
                      "0.1",       "--batch",  "8",    "--server",
                      topo,        "--prices", prices, NULL};
  snprintf(msg, sizeof msg,
           "hkplan: the price table %s has no price for server "
           "'a100-sxm4-8gpu-nvswitch' (add a line 'a100-sxm4-8gpu-nvswitch "
           "<price per hour>')",
           prices);
  refused(unpriced, msg);
  char gpu[320];
  snprintf(gpu, sizeof gpu, "%s:B300", topo);
  char *unknown_gpu[] = {HKPLAN_PATH, "--model", model,      "--step-s", "0.1",
                         "--batch",   "8",       "--server", gpu,        NULL};
  refused(unknown_gpu, "unknown GPU B300 (known: P100-PCIE-16GB");
  char *near_model[] = {HKPLAN_PATH, "--model", "vit-b16",  "--step-s", "0.1",
                        "--batch",   "8",       "--server", topo,       NULL};
  snprintf(msg, sizeof msg,
           "hkplan: no model 'vit-b16' in %s: did you mean vit_b_16? "
           "(known: inception_v3, mobilenet_v2, resnet101, resnet50, ",
           HK_MODELS_DIR);
  refused(near_model, msg);
  /* --net-bench: a sweep without a column, of one size, of one rank, with
   * wrong results; and beside the flags it replaces */
  char nocol[300], onesize[300], onerank[300], wrong[300];
  put("nocol.csv", "size_bytes,time_us\n8,10\n", nocol, sizeof nocol);
  put("onesize.csv",
      "size_bytes,time_us,nranks,raw_us,wrong\n64,10,2,9,0\n64,11,2,9,0\n",
      onesize, sizeof onesize);
  put("onerank.csv",
      "size_bytes,time_us,nranks,raw_us,wrong\n64,10,1,9,0\n640,11,1,9,0\n",
      onerank, sizeof onerank);
  char infinite[300], longline[300], crlf[300];
  put("inf.csv",
      "size_bytes,time_us,nranks,raw_us,wrong\n64,inf,2,9,0\n640,11,2,9,0\n",
      infinite, sizeof infinite);
  char text[5200] = "size_bytes,time_us,nranks,raw_us,wrong";
  memset(text + strlen(text), ' ', 5000);
  text[5100] = '\0';
  put("long.csv", text, longline, sizeof longline);
  put("crlf.csv",
      "size_bytes,time_us,nranks,raw_us,wrong\r\n\r\n# a comment\r\n"
      "64,10,2,9,0\r\n640,11,2,10,0\r\n\r\n",
      crlf, sizeof crlf);
  put("wrong.csv",
      "size_bytes,time_us,nranks,raw_us,wrong\n64,10,2,9,0\n640,11,2,9,3\n",
      wrong, sizeof wrong);
  const struct {
    const char *file, *why;
  } sweeps[] = {
      {nocol, "no column 'nranks' in its header (expected hkbench --csv's)"},
      {onesize, "every row is of 64 bytes: a latency and a bandwidth need 2 "
                "sizes or more"},
      {onerank, "a sweep of one rank: a network needs a sweep of 2 ranks or "
                "more"},
      {wrong, ":3: the sweep got 3 wrong results at 640 bytes"},
      {infinite, ":2: the row's 'time_us' is missing or not a number"},
      {longline, ":1: a line longer than 4094 characters"},
  };
  for (size_t i = 0; i < sizeof sweeps / sizeof sweeps[0]; i++) {
    char *argv[] = {HKPLAN_PATH,
                    "--model",
                    model,
                    "--step-s",
                    "0.1",
                    "--batch",
                    "8",
                    "--server",
                    topo,
                    "--net-bench",
                    (char *)sweeps[i].file,
                    NULL};
    snprintf(msg, sizeof msg, "hkplan: %s", sweeps[i].file);
    refused(argv, msg);
    refused(argv, sweeps[i].why);
  }
  { /* CRLF, blank lines and a comment: read as plain lines */
    char *argv[] = {HKPLAN_PATH, "--model",     model, "--step-s",
                    "0.1",       "--batch",     "8",   "--server",
                    "cpu:1",     "--net-bench", crlf,  NULL};
    hkt_result r;
    run(argv, NULL, &r);
    if (r.exit_code != 0 || !strstr(r.err, "2 sizes (the collective alone): "
                                           "4.608 Gbit/s, 4.44 us a step"))
      fail_msg("--net-bench of a CRLF sweep: exit %d\n%s", r.exit_code, r.err);
    hkt_result_free(&r);
  }
  char *zero_latency[] = {
      HKPLAN_PATH, "--model",     model,      "--step-s", "0.1",
      "--batch",   "8",           "--server", topo,       "--latency-us",
      "0",         "--net-bench", crlf,       NULL};
  refused_with(zero_latency, 2,
               "hkplan: --net-bench gives the network's rate and latency: "
               "not with --net, --latency-us or --link-eff");
  char *both[] = {HKPLAN_PATH, "--model",     model,      "--step-s", "0.1",
                  "--batch",   "8",           "--server", topo,       "--net",
                  "10",        "--net-bench", wrong,      NULL};
  refused_with(both, 2,
               "hkplan: --net-bench gives the network's rate and latency: "
               "not with --net, --latency-us or --link-eff");
  char *short_server[] = {HKPLAN_PATH, "--model", model,      "--step-s", "0.1",
                          "--batch",   "8",       "--server", "t4",       NULL};
  snprintf(msg, sizeof msg,
           "hkplan: server 't4': no topology 't4' in %s (known: "
           "a100-sxm4-8gpu-nvswitch, rtx4090-8gpu-pcie-2socket, "
           "t4-4gpu-pcie-2socket, v100-sxm2-8gpu-dgx1; cpu:N; or a topology "
           "file's path)",
           HK_CONFIGS_DIR);
  refused(short_server, msg);
}

/* Times that are not finite: a timeline span at ts inf (its ready times
 * would be NaN) and a compute time that overflows when scaled to another
 * GPU are refused, exit 1, naming what was wrong. */
static void nonfinite_times(void **s) {
  (void)s;
  char model[300], tl[300], msg[700];
  put("m.tsv", "a\t1000\nb\t10\n", model, sizeof model);
  put("inf.json",
      "[\n{\"name\":\"WAIT_FOR_DATA\",\"cat\":\"hk\",\"ph\":\"X\",\"pid\":0,"
      "\"tid\":1,\"ts\":0.000,\"dur\":10.000,\"args\":{\"tensor\":\"a\"}},\n"
      "{\"name\":\"WAIT_FOR_DATA\",\"cat\":\"hk\",\"ph\":\"X\",\"pid\":0,"
      "\"tid\":2,\"ts\":inf,\"dur\":10.000,\"args\":{\"tensor\":\"b\"}},\n"
      "{}]\n",
      tl, sizeof tl);
  char *inf_ts[] = {HKPLAN_PATH, "--model",    model,
                    "--step-s",  "0.3",        "--batch",
                    "64",        "--server",   "a100-sxm4-8gpu-nvswitch",
                    "--servers", "1",          "--cycle-ms",
                    "1",         "--timeline", tl,
                    NULL};
  snprintf(msg, sizeof msg,
           "hkplan: %s: line 3: span WAIT_FOR_DATA of b: ts inf, dur 10 µs "
           "(want finite times within +-1e+15 µs, dur >= 0)",
           tl);
  refused(inf_ts, msg);
  char *huge_step[] = {HKPLAN_PATH,
                       "--model",
                       model,
                       "--step-s",
                       "1e308",
                       "--measured-on",
                       "H100-SXM5-80GB",
                       "--amp",
                       "--batch",
                       "64",
                       "--server",
                       "t4-4gpu-pcie-2socket",
                       NULL};
  refused_with(huge_step, 2,
               "hkplan: --step-s wants seconds in 1e-9 .. 3600: '1e308'");
}

/* Numbers out of their ranges, in options and in the price table: refused
 * naming the option (or file and line), the value and the range; no inf,
 * NaN or 300-digit column printed. */
static void ranges(void **s) {
  (void)s;
  char model[300], prices[300], folder[300], msg[700];
  put("m.tsv", "a\t1000\n", model, sizeof model);
  char longlist[600] = "1";
  while (strlen(longlist) < 520)
    strcat(longlist, ",1");
  const char *bad[][3] = {
      {"--step-s", "1e300", "--step-s wants seconds in 1e-9 .. 3600: '1e300'"},
      {"--latency-us", "1e300", "--latency-us wants µs in 0 .. 1e6: '1e300'"},
      {"--round-us", "1e300", "--round-us wants µs in 0 .. 1e6: '1e300'"},
      {"--act-mib", "1e300", "--act-mib wants MiB in 0 .. 1048576: '1e300'"},
      {"--batch", "2147483647",
       "--batch wants a whole number in 1 .. 1048576: '2147483647'"},
      {"--samples", "1e308", "--samples wants a count in 1 .. 1e12: '1e308'"},
      {"--deadline", "1e308",
       "--deadline wants hours in 0.001 .. 1e6: '1e308'"},
      {"--budget", "0", "--budget wants a price in 0.01 .. 1e9: '0'"},
      {"--cycle-ms", "nan", "--cycle-ms wants ms in 0 .. 10000: 'nan'"},
      {"--net", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17",
       "--net wants up to 16 rates in 0.001 .. 1e5 Gbit/s joined by ','"},
      {"--servers", longlist,
       "--servers wants up to 32 counts in 1 .. 4096 joined by ','"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *argv[] = {HKPLAN_PATH,
                    "--model",
                    model,
                    "--batch",
                    "8",
                    "--server",
                    "cpu:2",
                    (char *)bad[i][0],
                    (char *)bad[i][1],
                    NULL};
    snprintf(msg, sizeof msg, "hkplan: %s", bad[i][2]);
    refused_with(argv, 2, msg);
  }
  const char *price[][2] = {{"cpu2 1e308\n", "1e308"}, {"cpu2 0x10\n", "0x10"}};
  for (int i = 0; i < 2; i++) {
    put("prices.tsv", price[i][0], prices, sizeof prices);
    char *argv[] = {HKPLAN_PATH, "--model",  model,  "--step-s",
                    "0.1",       "--batch",  "8",    "--server",
                    "cpu:2",     "--prices", prices, NULL};
    snprintf(msg, sizeof msg,
             "hkplan: %s:1: expected 'server price-per-hour' (a decimal "
             "number in 0 .. 1e6), found 'cpu2 %s'",
             prices, price[i][1]);
    refused(argv, msg);
  }
  snprintf(folder, sizeof folder, "%s", dir);
  char *argv[] = {HKPLAN_PATH, "--model",  model,  "--step-s",
                  "0.1",       "--batch",  "8",    "--server",
                  "cpu:2",     "--prices", folder, NULL};
  snprintf(msg, sizeof msg, "hkplan: price table %s: Is a directory", folder);
  refused(argv, msg);
}

/* --samples, --deadline, --budget and --prices only together; the CSV's
 * cost is empty without prices. */
static void combinations(void **s) {
  (void)s;
  char model[300], prices[300];
  put("m.tsv", "a\t1000\n", model, sizeof model);
  put("prices.tsv", "cpu2 4\n", prices, sizeof prices);
  const char *bad[][5] = {
      {"--deadline", "1", "", "",
       "hkplan: --deadline and --budget need --samples"},
      {"--samples", "1e6", "", "",
       "hkplan: --samples is used only with --deadline or --budget"},
      {"--samples", "1e6", "--budget", "5",
       "hkplan: --deadline and --budget pick the cheapest candidate: they "
       "need --prices"},
      {"--samples", "1e6", "--deadline", "1",
       "hkplan: --deadline and --budget pick the cheapest candidate: they "
       "need --prices"}};
  for (int i = 0; i < 4; i++) {
    char *argv[] = {
        HKPLAN_PATH,       "--model", model,      "--step-s", "0.1",
        "--batch",         "8",       "--server", "cpu:2",    (char *)bad[i][0],
        (char *)bad[i][1], NULL,      NULL,       NULL};
    if (bad[i][2][0]) {
      argv[11] = (char *)bad[i][2];
      argv[12] = (char *)bad[i][3];
    }
    refused_with(argv, 2, bad[i][4]);
  }
  char *csv[] = {HKPLAN_PATH, "--model", model,      "--step-s", "0.1",
                 "--batch",   "8",       "--server", "cpu:2",    "--servers",
                 "1",         "--csv",   NULL};
  hkt_result r;
  run(csv, NULL, &r);
  /* server,gpu,servers,gpus,net,step,band,exposed,eff,samples/s,COST,mem */
  const char *row = strstr(r.out, "\ncpu2,CPU,1,,"); /* no GPU count */
  int commas = 0;
  const char *p = row ? row + 1 : NULL;
  while (p && *p && commas < 10)
    commas += *p++ == ',';
  if (r.exit_code != 0 || !p || *p != ',')
    fail_msg("expected empty gpus and cost_per_msample fields in:\n%s\n%s",
             r.out, r.err);
  hkt_result_free(&r);
}

/* --plot FILE.png: a PNG through gnuplot; with no gnuplot on PATH, the
 * table all the same and the reason on stderr; a single candidate without
 * gnuplot's warnings; a PNG that cannot be written refused. */
static void plot(void **s) {
  (void)s;
  char png[300];
  snprintf(png, sizeof png, "%s/plan.png", dir);
  for (int with = 1; with >= 0; with--) {
    char *argv[] = {HKPLAN_PATH, "--model",  "resnet50",
                    "--step-s",  "0.1",      "--batch",
                    "8",         "--server", "t4-4gpu-pcie-2socket",
                    "--servers", "1,2",      "--net",
                    "10",        "--plot",   png,
                    NULL};
    char *no_path[] = {"PATH=/nonexistent", NULL};
    hkt_result r;
    unlink(png);
    run(argv, with ? NULL : no_path, &r);
    assert_int_equal(r.exit_code, 0);
    assert_non_null(strstr(r.out, "  2 t4-4gpu-pcie-2socket "));
    FILE *f = fopen(png, "rb");
    unsigned char magic[8] = {0};
    size_t got = f ? fread(magic, 1, sizeof magic, f) : 0;
    if (f)
      fclose(f);
    if (with && access("/usr/bin/gnuplot", X_OK) == 0) {
      if (got != 8 || memcmp(magic, "\x89PNG\r\n\x1a\n", 8) != 0)
        fail_msg("no PNG in %s (%zu bytes read):\n%s", png, got, r.err);
    } else if (!with) {
      assert_int_equal(got, 0);
      if (!strstr(r.err, "--plot needs gnuplot, not found on PATH"))
        fail_msg("expected the reason on stderr:\n%s", r.err);
    }
    hkt_result_free(&r);
  }
  unlink(png);
  /* one candidate: gnuplot's warnings (a one-point range) are not shown */
  char *one[] = {HKPLAN_PATH, "--model", "resnet50", "--step-s", "0.1",
                 "--batch",   "8",       "--server", "cpu:2",    "--servers",
                 "1",         "--plot",  png,        NULL};
  hkt_result r;
  run(one, NULL, &r);
  if (r.exit_code != 0 || r.err[0])
    fail_msg("expected exit 0 and nothing on stderr, got %d:\n%s", r.exit_code,
             r.err);
  hkt_result_free(&r);
  unlink(png);
  /* a PNG that cannot be written: exit 1, hk's own message */
  char *nowhere[] = {HKPLAN_PATH,
                     "--model",
                     "resnet50",
                     "--step-s",
                     "0.1",
                     "--batch",
                     "8",
                     "--server",
                     "cpu:2",
                     "--plot",
                     "/nonexistent/x.png",
                     NULL};
  refused_with(nowhere, 1,
               "hkplan: --plot: cannot write /nonexistent/x.png: No such "
               "file or directory");
}

/* hkrun --plan forwards its arguments to hkplan beside it. */
static void through_hkrun(void **s) {
  (void)s;
  char *argv[] = {HKRUN_PATH, "--plan", "--help", NULL};
  hkt_result r;
  run(argv, NULL, &r);
  assert_int_equal(r.exit_code, 0);
  if (!strstr(r.out, "usage: hkplan --model"))
    fail_msg("hkrun --plan --help printed:\n%s\n%s", r.out, r.err);
  hkt_result_free(&r);
}

static int make_dir(void **s) {
  (void)s;
  return hkt_mkdtemp("test_hkplan_", dir, sizeof dir);
}

static int remove_dir(void **s) {
  (void)s;
  return hkt_remove_tree(dir);
}

int main(void) {
  hkt_setup();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(recorded_batches),
      cmocka_unit_test(table_values),
      cmocka_unit_test(net_bench),
      cmocka_unit_test(check_measured),
      cmocka_unit_test(check_refused),
      cmocka_unit_test(pick),
      cmocka_unit_test(plot),
      cmocka_unit_test(bad_inputs),
      cmocka_unit_test(nonfinite_times),
      cmocka_unit_test(ranges),
      cmocka_unit_test(combinations),
      cmocka_unit_test(through_hkrun),
  };
  return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
