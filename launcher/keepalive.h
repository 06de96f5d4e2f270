/*
 * keepalive.h - TCP keepalive that notices a silent peer within a bound:
 * the connection between an hkrun agent and the rendezvous (rendezvous.h,
 * agent.h), where a host that is cut off or powered down sends no FIN.
 */
#ifndef HK_LAUNCHER_KEEPALIVE_H
#define HK_LAUNCHER_KEEPALIVE_H

/**
 * Turns on keepalive on the connected TCP socket fd so that the kernel
 * ends the connection (a read or write then fails with ETIMEDOUT) after
 * about timeout_s seconds (>= 1; rounded up) in which the peer answered
 * neither a probe nor data: the first probe after 1 s of silence, then
 * one a second, timeout_s of them (TCP_KEEPIDLE/KEEPINTVL/KEEPCNT), and
 * TCP_USER_TIMEOUT timeout_s for data not acknowledged. Linux's options;
 * the approach is ssh's ServerAliveInterval/CountMax. Failures are
 * logged, not returned (the connection works without them). Thread-safe.
 */
void hk_keepalive_set(int fd, double timeout_s);

#endif
