/*
 * xmlattr.h - reading the attributes of one expat element: lookup and
 * strict number / bus-id parsing, with hk_fail messages that name the
 * element, its line and the attribute. Shared by ncclxml.c and ncclgraph.c.
 * Thread-safety: pure functions (hk_fail touches thread-local state only).
 */
#ifndef HK_TOPOLOGY_XMLATTR_H
#define HK_TOPOLOGY_XMLATTR_H

#include "hk/hk.h"

/** An element being read: its name and line, for messages. */
typedef struct hk_xml_elem {
  const char *name;
  int line;
  const char **atts; /* expat's name/value pairs, NULL terminated */
} hk_xml_elem;

/** The value of attribute key, or NULL. */
const char *hk_xml_attr(const hk_xml_elem *e, const char *key);

/** Like hk_xml_attr, but a missing attribute is HK_ERR_CONFIG
 * ("line N: <e>: missing attribute \"key\""). */
hk_status hk_xml_attr_req(const hk_xml_elem *e, const char *key,
                          const char **val);

/**
 * Attribute key as a whole integer (decimal, or hex with 0x) in [lo, hi].
 * Missing: *v = dflt and HK_OK unless required (then HK_ERR_CONFIG).
 * Malformed or out of range: HK_ERR_CONFIG naming element, line, key, value.
 */
hk_status hk_xml_attr_long(const hk_xml_elem *e, const char *key, int required,
                           long lo, long hi, long dflt, long *v);

/** Bytes of a bus id as the readers store it ("0000:3b:00.0"; a domain
 * may have up to 8 hex digits, as on Intel VMD domains), NUL included. */
#define HK_XML_BUSID_LEN 17

/** A PCI bus id "domain:bus:device.function" in hex (domain 1 to 8
 * digits, bus and device 2, function 1, either case) into out (at least
 * HK_XML_BUSID_LEN bytes) as lower case with a domain of at least 4
 * digits, so "0000:3B:00.0" and "000:3b:00.0" compare equal. Returns 1, or
 * 0 (out unspecified) if s is not one. Pure. */
int hk_xml_parse_busid(const char *s, char *out);

/** hk_xml_parse_busid, or HK_ERR_CONFIG naming element, line, key, value. */
hk_status hk_xml_busid(const hk_xml_elem *e, const char *key, const char *s,
                       char *out);

#endif
