/* ncclgraph.c - the ring channels of an NCCL graph file (NCCL_GRAPH_FILE),
 * with expat (parse.h). */
#include <expat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"
#include "topology/parse.h"
#include "topology/xmlattr.h"

#define NCCL_PATTERN_RING 4 /* NCCL_TOPO_PATTERN_RING in NCCL's graph.h */

typedef struct gstate {
  XML_Parser xp;
  hk_ncclgraph *g;
  hk_status st;
  int depth;     /* 1 inside <graphs>, 2 <graph>, 3 <channel> */
  int skip;      /* inside an element that is not read */
  int ring;      /* the current <graph> is a ring */
  int have_info; /* speed/type taken from the first ring graph */
  int chan;      /* index of the open channel, -1 none */
} gstate;

static void fail(gstate *s, hk_status st) {
  if (s->st == HK_OK)
    s->st = st;
  XML_StopParser(s->xp, XML_FALSE);
}

static hk_status start(gstate *s, const char *name, const char **atts) {
  hk_xml_elem e = {name, (int)XML_GetCurrentLineNumber(s->xp), atts};
  if (s->skip) {
    s->skip++;
    return HK_OK;
  }
  if (s->depth == 0) {
    if (strcmp(name, "graphs") != 0)
      return hk_fail(HK_ERR_CONFIG,
                     "line %d: root element <%s>: an NCCL graph file starts "
                     "with <graphs>",
                     e.line, name);
  } else if (s->depth == 1 && strcmp(name, "graph") == 0) {
    long pattern;
    hk_status st = hk_xml_attr_long(&e, "pattern", 1, 0, 1000, 0, &pattern);
    if (st != HK_OK)
      return st;
    s->ring = pattern == NCCL_PATTERN_RING;
    if (s->ring && !s->have_info) {
      const char *sp = hk_xml_attr(&e, "speedintra");
      const char *ty = hk_xml_attr(&e, "typeintra");
      s->g->speed_intra = sp ? strtod(sp, NULL) : 0.0;
      snprintf(s->g->type_intra, sizeof s->g->type_intra, "%s", ty ? ty : "");
      s->have_info = 1;
    }
  } else if (s->depth == 2 && strcmp(name, "channel") == 0) {
    if (s->ring) {
      if (s->g->n_channels >= HK_NCCLGRAPH_MAX_CHANNELS)
        return hk_fail(HK_ERR_CONFIG, "line %d: <channel>: more than %d",
                       e.line, HK_NCCLGRAPH_MAX_CHANNELS);
      s->chan = s->g->n_channels++;
      s->g->n_gpus[s->chan] = 0;
    }
  } else if (s->depth == 3 && strcmp(name, "gpu") == 0) {
    long dev;
    hk_status st = hk_xml_attr_long(&e, "dev", 1, 0, 1023, 0, &dev);
    if (st != HK_OK)
      return st;
    if (s->chan >= 0) {
      int *n = &s->g->n_gpus[s->chan];
      if (*n >= HK_TOPO_MAX_GPUS)
        return hk_fail(HK_ERR_CONFIG,
                       "line %d: <gpu>: more than %d in one "
                       "channel",
                       e.line, HK_TOPO_MAX_GPUS);
      s->g->gpu[s->chan][(*n)++] = (int)dev;
    }
  } else if (s->depth == 3 && strcmp(name, "net") == 0) {
    /* the NIC a channel enters and leaves the host by: not a GPU */
  } else {
    s->skip = 1;
    return HK_OK;
  }
  s->depth++;
  return HK_OK;
}

static void XMLCALL on_start(void *ud, const XML_Char *name,
                             const XML_Char **atts) {
  gstate *s = ud;
  hk_status st = start(s, name, atts);
  if (st != HK_OK)
    fail(s, st);
}

static void XMLCALL on_end(void *ud, const XML_Char *name) {
  (void)name;
  gstate *s = ud;
  if (s->skip) {
    s->skip--;
    return;
  }
  if (s->depth == 3)
    s->chan = -1;
  if (s->depth == 2)
    s->ring = 0;
  s->depth--;
}

static void XMLCALL on_doctype(void *ud, const XML_Char *name,
                               const XML_Char *sysid, const XML_Char *pubid,
                               int has_internal) {
  (void)name, (void)sysid, (void)pubid, (void)has_internal;
  gstate *s = ud;
  fail(s, hk_fail(HK_ERR_CONFIG,
                  "line %d: <!DOCTYPE>: not allowed in an NCCL graph file",
                  (int)XML_GetCurrentLineNumber(s->xp)));
}

hk_status hk_ncclgraph_parse(const char *text, size_t len, hk_ncclgraph *out) {
  memset(out, 0, sizeof *out);
  if (len > HK_TOPO_MAX_FILE_BYTES)
    return hk_fail(HK_ERR_CONFIG, "NCCL graph: %zu bytes, more than %u", len,
                   HK_TOPO_MAX_FILE_BYTES);
  gstate s = {.g = out, .chan = -1};
  s.xp = XML_ParserCreate(NULL);
  if (!s.xp)
    return hk_fail(HK_ERR_NOMEM, "NCCL graph: out of memory (expat)");
  XML_SetUserData(s.xp, &s);
  XML_SetElementHandler(s.xp, on_start, on_end);
  XML_SetStartDoctypeDeclHandler(s.xp, on_doctype);
  if (XML_Parse(s.xp, text, (int)len, XML_TRUE) == XML_STATUS_ERROR &&
      s.st == HK_OK)
    s.st = hk_fail(HK_ERR_CONFIG, "line %d: malformed XML: %s",
                   (int)XML_GetCurrentLineNumber(s.xp),
                   XML_ErrorString(XML_GetErrorCode(s.xp)));
  XML_ParserFree(s.xp);
  if (s.st != HK_OK)
    memset(out, 0, sizeof *out);
  return s.st;
}
