/* xmlattr.c - attribute helpers for the XML readers (xmlattr.h). */
#include "topology/xmlattr.h"

#include <ctype.h>
#include <errno.h>
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

hk_status hk_xml_busid(const hk_xml_elem *e, const char *key, const char *s,
                       char *out) {
  static const char shape[] = "xxxx:xx:xx.x";
  size_t n = strlen(s);
  int ok = n == sizeof shape - 1;
  for (size_t i = 0; ok && i < n; i++)
    ok = shape[i] == 'x' ? isxdigit((unsigned char)s[i]) : s[i] == shape[i];
  if (!ok)
    return hk_fail(HK_ERR_CONFIG,
                   "line %d: <%s>: attribute %s=\"%.40s\" is not a PCI bus id "
                   "(dddd:bb:dd.f)",
                   e->line, e->name, key, s);
  for (size_t i = 0; i <= n; i++)
    out[i] = (char)tolower((unsigned char)s[i]);
  return HK_OK;
}
