/* figures.c - the tables of figures.h (sources are listed there). */
#include "topology/figures.h"

#include <math.h>
#include <string.h>

double hk_fig_nvlink_gbps(int sm) {
  if (sm >= 100)
    return 40.1;
  if (sm >= 90)
    return 20.6;
  if (sm == 86)
    return 12.0;
  if (sm >= 70)
    return 20.0;
  if (sm >= 60)
    return 18.0;
  return 20.0;
}

double hk_fig_pcie_gbps(double gt_s, int width) {
  static const struct {
    double gt, lane_gbps;
  } gen[] = {{2.5, 0.1875}, {5.0, 0.375}, {8.0, 0.75},
             {16.0, 1.5},   {32.0, 3.0},  {64.0, 6.0}};
  if (width == 0)
    width = 16;
  for (size_t i = 0; i < sizeof gen / sizeof gen[0]; i++)
    if (fabs(gt_s - gen[i].gt) < 0.01)
      return gen[i].lane_gbps * width;
  return 0.0;
}

double hk_fig_sys_gbps(const char *arch, const char *vendor, int family,
                       int model) {
  if (arch && (strstr(arch, "ppc") || strstr(arch, "power")))
    return 32.0;
  if (arch && (strstr(arch, "arm") || strstr(arch, "aarch")))
    return 6.0;
  if (vendor && strcmp(vendor, "GenuineIntel") == 0) {
    if (family != 6 || model < 0)
      return HK_FIG_SYS_DEFAULT_GBPS;
    if (model >= 0xCF)
      return 40.0;
    if (model >= 0x8F)
      return 22.0;
    if (model >= 0x55)
      return 10.0;
    return 6.0;
  }
  if (vendor && strcmp(vendor, "AuthenticAMD") == 0) {
    /* cpuid family 0x17 Zen 1/2, 0x19 Zen 3/4, 0x1A Zen 5; NCCL's dumps
     * also write family + extended family as base | ext << 4 (0x8F, 0xAF,
     * 0xBF). */
    if (family == 0x19 || family == 0xAF)
      return 24.0;
    if (family == 0x1A || family == 0xBF)
      return 32.0;
    return 16.0;
  }
  return HK_FIG_SYS_DEFAULT_GBPS;
}

/* [algo][proto][hw] */
static const double step_us[2][2][3] = {
    /* tree */ {{0.52, 1.0, 5.0}, {28.0, 28.0, 50.0}},
    /* ring */ {{0.47, 1.0, 2.7}, {3.4, 5.7, 9.6}},
};
static const double base_us[2][2] = {{4.4, 0.0}, {3.6, 8.4}};

double hk_fig_step_us(hk_fig_algo a, hk_fig_proto p, hk_fig_hw hw) {
  return step_us[a][p][hw];
}

double hk_fig_base_us(hk_fig_algo a, hk_fig_proto p) { return base_us[a][p]; }

double hk_fig_proto_bw_factor(hk_fig_algo a, hk_fig_proto p) {
  if (p == HK_PROTO_SIMPLE)
    return 1.0;
  return a == HK_FIG_RING ? 1.0 / 4.0 : 1.0 / 3.8;
}
