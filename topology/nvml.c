/* nvml.c - this machine's layout through NVML, loaded with dlopen at run
 * time through the shared loader (nvml_api.h). The CUDA toolkit ships no
 * NVML header here, so the few
 * types and entry points used are declared below from NVIDIA's NVML API
 * reference (docs.nvidia.com/deploy/nvml-api): nvmlPciInfo_t is the v3
 * layout that nvmlDeviceGetPciInfo_v3 and nvmlDeviceGetNvLinkRemotePciInfo_v2
 * fill; nvmlGpuTopologyLevel_t values are NVML_TOPOLOGY_INTERNAL 0, SINGLE
 * 10, MULTIPLE 20, HOSTBRIDGE 30, NODE 40, SYSTEM 50. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "topology/figures.h"
#include "topology/matrix.h"
#include "topology/nvml_api.h"
#include "topology/parse.h"

typedef hk_nvml_device nvml_device;
typedef struct nvml_pci_info {
  char bus_id_legacy[16];
  unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
} nvml_pci_info;

#define NVML_SUCCESS HK_NVML_SUCCESS
#define NVML_MAX_LINKS 18 /* NVML_NVLINK_MAX_LINKS (NVML 12) */
#define NVML_FEATURE_ENABLED 1

typedef struct nvml_api {
  hk_nvml core; /* the loader's (topology/nvml_api.h) */
  const char *(*error_string)(int);
  int (*get_count)(unsigned int *);
  int (*get_handle)(unsigned int, nvml_device *);
  int (*get_name)(nvml_device, char *, unsigned int);
  int (*get_pci)(nvml_device, nvml_pci_info *);
  int (*get_cc)(nvml_device, int *, int *);
  int (*get_affinity)(nvml_device, unsigned int, unsigned long *);
  int (*common_ancestor)(nvml_device, nvml_device, int *);
  int (*nvlink_state)(nvml_device, unsigned int, int *);
  int (*nvlink_remote_pci)(nvml_device, unsigned int, nvml_pci_info *);
  int (*remote_type)(nvml_device, unsigned int, int *); /* optional */
} nvml_api;

/* Opens NVML through the shared loader and resolves the topology's
 * entry points. */
static hk_status load_api(nvml_api *a, const char *lib) {
  memset(a, 0, sizeof *a);
  hk_status st = hk_nvml_open(lib, &a->core);
  if (st != HK_OK)
    return st;
  a->error_string = a->core.error_string;
  a->get_count = a->core.get_count;
  a->get_handle = a->core.get_handle;
  static const struct {
    const char *name;
    size_t off;
  } sym[] = {
      {"nvmlDeviceGetName", offsetof(nvml_api, get_name)},
      {"nvmlDeviceGetPciInfo_v3", offsetof(nvml_api, get_pci)},
      {"nvmlDeviceGetCudaComputeCapability", offsetof(nvml_api, get_cc)},
      {"nvmlDeviceGetCpuAffinity", offsetof(nvml_api, get_affinity)},
      {"nvmlDeviceGetTopologyCommonAncestor",
       offsetof(nvml_api, common_ancestor)},
      {"nvmlDeviceGetNvLinkState", offsetof(nvml_api, nvlink_state)},
      {"nvmlDeviceGetNvLinkRemotePciInfo_v2",
       offsetof(nvml_api, nvlink_remote_pci)},
  };
  for (size_t i = 0; i < sizeof sym / sizeof sym[0]; i++) {
    void *f = hk_nvml_sym(&a->core, sym[i].name);
    if (!f) {
      hk_nvml_close(&a->core);
      return hk_fail(HK_ERR_SYSTEM, "NVML (%s) lacks %s: driver too old?",
                     lib ? lib : HK_NVML_DEFAULT_LIBRARY, sym[i].name);
    }
    memcpy((char *)a + sym[i].off, &f, sizeof f);
  }
  void *f = hk_nvml_sym(&a->core, "nvmlDeviceGetNvLinkRemoteDeviceType");
  memcpy(&a->remote_type, &f, sizeof f);
  return HK_OK;
}

static hk_topo_path level_class(int level) {
  if (level <= 10)
    return HK_PATH_PIX; /* INTERNAL (same board) and SINGLE */
  if (level <= 20)
    return HK_PATH_PXB;
  if (level <= 30)
    return HK_PATH_PHB;
  if (level <= 40)
    return HK_PATH_NODE;
  return HK_PATH_SYS;
}

/* A CPU mask (array of unsigned long, lowest CPU first) as "0-23,48-71". */
static void mask_to_list(const unsigned long *mask, int words, char *out,
                         size_t cap) {
  size_t used = 0;
  out[0] = '\0';
  int bits = words * (int)(8 * sizeof(unsigned long));
  for (int c = 0; c < bits;) {
    int on = (mask[c / (8 * sizeof(unsigned long))] >>
              (c % (8 * sizeof(unsigned long)))) &
             1;
    if (!on) {
      c++;
      continue;
    }
    int e = c;
    while (e + 1 < bits && ((mask[(e + 1) / (8 * sizeof(unsigned long))] >>
                             ((e + 1) % (8 * sizeof(unsigned long)))) &
                            1))
      e++;
    int n =
        e > c
            ? snprintf(out + used, cap - used, "%s%d-%d", used ? "," : "", c, e)
            : snprintf(out + used, cap - used, "%s%d", used ? "," : "", c);
    if (n < 0 || (size_t)n >= cap - used) {
      out[used] = '\0';
      return;
    }
    used += (size_t)n;
    c = e + 1;
  }
}

static hk_status query(nvml_api *a, hk_topo_matrix *m) {
  unsigned int n = 0;
  int rc = a->get_count(&n);
  if (rc != NVML_SUCCESS)
    return hk_fail(HK_ERR_SYSTEM, "nvmlDeviceGetCount: %s",
                   a->error_string(rc));
  if (n == 0)
    return hk_fail(HK_ERR_SYSTEM, "NVML found no GPU");
  if (n > HK_TOPO_MAX_GPUS)
    return hk_fail(HK_ERR_CONFIG, "NVML reports %u GPUs, more than %d", n,
                   HK_TOPO_MAX_GPUS);
  nvml_device dev[HK_TOPO_MAX_GPUS];
  m->n_gpus = (int)n;
  int min_sm = 0;
  for (unsigned int i = 0; i < n; i++) {
    if ((rc = a->get_handle(i, &dev[i])) != NVML_SUCCESS)
      return hk_fail(HK_ERR_SYSTEM, "nvmlDeviceGetHandleByIndex(%u): %s", i,
                     a->error_string(rc));
    snprintf(m->name[i], HK_TOPO_NAME_LEN, "GPU%u", i);
    char name[96] = "";
    if (a->get_name(dev[i], name, sizeof name) == NVML_SUCCESS)
      snprintf(m->model[i], HK_TOPO_NAME_LEN, "%.*s", HK_TOPO_NAME_LEN - 1,
               name); /* NVML's names are shorter; cut, never overflow */
    nvml_pci_info pi;
    memset(&pi, 0, sizeof pi);
    if (a->get_pci(dev[i], &pi) == NVML_SUCCESS) {
      pi.bus_id[sizeof pi.bus_id - 1] = '\0';
      /* NVML writes 8 domain digits ("00000000:0F:00.0"); keep NCCL's 4. */
      const char *b = pi.bus_id;
      if (strlen(b) == 16)
        b += 4;
      for (int k = 0; b[k] && k < HK_TOPO_BUSID_LEN - 1; k++)
        m->busid[i][k] = (char)(b[k] >= 'A' && b[k] <= 'F' ? b[k] + 32 : b[k]);
    }
    int major = 0, minor = 0;
    if (a->get_cc(dev[i], &major, &minor) == NVML_SUCCESS)
      m->sm[i] = major * 10 + minor;
    if (i == 0 || m->sm[i] < min_sm)
      min_sm = m->sm[i];
    unsigned long mask[16] = {0};
    if (a->get_affinity(dev[i], 16, mask) == NVML_SUCCESS)
      mask_to_list(mask, 16, m->affinity[i], HK_TOPO_NAME_LEN);
    m->numa[i] = -1;
  }
  nvml_pci_info pci[HK_TOPO_MAX_GPUS];
  int direct[HK_TOPO_MAX_GPUS][HK_TOPO_MAX_GPUS] = {{0}};
  int to_switch[HK_TOPO_MAX_GPUS] = {0};
  for (unsigned int i = 0; i < n; i++) {
    memset(&pci[i], 0, sizeof pci[i]);
    if ((rc = a->get_pci(dev[i], &pci[i])) != NVML_SUCCESS)
      return hk_fail(HK_ERR_SYSTEM, "nvmlDeviceGetPciInfo(%u): %s", i,
                     a->error_string(rc));
  }
  for (unsigned int i = 0; i < n; i++) {
    m->cls[i][i] = HK_PATH_LOC;
    for (unsigned int j = i + 1; j < n; j++) {
      int level = 50;
      if ((rc = a->common_ancestor(dev[i], dev[j], &level)) != NVML_SUCCESS)
        return hk_fail(HK_ERR_SYSTEM,
                       "nvmlDeviceGetTopologyCommonAncestor(%u, %u): %s", i, j,
                       a->error_string(rc));
      m->cls[i][j] = m->cls[j][i] = level_class(level);
    }
    /* Each active link ends at another GPU of this list or, otherwise, at
     * an NVSwitch (or a CPU: told apart when the driver has
     * nvmlDeviceGetNvLinkRemoteDeviceType, 0 GPU, 1 CPU/NPU, 2 switch). */
    for (unsigned int l = 0; l < NVML_MAX_LINKS; l++) {
      int on = 0, type = 2;
      nvml_pci_info rp;
      memset(&rp, 0, sizeof rp);
      if (a->nvlink_state(dev[i], l, &on) != NVML_SUCCESS ||
          on != NVML_FEATURE_ENABLED ||
          a->nvlink_remote_pci(dev[i], l, &rp) != NVML_SUCCESS)
        continue;
      int peer = -1;
      for (unsigned int j = 0; j < n; j++)
        if (j != i && pci[j].domain == rp.domain && pci[j].bus == rp.bus &&
            pci[j].device == rp.device)
          peer = (int)j;
      if (peer >= 0)
        direct[i][peer]++;
      else if (!a->remote_type ||
               (a->remote_type(dev[i], l, &type) == NVML_SUCCESS && type == 2))
        to_switch[i]++;
    }
  }
  for (unsigned int i = 0; i < n; i++)
    for (unsigned int j = 0; j < n; j++) {
      if (i == j)
        continue;
      int v = direct[i][j] > direct[j][i] ? direct[i][j] : direct[j][i];
      if (v == 0 && to_switch[i] > 0 && to_switch[j] > 0)
        v = to_switch[i] < to_switch[j] ? to_switch[i] : to_switch[j];
      m->nvl[i][j] = v;
      if (v > 0)
        m->cls[i][j] = HK_PATH_NVL;
    }
  m->nvlink_gbps = hk_fig_nvlink_gbps(min_sm);
  m->pcie_gbps = HK_FIG_PCIE_DEFAULT_GBPS;
  m->sys_gbps = HK_FIG_SYS_DEFAULT_GBPS;
  return HK_OK;
}

hk_status hk_topo_load_nvml(const char *lib, hk_topo **out) {
  *out = NULL;
  nvml_api a;
  hk_status st = load_api(&a, lib);
  if (st != HK_OK)
    return st;
  hk_topo_matrix *m = calloc(1, sizeof *m);
  if (!m)
    st = hk_fail(HK_ERR_NOMEM, "NVML: out of memory");
  else
    st = query(&a, m);
  if (st == HK_OK)
    st = hk_topo_from_matrix(m, "nvml", out);
  if (st == HK_OK)
    hk_topo_add_note(*out,
                     "NVML gives no PCIe generation or CPU model: assumed "
                     "PCIe gen3 x16 %.1f GB/s and %.1f GB/s between sockets "
                     "(topology/figures.h); NVML names no NIC.",
                     HK_FIG_PCIE_DEFAULT_GBPS, HK_FIG_SYS_DEFAULT_GBPS);
  free(m);
  hk_nvml_close(&a.core);
  return st;
}
