/* smi.c - the text of `nvidia-smi topo -m` into an hk_topo (parse.h). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "topology/figures.h"
#include "topology/matrix.h"
#include "topology/parse.h"

#define MAX_LINE 4096
#define MAX_TOKENS 256

typedef enum aff_col { AFF_CPU = 0, AFF_NUMA = 1, AFF_GPU_NUMA = 2 } aff_col;
static const char *aff_name[] = {"CPU Affinity", "NUMA Affinity",
                                 "GPU NUMA ID"};

typedef struct line {
  int no; /* 1-based */
  char buf[MAX_LINE + 1];
  int ntok;
  char *tok[MAX_TOKENS];
} line;

typedef struct reader {
  const char *p, *end;
  int no;
} reader;

/* Next line into l, cleaned (ANSI CSI sequences and '\r' removed) and
 * split into tokens. Returns 0 at end of input, 1 for a line, or an error
 * status negated. */
static int next_line(reader *r, line *l, hk_status *err) {
  if (r->p >= r->end)
    return 0;
  const char *s = r->p;
  const char *nl = memchr(s, '\n', (size_t)(r->end - s));
  const char *e = nl ? nl : r->end;
  r->p = nl ? nl + 1 : r->end;
  l->no = ++r->no;
  size_t n = 0;
  for (const char *c = s; c < e; c++) {
    unsigned char ch = (unsigned char)*c;
    if (ch == 0x1b) { /* ESC [ params intermediates final */
      if (c + 1 >= e || c[1] != '[') {
        *err = hk_fail(HK_ERR_CONFIG,
                       "line %d: escape character not followed by '['", l->no);
        return -1;
      }
      c += 2;
      while (c < e && (unsigned char)*c >= 0x20 && (unsigned char)*c <= 0x3f)
        c++;
      if (c >= e || (unsigned char)*c < 0x40 || (unsigned char)*c > 0x7e) {
        *err = hk_fail(HK_ERR_CONFIG, "line %d: unterminated escape sequence",
                       l->no);
        return -1;
      }
      continue;
    }
    if (ch == '\r')
      continue;
    if (ch < 0x20 && ch != '\t') {
      *err = hk_fail(HK_ERR_CONFIG, "line %d: control character 0x%02x", l->no,
                     ch);
      return -1;
    }
    if (n >= MAX_LINE) {
      *err = hk_fail(HK_ERR_CONFIG, "line %d: longer than %d bytes", l->no,
                     MAX_LINE);
      return -1;
    }
    l->buf[n++] = (char)ch;
  }
  l->buf[n] = '\0';
  l->ntok = 0;
  char *c = l->buf;
  for (;;) {
    while (*c == ' ' || *c == '\t')
      c++;
    if (!*c)
      break;
    if (l->ntok >= MAX_TOKENS) {
      *err = hk_fail(HK_ERR_CONFIG, "line %d: more than %d columns", l->no,
                     MAX_TOKENS);
      return -1;
    }
    l->tok[l->ntok++] = c;
    while (*c && *c != ' ' && *c != '\t')
      c++;
    if (*c)
      *c++ = '\0';
  }
  return 1;
}

static int is_gpu_name(const char *s, int *idx) {
  if (strncmp(s, "GPU", 3) != 0 || !isdigit((unsigned char)s[3]))
    return 0;
  char *end;
  long v = strtol(s + 3, &end, 10);
  if (*end || v > 100000)
    return 0;
  *idx = (int)v;
  return 1;
}

/* One legend token. Returns 1 if known. */
static int legend(const char *s, hk_topo_path *cls, int *nv) {
  static const struct {
    const char *tok;
    hk_topo_path cls;
  } fixed[] = {{"X", HK_PATH_LOC},     {"PIX", HK_PATH_PIX},
               {"PXB", HK_PATH_PXB},   {"PHB", HK_PATH_PHB},
               {"NODE", HK_PATH_NODE}, {"SYS", HK_PATH_SYS},
               {"SOC", HK_PATH_SYS}};
  *nv = 0;
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
    if (strcmp(s, fixed[i].tok) == 0) {
      *cls = fixed[i].cls;
      return 1;
    }
  if (strncmp(s, "NV", 2) == 0 && isdigit((unsigned char)s[2])) {
    char *end;
    long v = strtol(s + 2, &end, 10);
    if (*end || v < 1 || v > HK_TOPO_MAX_NV)
      return 0;
    *cls = HK_PATH_NVL;
    *nv = (int)v;
    return 1;
  }
  return 0;
}

/* "N/A", or comma-separated decimal numbers and ranges ("0-23,48-71"). */
static int valid_cpu_list(const char *s) {
  if (strcmp(s, "N/A") == 0)
    return 1;
  const char *c = s;
  for (;;) {
    if (!isdigit((unsigned char)*c))
      return 0;
    while (isdigit((unsigned char)*c))
      c++;
    if (*c == '-') {
      c++;
      if (!isdigit((unsigned char)*c))
        return 0;
      while (isdigit((unsigned char)*c))
        c++;
    }
    if (*c == '\0')
      return 1;
    if (*c++ != ',')
      return 0;
  }
}

static int looks_like_value(const char *s) {
  return isdigit((unsigned char)s[0]) || strcmp(s, "N/A") == 0;
}

typedef struct parser {
  hk_topo_matrix *m;
  int n_dev;
  int n_aff;
  aff_col aff[3];
  int row_line[HK_TOPO_MAX_DEVS];
} parser;

static hk_status parse_header(parser *ps, const line *l) {
  hk_topo_matrix *m = ps->m;
  int gpu_idx;
  if (!is_gpu_name(l->tok[0], &gpu_idx) || gpu_idx != 0)
    return hk_fail(HK_ERR_CONFIG,
                   "line %d: expected the header of `nvidia-smi topo -m` "
                   "(GPU0 GPU1 ... CPU Affinity), found '%s'",
                   l->no, l->tok[0]);
  for (int i = 0; i < l->ntok; i++) {
    const char *w = l->tok[i];
    int col = -1;
    if (strcmp(w, "CPU") == 0 && i + 1 < l->ntok &&
        strcmp(l->tok[i + 1], "Affinity") == 0)
      col = AFF_CPU, i += 1;
    else if (strcmp(w, "NUMA") == 0 && i + 1 < l->ntok &&
             strcmp(l->tok[i + 1], "Affinity") == 0)
      col = AFF_NUMA, i += 1;
    else if (strcmp(w, "GPU") == 0 && i + 2 < l->ntok &&
             strcmp(l->tok[i + 1], "NUMA") == 0 &&
             strcmp(l->tok[i + 2], "ID") == 0)
      col = AFF_GPU_NUMA, i += 2;
    if (col >= 0) {
      for (int k = 0; k < ps->n_aff; k++)
        if (ps->aff[k] == (aff_col)col)
          return hk_fail(HK_ERR_CONFIG, "line %d: column '%s' appears twice",
                         l->no, aff_name[col]);
      ps->aff[ps->n_aff++] = (aff_col)col;
      continue;
    }
    if (ps->n_aff > 0)
      return hk_fail(HK_ERR_CONFIG,
                     "line %d: unknown column '%s' after the affinity "
                     "columns (known: CPU Affinity, NUMA Affinity, GPU NUMA "
                     "ID)",
                     l->no, w);
    if (ps->n_dev >= HK_TOPO_MAX_DEVS)
      return hk_fail(HK_ERR_CONFIG, "line %d: more than %d device columns",
                     l->no, HK_TOPO_MAX_DEVS);
    for (int k = 0; k < ps->n_dev; k++)
      if (strcmp(m->name[k], w) == 0)
        return hk_fail(HK_ERR_CONFIG, "line %d: column '%s' appears twice",
                       l->no, w);
    if (strlen(w) >= HK_TOPO_NAME_LEN)
      return hk_fail(HK_ERR_CONFIG, "line %d: column name '%.20s...' too long",
                     l->no, w);
    if (is_gpu_name(w, &gpu_idx)) {
      if (m->n_nics > 0)
        return hk_fail(HK_ERR_CONFIG,
                       "line %d: GPU column '%s' after a NIC column", l->no, w);
      if (gpu_idx != m->n_gpus)
        return hk_fail(HK_ERR_CONFIG,
                       "line %d: column '%s' where GPU%d was expected", l->no,
                       w, m->n_gpus);
      if (m->n_gpus >= HK_TOPO_MAX_GPUS)
        return hk_fail(HK_ERR_CONFIG, "line %d: more than %d GPUs", l->no,
                       HK_TOPO_MAX_GPUS);
      m->n_gpus++;
    } else {
      if (m->n_nics >= HK_TOPO_MAX_NICS)
        return hk_fail(HK_ERR_CONFIG, "line %d: more than %d NICs", l->no,
                       HK_TOPO_MAX_NICS);
      m->n_nics++;
    }
    snprintf(m->name[ps->n_dev++], HK_TOPO_NAME_LEN, "%s", w);
  }
  return HK_OK;
}

static hk_status parse_row(parser *ps, const line *l, int r) {
  hk_topo_matrix *m = ps->m;
  if (strcmp(l->tok[0], m->name[r]) != 0)
    return hk_fail(HK_ERR_CONFIG,
                   "line %d: row '%s' where the row of %s was expected", l->no,
                   l->tok[0], m->name[r]);
  int nval = l->ntok - 1;
  for (int c = 0; c < ps->n_dev; c++) {
    if (c >= nval)
      return hk_fail(HK_ERR_CONFIG,
                     "line %d: row %s has %d entries where the header has %d "
                     "device columns",
                     l->no, m->name[r], nval, ps->n_dev);
    const char *w = l->tok[1 + c];
    hk_topo_path cls;
    int nv;
    if (!legend(w, &cls, &nv)) {
      if (looks_like_value(w))
        return hk_fail(HK_ERR_CONFIG,
                       "line %d: row %s has %d device entries where the "
                       "header has %d (entry %d is '%s')",
                       l->no, m->name[r], c, ps->n_dev, c + 1, w);
      return hk_fail(HK_ERR_CONFIG,
                     "line %d: row %s, column %s: unknown legend token '%s' "
                     "(known: X, NV#, PIX, PXB, PHB, NODE, SYS)",
                     l->no, m->name[r], m->name[c], w);
    }
    if ((c == r) != (cls == HK_PATH_LOC))
      return hk_fail(HK_ERR_CONFIG, "line %d: row %s, column %s: %s", l->no,
                     m->name[r], m->name[c],
                     c == r ? "a device's own entry must be X"
                            : "X between two different devices");
    if (cls == HK_PATH_NVL && (r >= m->n_gpus || c >= m->n_gpus))
      return hk_fail(HK_ERR_CONFIG,
                     "line %d: row %s, column %s: NVLink to a NIC", l->no,
                     m->name[r], m->name[c]);
    m->cls[r][c] = cls;
    m->nvl[r][c] = nv;
    if (c < r && (m->cls[c][r] != cls || m->nvl[c][r] != nv)) {
      char a[16], b[16];
      return hk_fail(
          HK_ERR_CONFIG,
          "line %d: %s/%s is %s but %s/%s is %s (line %d): the "
          "matrix must be symmetric",
          l->no, m->name[r], m->name[c],
          hk_topo_path_token(cls, nv, a, sizeof a), m->name[c], m->name[r],
          hk_topo_path_token(m->cls[c][r], m->nvl[c][r], b, sizeof b),
          ps->row_line[c]);
    }
  }
  int extra = nval - ps->n_dev;
  if (extra > ps->n_aff)
    return hk_fail(HK_ERR_CONFIG,
                   "line %d: row %s has %d values after its %d device "
                   "entries where the header has %d affinity columns",
                   l->no, m->name[r], extra, ps->n_dev, ps->n_aff);
  for (int k = 0; k < extra; k++) {
    const char *w = l->tok[1 + ps->n_dev + k];
    aff_col col = ps->aff[k];
    if (!valid_cpu_list(w))
      return hk_fail(HK_ERR_CONFIG, "line %d: row %s, %s: malformed value '%s'",
                     l->no, m->name[r], aff_name[col], w);
    if (r >= m->n_gpus)
      continue;
    if (col == AFF_CPU && strcmp(w, "N/A") != 0)
      snprintf(m->affinity[r], HK_TOPO_NAME_LEN, "%s", w);
    if (col == AFF_NUMA && strspn(w, "0123456789") == strlen(w) &&
        strlen(w) < 6)
      m->numa[r] = atoi(w);
  }
  ps->row_line[r] = l->no;
  return HK_OK;
}

/* After the matrix: "NIC0: mlx5_0" lines name the NICs; a row of a device
 * not in the header is an error; anything else is ignored. */
static hk_status parse_trailer(parser *ps, const line *l) {
  hk_topo_matrix *m = ps->m;
  if (l->ntok == 2) {
    size_t n = strlen(l->tok[0]);
    if (n > 1 && l->tok[0][n - 1] == ':') {
      for (int k = 0; k < m->n_nics; k++) {
        int d = m->n_gpus + k;
        if (strncmp(m->name[d], l->tok[0], n - 1) == 0 &&
            m->name[d][n - 1] == '\0')
          snprintf(m->model[d], HK_TOPO_NAME_LEN, "%s", l->tok[1]);
      }
      return HK_OK;
    }
  }
  hk_topo_path cls;
  int nv, idx;
  if (l->ntok >= 2 && is_gpu_name(l->tok[0], &idx) &&
      legend(l->tok[1], &cls, &nv))
    return hk_fail(HK_ERR_CONFIG,
                   "line %d: row '%s' after the matrix: the header names %d "
                   "GPUs",
                   l->no, l->tok[0], m->n_gpus);
  return HK_OK;
}

hk_status hk_topo_parse_smi(const char *text, size_t len, hk_topo **out) {
  *out = NULL;
  parser ps;
  memset(&ps, 0, sizeof ps);
  ps.m = calloc(1, sizeof *ps.m);
  line *l = malloc(sizeof *l);
  hk_status st = HK_OK;
  if (!ps.m || !l) {
    st = hk_fail(HK_ERR_NOMEM, "nvidia-smi text: out of memory");
    goto done;
  }
  for (int i = 0; i < HK_TOPO_MAX_GPUS; i++)
    ps.m->numa[i] = -1;
  reader rd = {text, text + len, 0};
  int rows = 0, header = 0, rc;
  while ((rc = next_line(&rd, l, &st)) > 0) {
    if (!header) {
      if (l->ntok == 0)
        continue;
      if ((st = parse_header(&ps, l)) != HK_OK)
        goto done;
      header = 1;
    } else if (rows < ps.n_dev) {
      if (l->ntok == 0 || strcmp(l->tok[0], "Legend:") == 0) {
        st = hk_fail(HK_ERR_CONFIG,
                     "line %d: the matrix ends after %d of its %d rows (no "
                     "row for %s)",
                     l->no, rows, ps.n_dev, ps.m->name[rows]);
        goto done;
      }
      if ((st = parse_row(&ps, l, rows)) != HK_OK)
        goto done;
      rows++;
    } else if ((st = parse_trailer(&ps, l)) != HK_OK) {
      goto done;
    }
  }
  if (rc < 0)
    goto done;
  if (!header) {
    st = hk_fail(HK_ERR_CONFIG,
                 "line %d: no header: the text is empty (expected the output "
                 "of `nvidia-smi topo -m`)",
                 rd.no);
    goto done;
  }
  if (rows < ps.n_dev) {
    st = hk_fail(HK_ERR_CONFIG,
                 "line %d: the text ends after %d of the matrix's %d rows (no "
                 "row for %s)",
                 rd.no, rows, ps.n_dev, ps.m->name[rows]);
    goto done;
  }
  ps.m->nvlink_gbps = hk_fig_nvlink_gbps(0);
  ps.m->pcie_gbps = HK_FIG_PCIE_DEFAULT_GBPS;
  ps.m->sys_gbps = HK_FIG_SYS_DEFAULT_GBPS;
  if ((st = hk_topo_from_matrix(ps.m, "nvidia-smi", out)) != HK_OK)
    goto done;
  hk_topo_add_note(*out,
                   "nvidia-smi text names no GPU model, PCIe generation or "
                   "CPU: assumed %.1f GB/s per NVLink, PCIe gen3 x16 %.1f "
                   "GB/s, %.1f GB/s between sockets (topology/figures.h).",
                   ps.m->nvlink_gbps, ps.m->pcie_gbps, ps.m->sys_gbps);
done:
  free(ps.m);
  free(l);
  return st;
}
