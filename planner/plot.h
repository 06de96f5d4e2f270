/*
 * plot.h - hkplan's PNG: throughput (samples/s) and cost per million
 * samples against the number of servers, one line per server type and
 * network, drawn by gnuplot (Debian gnuplot-nox; scripts/setup.sh installs
 * it). Optional at run time: without gnuplot the caller is told so.
 * Thread-safety: not thread-safe (makes and removes a temporary folder).
 */
#ifndef HK_PLANNER_PLOT_H
#define HK_PLANNER_PLOT_H

#include <stddef.h>

#include "hk/hk.h"
#include "planner/plan.h"

/**
 * Draws rows[0..n) into png. Errors: HK_ERR_CONFIG ("--plot needs gnuplot,
 * not found on PATH ..."); HK_ERR_SYSTEM (png cannot be written: "--plot:
 * cannot write PNG: why", checked before anything runs; a temporary file
 * that cannot be made; gnuplot failed: its exit status and the first line
 * it wrote to stderr). gnuplot's stderr goes nowhere else. Leaves no
 * temporary file behind.
 */
hk_status hk_plan_plot(const hk_plan_row *rows, size_t n, const char *png);

#endif
