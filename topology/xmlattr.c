/* xmlattr.c - attribute helpers for the XML readers (xmlattr.h). */
#include "topology/xmlattr.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/status.h"

const char *hk_xml_attr(const hk_xml_elem *e, const char *key) {
  for (const char **a = e->atts; a && a[0]; a += 2)
    if (strcmp(a[0], key) == 0)
      return a[1];
  return NULL;
}

hk_status hk_xml_attr_req(const hk_xml_elem *e, const char *key,
                          const char **val) {
  *val = hk_xml_attr(e, key);
  if (!*val)
    return hk_fail(HK_ERR_CONFIG, "line %d: <%s>: missing attribute \"%s\"",
                   e->line, e->name, key);
  return HK_OK;
}

hk_status hk_xml_attr_long(const hk_xml_elem *e, const char *key, int required,
                           long lo, long hi, long dflt, long *v) {
  const char *s = hk_xml_attr(e, key);
  if (!s) {
    *v = dflt;
    return required ? hk_xml_attr_req(e, key, &s) : HK_OK;
  }
  const char *c = s;
  while (*c == ' ')
    c++;
  int neg = *c == '-';
  int hex = !neg && c[0] == '0' && (c[1] == 'x' || c[1] == 'X');
  const char *digits = c + neg + (hex ? 2 : 0);
  char *end;
  errno = 0;
  long x = strtol(c, &end, hex ? 16 : 10);
  while (*end == ' ')
    end++;
  if (!(hex ? isxdigit((unsigned char)*digits)
            : isdigit((unsigned char)*digits)) ||
      *end || errno)
    return hk_fail(HK_ERR_CONFIG,
                   "line %d: <%s>: attribute %s=\"%.40s\" is not a number",
                   e->line, e->name, key, s);
  if (x < lo || x > hi)
    return hk_fail(HK_ERR_CONFIG,
                   "line %d: <%s>: attribute %s=\"%.40s\" is out of range "
                   "%ld..%ld",
                   e->line, e->name, key, s, lo, hi);
  *v = x;
  return HK_OK;
}

/* Reads n hex digits at *s (exactly n; lo..n when lo > 0) into *v. */
static int hex_field(const char **s, int lo, int hi, unsigned long *v) {
  int n = 0;
  *v = 0;
  while (n < hi && isxdigit((unsigned char)(*s)[n])) {
    char c = (char)tolower((unsigned char)(*s)[n]);
    *v = *v * 16 + (unsigned long)(c <= '9' ? c - '0' : c - 'a' + 10);
    n++;
  }
  *s += n;
  return n >= lo && !isxdigit((unsigned char)**s);
}

int hk_xml_parse_busid(const char *s, char *out) {
  unsigned long dom, bus, dev, fn;
  const char *c = s;
  if (!hex_field(&c, 1, 8, &dom) || *c++ != ':' || !hex_field(&c, 2, 2, &bus) ||
      *c++ != ':' || !hex_field(&c, 2, 2, &dev) || *c++ != '.' ||
      !hex_field(&c, 1, 1, &fn) || *c)
    return 0;
  snprintf(out, HK_XML_BUSID_LEN, "%04lx:%02lx:%02lx.%lx", dom, bus, dev, fn);
  return 1;
}

hk_status hk_xml_busid(const hk_xml_elem *e, const char *key, const char *s,
                       char *out) {
  if (!hk_xml_parse_busid(s, out))
    return hk_fail(HK_ERR_CONFIG,
                   "line %d: <%s>: attribute %s=\"%.40s\" is not a PCI bus id "
                   "(domain:bus:device.function in hex, e.g. 0000:3b:00.0)",
                   e->line, e->name, key, s);
  return HK_OK;
}
