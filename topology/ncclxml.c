/* ncclxml.c - NCCL topology XML (NCCL_TOPO_FILE) into an hk_topo, with
 * expat (parse.h says what is read and what is an error). */
#include <ctype.h>
#include <expat.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "topology/figures.h"
#include "topology/parse.h"
#include "topology/xmlattr.h"

#define MAX_DEPTH 32
#define MAX_NVLINKS 1024

typedef enum kind {
  K_SYSTEM,
  K_CPU,
  K_PCI,
  K_GPU,
  K_NVLINK,
  K_NIC,
  K_NET
} kind;
static const char *kind_name[] = {"system", "cpu", "pci", "gpu",
                                  "nvlink", "nic", "net"};

typedef struct frame {
  kind k;
  int node; /* cpu/pci: its node id; gpu/nic: the pci (or cpu) node */
  int line;
  long cls;    /* pci: class */
  int has_dev; /* pci: DEV_GPU or DEV_NIC inside it; nic: a <net> */
} frame;

enum { DEV_NONE = 0, DEV_GPU = 1, DEV_NIC = 2 };

typedef struct pending_gpu {
  int node, dev, sm, line;
} pending_gpu;

typedef struct pending_nic {
  int node, dev, line;
} pending_nic;

typedef struct pending_nvlink {
  int gpu;                       /* node id of the GPU */
  char target[HK_XML_BUSID_LEN]; /* "" when the target is no bus id */
  int count, line;
  long tclass; /* -1: not given */
} pending_nvlink;

typedef struct cpu_info {
  char arch[16], vendor[16];
  long family, model;
} cpu_info;

typedef struct xstate {
  XML_Parser xp;
  hk_topo *t;
  hk_status st; /* first error */
  int depth, skip;
  frame stack[MAX_DEPTH];
  int seen_root;
  pending_gpu gpus[HK_TOPO_MAX_GPUS];
  int n_gpus;
  pending_nic nics[HK_TOPO_MAX_NICS];
  int n_nics;
  pending_nvlink *nvl;
  int n_nvl;
  cpu_info cpu[HK_TOPO_MAX_NODES];
  /* what was assumed, for the notes (finish) */
  int unknown_speed, unknown_width;
  int hidden_nvl; /* NVLink targets that are no visible PCI device */
  char hidden_target[24];
  int odd_tclass; /* NVLink tclass neither GPU, NVSwitch nor CPU */
  long odd_tclass_value;
  int self_nvl;      /* NVLink entries naming their own GPU */
  int extra_gpus;    /* further <gpu> entries on one PCI device */
  int repeated_nics; /* a <net> listed again (same dev and name) */
  char repeated_nic[HK_TOPO_NAME_LEN];
  int nets_without_dev, nets_not_net;
  /* NCCL's fused multi-host layouts: only the first host is read */
  char host_hash[24];
  int other_host_cpus;
} xstate;

static void fail(xstate *s, hk_status st) {
  if (s->st == HK_OK)
    s->st = st;
  XML_StopParser(s->xp, XML_FALSE);
}

static int line_of(xstate *s) { return (int)XML_GetCurrentLineNumber(s->xp); }

static hk_status bad_parent(const hk_xml_elem *e, const char *parent,
                            const char *want) {
  return hk_fail(HK_ERR_CONFIG, "line %d: <%s> inside <%s>: it belongs in %s",
                 e->line, e->name, parent, want);
}

/* link_speed "8 GT/s", "16.0 GT/s PCIe", "Unknown" and link_width into
 * GB/s. */
/* link_speed "8 GT/s", "16.0 GT/s PCIe", "Unknown" and link_width into
 * GB/s. NCCL writes link_speed="" and link_width="" (or "0") when sysfs
 * does not say; it then counts gen3 and x16, and so does hk. */
static hk_status pci_gbps(xstate *s, const hk_xml_elem *e, double *gbps) {
  long width = 0;
  const char *w = hk_xml_attr(e, "link_width");
  if (w && *w) {
    hk_status st = hk_xml_attr_long(e, "link_width", 0, 0, 64, 16, &width);
    if (st != HK_OK)
      return st;
  }
  if (w && width == 0)
    s->unknown_width++;
  else if (!w)
    width = 16;
  const char *sp = hk_xml_attr(e, "link_speed");
  if (!sp || !*sp || strcmp(sp, "Unknown") == 0) {
    s->unknown_speed++;
    *gbps = hk_fig_pcie_gbps(8.0, (int)width);
    return HK_OK;
  }
  char *end;
  double gt = strtod(sp, &end);
  while (*end == ' ')
    end++;
  double g = strncmp(end, "GT/s", 4) == 0 && (end[4] == '\0' || end[4] == ' ')
                 ? hk_fig_pcie_gbps(gt, (int)width)
                 : 0.0;
  if (!(g > 0.0))
    return hk_fail(HK_ERR_CONFIG,
                   "line %d: <pci>: unknown link_speed \"%.40s\" (known: 2.5, "
                   "5, 8, 16, 32, 64 GT/s)",
                   e->line, sp);
  *gbps = g;
  return HK_OK;
}

/* NCCL's affinity: a Linux cpumask, 32-bit hex words most significant
 * first ("0000ffff,0000ffff"), into a CPU list ("0-15,32-47"). */
static hk_status mask_to_list(const hk_xml_elem *e, const char *mask, char *out,
                              size_t cap) {
  enum { MAX_WORDS = 64 };
  unsigned long word[MAX_WORDS];
  int n = 0;
  const char *c = mask;
  while (*c) {
    char *end;
    if (n >= MAX_WORDS || !isxdigit((unsigned char)*c))
      goto bad;
    unsigned long v = strtoul(c, &end, 16);
    if (end - c > 8)
      goto bad;
    word[n++] = v;
    c = end;
    if (*c == ',')
      c++;
    else if (*c)
      goto bad;
  }
  size_t used = 0;
  out[0] = '\0';
  int bits = 32 * n;
  for (int b = 0; b < bits;) {
#define BIT(i) ((word[n - 1 - (i) / 32] >> ((i) % 32)) & 1u)
    if (!BIT(b)) {
      b++;
      continue;
    }
    int e2 = b;
    while (e2 + 1 < bits && BIT(e2 + 1))
      e2++;
#undef BIT
    int w = e2 > b
                ? snprintf(out + used, cap - used, "%s%d-%d", used ? "," : "",
                           b, e2)
                : snprintf(out + used, cap - used, "%s%d", used ? "," : "", b);
    if (w < 0 || (size_t)w >= cap - used)
      break; /* truncated: the list is for display only */
    used += (size_t)w;
    b = e2 + 1;
  }
  return HK_OK;
bad:
  return hk_fail(HK_ERR_CONFIG,
                 "line %d: <cpu>: attribute affinity=\"%.40s\" is not a CPU "
                 "mask (hex words separated by commas)",
                 e->line, mask);
}

static hk_status start_cpu(xstate *s, const hk_xml_elem *e) {
  long numa, fam, model;
  hk_status st = hk_xml_attr_long(e, "numaid", 0, -1, 4095, -1, &numa);
  if (st == HK_OK)
    st = hk_xml_attr_long(e, "familyid", 0, 0, 0xffff, -1, &fam);
  if (st == HK_OK)
    st = hk_xml_attr_long(e, "modelid", 0, 0, 0xffff, -1, &model);
  if (st != HK_OK)
    return st;
  char name[32];
  snprintf(name, sizeof name, "NUMA%ld", numa);
  int id;
  if ((st = hk_topo_add_node(s->t, HK_NODE_CPU, name, -1, &id)) != HK_OK)
    return st;
  hk_topo_node *nd = &s->t->node[id];
  nd->index = (int)numa;
  nd->numa = (int)numa;
  const char *aff = hk_xml_attr(e, "affinity");
  if (aff &&
      (st = mask_to_list(e, aff, nd->affinity, sizeof nd->affinity)) != HK_OK)
    return st;
  cpu_info *ci = &s->cpu[id];
  const char *arch = hk_xml_attr(e, "arch"), *vendor = hk_xml_attr(e, "vendor");
  snprintf(ci->arch, sizeof ci->arch, "%s", arch ? arch : "");
  snprintf(ci->vendor, sizeof ci->vendor, "%s", vendor ? vendor : "");
  snprintf(nd->model, sizeof nd->model, "%s", vendor ? vendor : "");
  ci->family = fam;
  ci->model = model;
  s->stack[s->depth].node = id;
  return HK_OK;
}

static hk_status start_pci(xstate *s, const hk_xml_elem *e, frame *parent) {
  const char *busid, *cls_s;
  char bus[HK_XML_BUSID_LEN];
  hk_status st = hk_xml_attr_req(e, "busid", &busid);
  if (st == HK_OK)
    st = hk_xml_busid(e, "busid", busid, bus);
  if (st == HK_OK)
    st = hk_xml_attr_req(e, "class", &cls_s);
  long cls;
  if (st == HK_OK)
    st = hk_xml_attr_long(e, "class", 1, 0, 0xffffff, 0, &cls);
  double gbps = 0;
  if (st == HK_OK)
    st = pci_gbps(s, e, &gbps);
  if (st != HK_OK)
    return st;
  for (int n = 0; n < s->t->n_nodes; n++)
    if (strcmp(s->t->node[n].busid, bus) == 0)
      return hk_fail(HK_ERR_CONFIG, "line %d: <pci>: bus id %s appears twice",
                     e->line, bus);
  int id;
  if ((st = hk_topo_add_node(s->t, HK_NODE_PCI, bus, parent->node, &id)) !=
      HK_OK)
    return st;
  snprintf(s->t->node[id].busid, sizeof s->t->node[id].busid, "%s", bus);
  if ((st = hk_topo_add_link(s->t, id, parent->node, HK_LINK_PCI, 0, gbps,
                             HK_FIG_PCI_HOP_US)) != HK_OK)
    return st;
  frame *f = &s->stack[s->depth];
  f->node = id;
  f->cls = cls;
  return HK_OK;
}

static hk_status start_gpu(xstate *s, const hk_xml_elem *e, frame *parent) {
  long dev, sm;
  hk_status st = hk_xml_attr_long(e, "dev", 1, 0, 1023, 0, &dev);
  if (st == HK_OK)
    st = hk_xml_attr_long(e, "sm", 0, 0, 1000, 0, &sm);
  if (st != HK_OK)
    return st;
  for (int i = 0; i < s->n_gpus; i++)
    if (s->gpus[i].dev == dev)
      return hk_fail(HK_ERR_CONFIG,
                     "line %d: <gpu>: dev %ld appears twice (also line %d, "
                     "on another PCI device)",
                     e->line, dev, s->gpus[i].line);
  if (s->n_gpus >= HK_TOPO_MAX_GPUS)
    return hk_fail(HK_ERR_CONFIG, "line %d: <gpu>: more than %d GPUs", e->line,
                   HK_TOPO_MAX_GPUS);
  parent->has_dev = DEV_GPU;
  s->gpus[s->n_gpus] = (pending_gpu){parent->node, (int)dev, (int)sm, e->line};
  s->stack[s->depth].node = s->n_gpus++;
  return HK_OK;
}

/* NCCL's name for an NVLink peer that NVML cannot see (an NVSwitch hidden
 * from a VM or container): domain, bus and device all f's, in whatever
 * shape the version wrote ("fffffff:ffff:ff", "fffffff:ff:ff.0"). */
static int hidden_target(const char *t) {
  int f = 0;
  for (; *t && *t != '.'; t++) {
    if (*t == 'f' || *t == 'F')
      f++;
    else if (*t != ':')
      return 0;
  }
  return f >= 6;
}

static hk_status start_nvlink(xstate *s, const hk_xml_elem *e, frame *parent) {
  const char *target;
  char bus[HK_XML_BUSID_LEN] = "";
  long count, tclass;
  hk_status st = hk_xml_attr_req(e, "target", &target);
  if (st == HK_OK)
    st = hk_xml_attr_long(e, "count", 1, 1, 64, 0, &count);
  if (st == HK_OK)
    st = hk_xml_attr_long(e, "tclass", 0, 0, 0xffffff, -1, &tclass);
  if (st != HK_OK)
    return st;
  /* NCCL reads the target only when tclass says GPU; it names the GPU's
   * bus id. Any other target is an NVSwitch or the CPU, which NCCL merges
   * into one node whatever the target says. */
  int is_gpu = tclass >= 0 && (tclass >> 16) == 0x03;
  int hidden = hidden_target(target);
  if (!hk_xml_parse_busid(target, bus) || hidden) {
    if (is_gpu)
      return hk_fail(HK_ERR_CONFIG,
                     "line %d: <nvlink>: target=\"%.40s\" is not a GPU's PCI "
                     "bus id, but tclass 0x%06lx says the peer is a GPU",
                     e->line, target, tclass);
    if (tclass < 0 && !hidden)
      return hk_xml_busid(e, "target", target, bus); /* the bus id error */
    bus[0] = '\0';
    if (s->hidden_nvl++ == 0)
      snprintf(s->hidden_target, sizeof s->hidden_target, "%s", target);
  }
  if (s->n_nvl >= MAX_NVLINKS)
    return hk_fail(HK_ERR_CONFIG, "line %d: <nvlink>: more than %d", e->line,
                   MAX_NVLINKS);
  pending_nvlink *p = &s->nvl[s->n_nvl++];
  p->gpu = s->gpus[parent->node].node; /* the GPU's pci node id */
  memcpy(p->target, bus, sizeof p->target);
  p->count = (int)count;
  p->tclass = tclass;
  p->line = e->line;
  return HK_OK;
}

static hk_status start_net(xstate *s, const hk_xml_elem *e, frame *nic) {
  const char *name, *net = hk_xml_attr(e, "net");
  long dev, speed;
  hk_status st = hk_xml_attr_req(e, "name", &name);
  if (st != HK_OK)
    return st;
  /* NCCL adds a <net> only when it has a dev, and as a network device only
   * unless net="0" (a GIN or CollNet-only device) */
  if (!hk_xml_attr(e, "dev")) {
    s->nets_without_dev++;
    return HK_OK;
  }
  if (net && strcmp(net, "0") == 0) {
    s->nets_not_net++;
    return HK_OK;
  }
  st = hk_xml_attr_long(e, "dev", 1, 0, 1023, 0, &dev);
  if (st == HK_OK)
    st = hk_xml_attr_long(e, "speed", 0, -1, 100000000, 0, &speed);
  if (st != HK_OK)
    return st;
  if (speed <= 0)
    speed = 10000; /* some NICs say -1; NCCL counts them as 10 Gbit/s */
  for (int i = 0; i < s->n_nics; i++) {
    if (s->nics[i].dev != dev)
      continue;
    const char *was = s->t->node[s->nics[i].node].name;
    if (strcmp(was, name) != 0)
      return hk_fail(HK_ERR_CONFIG,
                     "line %d: <net>: dev %ld is \"%.40s\" here but \"%.40s\" "
                     "on line %d",
                     e->line, dev, name, was, s->nics[i].line);
    /* NCCL lists a NIC that is on no PCIe bus (a socket NIC, a virtual
     * one) again under every <cpu>: one NIC, at its first place */
    if (s->repeated_nics++ == 0)
      snprintf(s->repeated_nic, sizeof s->repeated_nic, "%s", name);
    return HK_OK;
  }
  if (s->n_nics >= HK_TOPO_MAX_NICS)
    return hk_fail(HK_ERR_CONFIG, "line %d: <net>: more than %d NICs", e->line,
                   HK_TOPO_MAX_NICS);
  /* The first net of a <nic> in a <pci> is that pci node; a <nic> right
   * under a <cpu>, or a second port, gets a node of its own. */
  int holder = nic->node, id;
  hk_topo_node *h = &s->t->node[holder];
  if (h->kind == HK_NODE_PCI && !nic->has_dev) {
    id = holder;
  } else {
    st = hk_topo_add_node(s->t, HK_NODE_PCI, name, holder, &id);
    if (st == HK_OK)
      st = hk_topo_add_link(s->t, id, holder, HK_LINK_PCI, 0,
                            HK_FIG_PCIE_DEFAULT_GBPS, HK_FIG_PCI_HOP_US);
    if (st != HK_OK)
      return st;
  }
  nic->has_dev = 1;
  hk_topo_node *nd = &s->t->node[id];
  snprintf(nd->name, sizeof nd->name, "%s", name);
  nd->nic_gbit = (double)speed / 1000.0;
  s->nics[s->n_nics++] = (pending_nic){id, (int)dev, e->line};
  return HK_OK;
}

/* A <cpu> of another host in a fused multi-host layout (NCCL's MNNVL
 * dumps carry every host of the NVLink domain, told apart by host_hash)? */
static int other_host(xstate *s, const hk_xml_elem *e) {
  const char *h = hk_xml_attr(e, "host_hash");
  if (!h)
    return 0;
  if (!s->host_hash[0]) {
    snprintf(s->host_hash, sizeof s->host_hash, "%s", h);
    return 0;
  }
  return strcmp(h, s->host_hash) != 0;
}

static hk_status start(xstate *s, const char *name, const char **atts) {
  hk_xml_elem e = {name, line_of(s), atts};
  if (s->skip) {
    s->skip++;
    return HK_OK;
  }
  if (!s->seen_root) {
    s->seen_root = 1;
    if (strcmp(name, "graphs") == 0)
      return hk_fail(HK_ERR_CONFIG,
                     "line %d: <graphs>: this is an NCCL graph file "
                     "(NCCL_GRAPH_FILE: <graphs><graph><channel>...), not a "
                     "topology (NCCL_TOPO_FILE: <system><cpu><pci>...)",
                     e.line);
    if (strcmp(name, "system") != 0)
      return hk_fail(HK_ERR_CONFIG,
                     "line %d: root element <%s>: an NCCL topology starts "
                     "with <system>",
                     e.line, name);
    const char *v = hk_xml_attr(&e, "version");
    if (v && strcmp(v, "1") != 0)
      return hk_fail(HK_ERR_CONFIG,
                     "line %d: <system>: version \"%.20s\": NCCL reads "
                     "topology version 1 only (NCCL_TOPO_XML_VERSION)",
                     e.line, v);
    s->stack[0] = (frame){K_SYSTEM, -1, e.line, 0, 0};
    s->depth = 0;
    return HK_OK;
  }
  int k = -1;
  for (int i = 0; i < (int)(sizeof kind_name / sizeof kind_name[0]); i++)
    if (strcmp(name, kind_name[i]) == 0)
      k = i;
  if (k < 0) {
    s->skip = 1; /* an element hk does not use, and all inside it */
    return HK_OK;
  }
  if (s->depth + 1 >= MAX_DEPTH)
    return hk_fail(HK_ERR_CONFIG, "line %d: <%s>: nested deeper than %d",
                   e.line, name, MAX_DEPTH);
  frame *parent = &s->stack[s->depth];
  const char *pn = kind_name[parent->k];
  switch ((kind)k) {
  case K_SYSTEM:
    return hk_fail(HK_ERR_CONFIG, "line %d: <system> inside <%s>", e.line, pn);
  case K_CPU:
    if (parent->k != K_SYSTEM)
      return bad_parent(&e, pn, "<system>");
    if (other_host(s, &e)) {
      s->other_host_cpus++;
      s->skip = 1; /* another host's CPU, and all inside it */
      return HK_OK;
    }
    break;
  case K_PCI:
    if (parent->k != K_CPU && parent->k != K_PCI)
      return bad_parent(&e, pn, "<cpu> or <pci>");
    break;
  case K_GPU:
    if (parent->k != K_PCI)
      return bad_parent(&e, pn, "<pci>");
    if (parent->has_dev == DEV_NIC)
      return hk_fail(HK_ERR_CONFIG,
                     "line %d: <gpu>: its <pci> (line %d) already holds a "
                     "NIC",
                     e.line, parent->line);
    if (parent->has_dev == DEV_GPU) {
      /* NCCL writes one <gpu> per rank: several ranks on one GPU, or the
       * MLOPart halves of one, repeat it. One PCI device, one GPU. */
      s->extra_gpus++;
      s->skip = 1;
      return HK_OK;
    }
    break;
  case K_NVLINK:
    if (parent->k != K_GPU)
      return bad_parent(&e, pn, "<gpu>");
    break;
  case K_NIC:
    if (parent->k != K_PCI && parent->k != K_CPU)
      return bad_parent(&e, pn, "<pci> or <cpu>");
    if (parent->k == K_PCI && parent->has_dev == DEV_GPU)
      return hk_fail(HK_ERR_CONFIG,
                     "line %d: <nic>: its <pci> (line %d) already holds a "
                     "GPU",
                     e.line, parent->line);
    break;
  case K_NET:
    if (parent->k != K_NIC)
      return bad_parent(&e, pn, "<nic>");
    break;
  }
  s->depth++;
  s->stack[s->depth] = (frame){(kind)k, parent->node, e.line, 0, 0};
  switch ((kind)k) {
  case K_CPU:
    return start_cpu(s, &e);
  case K_PCI:
    return start_pci(s, &e, parent);
  case K_GPU:
    return start_gpu(s, &e, parent);
  case K_NVLINK:
    return start_nvlink(s, &e, parent);
  case K_NIC:
    if (parent->k == K_PCI)
      parent->has_dev = DEV_NIC;
    return HK_OK;
  case K_NET:
    return start_net(s, &e, parent);
  default:
    return HK_OK;
  }
}

static void XMLCALL on_start(void *ud, const XML_Char *name,
                             const XML_Char **atts) {
  xstate *s = ud;
  hk_status st = start(s, name, atts);
  if (st != HK_OK)
    fail(s, st);
}

static void XMLCALL on_end(void *ud, const XML_Char *name) {
  (void)name;
  xstate *s = ud;
  if (s->skip) {
    s->skip--;
    return;
  }
  if (s->depth <= 0)
    return;
  frame *f = &s->stack[s->depth];
  if (f->k == K_PCI && !f->has_dev) {
    if ((f->cls >> 16) == 0x03)
      s->t->gpu_slots++;
    else if ((f->cls >> 16) == 0x02)
      s->t->nic_slots++;
  }
  if (f->k == K_NIC && s->stack[s->depth - 1].k == K_PCI && f->has_dev == 0) {
    /* a <nic> without <net>: the pci still counts as a NIC slot */
    s->t->nic_slots++;
  }
  s->depth--;
}

static void XMLCALL on_doctype(void *ud, const XML_Char *name,
                               const XML_Char *sysid, const XML_Char *pubid,
                               int has_internal) {
  (void)name, (void)sysid, (void)pubid, (void)has_internal;
  xstate *s = ud;
  fail(s, hk_fail(HK_ERR_CONFIG,
                  "line %d: <!DOCTYPE>: not allowed in an NCCL topology",
                  line_of(s)));
}

/* --- after the document: GPUs and NICs in dev order, NVLinks, SYS --- */

static int by_dev(const void *a, const void *b) {
  return ((const pending_gpu *)a)->dev - ((const pending_gpu *)b)->dev;
}
static int nic_by_dev(const void *a, const void *b) {
  return ((const pending_nic *)a)->dev - ((const pending_nic *)b)->dev;
}

/* What the reader assumed, in hktopo's note, as NCCL assumes it. */
static void add_notes(xstate *s) {
  hk_topo *t = s->t;
  if (s->other_host_cpus)
    hk_topo_add_note(t,
                     "The file describes more than one host (a fused "
                     "multi-host layout); read the first, host_hash %s "
                     "(%d <cpu> elements of other hosts skipped).",
                     s->host_hash, s->other_host_cpus);
  if (s->hidden_nvl)
    hk_topo_add_note(t,
                     "%d NVLink entries lead to a device that is not visible "
                     "(target \"%s\": an NVSwitch hidden from a VM or "
                     "container): counted as NVSwitch links, as NCCL does.",
                     s->hidden_nvl, s->hidden_target);
  if (s->odd_tclass)
    hk_topo_add_note(t,
                     "%d NVLink entries have tclass 0x%06lx, neither GPU nor "
                     "CPU: counted as NVSwitch links, as NCCL does.",
                     s->odd_tclass, s->odd_tclass_value);
  if (s->self_nvl)
    hk_topo_add_note(t,
                     "%d NVLink entries name their own GPU as the peer: "
                     "ignored (they join the GPU to nothing).",
                     s->self_nvl);
  if (s->extra_gpus)
    hk_topo_add_note(t,
                     "%d further <gpu> entries share a PCI device with "
                     "another (one per rank: several ranks on one GPU, or "
                     "MLOPart halves): each PCI device is one GPU.",
                     s->extra_gpus);
  if (s->repeated_nics)
    hk_topo_add_note(t,
                     "NIC %s is listed %d times (NCCL lists a "
                     "NIC on no PCIe bus under every CPU): one NIC, placed "
                     "where it is first listed.",
                     s->repeated_nic, s->repeated_nics + 1);
  if (s->nets_without_dev || s->nets_not_net)
    hk_topo_add_note(t,
                     "%d <net> entries without dev and %d with net=\"0\" are "
                     "not network devices for NCCL: skipped.",
                     s->nets_without_dev, s->nets_not_net);
  if (s->unknown_speed)
    hk_topo_add_note(t,
                     "%d PCIe links give no link_speed: counted as gen3 "
                     "(8 GT/s).",
                     s->unknown_speed);
  if (s->unknown_width)
    hk_topo_add_note(t,
                     "%d PCIe links give link_width empty or 0: counted as "
                     "x16, as NCCL does.",
                     s->unknown_width);
}

static hk_status finish(xstate *s) {
  hk_topo *t = s->t;
  qsort(s->gpus, (size_t)s->n_gpus, sizeof s->gpus[0], by_dev);
  for (int i = 0; i < s->n_gpus; i++) {
    pending_gpu *g = &s->gpus[i];
    hk_topo_node *nd = &t->node[g->node];
    nd->kind = HK_NODE_GPU;
    nd->index = i;
    nd->sm = g->sm;
    snprintf(nd->name, sizeof nd->name, "GPU%d", g->dev);
    t->gpu[i] = g->node;
  }
  t->n_gpus = s->n_gpus;
  qsort(s->nics, (size_t)s->n_nics, sizeof s->nics[0], nic_by_dev);
  for (int i = 0; i < s->n_nics; i++) {
    hk_topo_node *nd = &t->node[s->nics[i].node];
    nd->kind = HK_NODE_NIC;
    nd->index = i;
    t->nic[i] = s->nics[i].node;
  }
  t->n_nics = s->n_nics;

  /* SMP links between every two CPU roots. */
  hk_status st;
  for (int a = 0; a < t->n_nodes; a++)
    for (int b = a + 1; b < t->n_nodes; b++) {
      if (t->node[a].kind != HK_NODE_CPU || t->node[b].kind != HK_NODE_CPU)
        continue;
      const cpu_info *ca = &s->cpu[a], *cb = &s->cpu[b];
      double ga = hk_fig_sys_gbps(ca->arch, ca->vendor, (int)ca->family,
                                  (int)ca->model);
      double gb = hk_fig_sys_gbps(cb->arch, cb->vendor, (int)cb->family,
                                  (int)cb->model);
      if ((st = hk_topo_add_link(t, a, b, HK_LINK_SYS, 0, fmin(ga, gb),
                                 HK_FIG_SYS_HOP_US)) != HK_OK)
        return st;
    }

  /* NVLinks: GPU pairs take the larger count either side declares; links
   * to NVSwitches add up per GPU; links to a CPU join the GPU's CPU. */
  int pair[HK_TOPO_MAX_GPUS][HK_TOPO_MAX_GPUS];
  int to_switch[HK_TOPO_MAX_GPUS] = {0}, to_cpu[HK_TOPO_MAX_GPUS] = {0};
  memset(pair, 0, sizeof pair);
  int skipped = 0;
  for (int i = 0; i < s->n_nvl; i++) {
    pending_nvlink *p = &s->nvl[i];
    int from = -1, to = -1;
    for (int g = 0; g < t->n_gpus; g++) {
      if (t->gpu[g] == p->gpu)
        from = g;
      if (p->target[0] && strcmp(t->node[t->gpu[g]].busid, p->target) == 0)
        to = g;
    }
    long tc = p->tclass;
    if (tc < 0)
      tc = to >= 0 ? 0x030000 : 0x068000;
    if ((tc >> 16) == 0x03) {
      if (to < 0) {
        skipped++;
      } else if (to == from) {
        s->self_nvl++; /* NCCL reads it; it joins the GPU to nothing */
      } else if (p->count > pair[from][to]) {
        pair[from][to] = p->count;
      }
    } else if (tc == 0x068001 || tc == 0x060000) {
      to_cpu[from] += p->count;
    } else {
      /* NCCL: a peer that is neither a GPU nor the CPU is an NVSwitch */
      if (tc != 0x068000 && s->odd_tclass++ == 0)
        s->odd_tclass_value = tc;
      to_switch[from] += p->count;
    }
  }
  if (skipped)
    hk_topo_add_note(t,
                     "%d NVLink entries name a GPU that is not in the file; "
                     "skipped.",
                     skipped);
  int sw = -1;
  for (int a = 0; a < t->n_gpus; a++) {
    int sma = t->node[t->gpu[a]].sm;
    for (int b = a + 1; b < t->n_gpus; b++) {
      int n = pair[a][b] > pair[b][a] ? pair[a][b] : pair[b][a];
      int smb = t->node[t->gpu[b]].sm;
      double per = hk_fig_nvlink_gbps(sma < smb ? sma : smb);
      if (n > 0 &&
          (st = hk_topo_add_link(t, t->gpu[a], t->gpu[b], HK_LINK_NVL, n,
                                 n * per, HK_FIG_NVL_HOP_US)) != HK_OK)
        return st;
    }
    double per = hk_fig_nvlink_gbps(sma);
    if (to_switch[a] > 0) {
      if (sw < 0 && (st = hk_topo_add_node(t, HK_NODE_NVSWITCH, "NVSwitch", -1,
                                           &sw)) != HK_OK)
        return st;
      if ((st = hk_topo_add_link(t, t->gpu[a], sw, HK_LINK_NVL, to_switch[a],
                                 to_switch[a] * per, HK_FIG_NVL_HOP_US)) !=
          HK_OK)
        return st;
    }
    int cpu = t->node[t->gpu[a]].cpu;
    if (to_cpu[a] > 0 && cpu >= 0 &&
        (st = hk_topo_add_link(t, t->gpu[a], cpu, HK_LINK_NVL, to_cpu[a],
                               to_cpu[a] * per, HK_FIG_NVL_HOP_US)) != HK_OK)
      return st;
  }
  add_notes(s);
  if (t->n_gpus == 0)
    hk_topo_add_note(t,
                     "No <gpu> element: a skeleton listing %d GPU-class and "
                     "%d NIC-class PCIe slots; NCCL fills the devices in at "
                     "run time.",
                     t->gpu_slots, t->nic_slots);
  return hk_topo_compute_paths(t, 0);
}

hk_status hk_topo_parse_ncclxml(const char *text, size_t len, hk_topo **out) {
  *out = NULL;
  if (len > HK_TOPO_MAX_FILE_BYTES || len > (size_t)0x7fffffff)
    return hk_fail(HK_ERR_CONFIG, "NCCL XML: %zu bytes, more than %u", len,
                   HK_TOPO_MAX_FILE_BYTES);
  xstate *s = calloc(1, sizeof *s);
  hk_status st;
  if (!s)
    return hk_fail(HK_ERR_NOMEM, "NCCL XML: out of memory");
  s->nvl = calloc(MAX_NVLINKS, sizeof *s->nvl);
  if (!s->nvl || (st = hk_topo_new(&s->t)) != HK_OK) {
    free(s->nvl);
    free(s);
    return hk_fail(HK_ERR_NOMEM, "NCCL XML: out of memory");
  }
  snprintf(s->t->source, sizeof s->t->source, "ncclxml");
  s->xp = XML_ParserCreate(NULL);
  if (!s->xp) {
    st = hk_fail(HK_ERR_NOMEM, "NCCL XML: out of memory (expat)");
    goto done;
  }
  XML_SetUserData(s->xp, s);
  XML_SetElementHandler(s->xp, on_start, on_end);
  XML_SetStartDoctypeDeclHandler(s->xp, on_doctype);
  if (XML_Parse(s->xp, text, (int)len, XML_TRUE) == XML_STATUS_ERROR &&
      s->st == HK_OK)
    s->st = hk_fail(HK_ERR_CONFIG, "line %d: malformed XML: %s",
                    (int)XML_GetCurrentLineNumber(s->xp),
                    XML_ErrorString(XML_GetErrorCode(s->xp)));
  st = s->st;
  if (st == HK_OK && !s->seen_root)
    st = hk_fail(HK_ERR_CONFIG, "NCCL XML: no element at all");
  if (st == HK_OK)
    st = finish(s);
done:
  if (s->xp)
    XML_ParserFree(s->xp);
  if (st == HK_OK)
    *out = s->t;
  else
    hk_topo_free(s->t);
  free(s->nvl);
  free(s);
  return st;
}
