// The fakes the C tests of testdata share: a CHECK that prints each failed
// check and counts it, and the stat callbacks into Envoy, recording each
// counter incremented through a stream (counters) or its configuration
// (config_counters, last_config) and each histogram's samples; and the Go
// half of the body hooks.

#ifndef ALLOT_TESTDATA_FAKES_H
#define ALLOT_TESTDATA_FAKES_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

static int failures;
#define CHECK(cond, ...)             \
  do {                               \
    if (!(cond)) {                   \
      failures++;                    \
      printf("line %d: ", __LINE__); \
      printf(__VA_ARGS__);           \
      printf("\n");                  \
    }                                \
  } while (0)

static uint64_t counters[64], config_counters[64];
static uint64_t samples[64][8];
static size_t nsamples[64];
static uintptr_t last_config;

int32_t envoy_dynamic_module_callback_http_filter_increment_counter(uintptr_t filter, size_t id, allot_buffer* labels,
                                                                    size_t nl, uint64_t v) {
  counters[id] += v;
  return 0;
}

int32_t envoy_dynamic_module_callback_http_filter_config_increment_counter(uintptr_t config, size_t id,
                                                                           allot_buffer* labels, size_t nl,
                                                                           uint64_t v) {
  config_counters[id] += v;
  last_config = config;
  return 0;
}

int32_t envoy_dynamic_module_callback_http_filter_record_histogram_value(uintptr_t filter, size_t id,
                                                                         allot_buffer* labels, size_t nl,
                                                                         uint64_t v) {
  if (nsamples[id] < 8) samples[id][nsamples[id]] = v;
  nsamples[id]++;
  return 0;
}

// The Go half of the body and trailers hooks (exports.go), faked: it
// answers go_body_status, counts its calls and keeps the last end-of-stream
// flag.
static int32_t go_body_status;
static int go_body_calls;
static bool go_body_eos;

int32_t allot_go_request_body(uintptr_t f, uintptr_t m, bool eos) {
  go_body_calls++;
  go_body_eos = eos;
  return go_body_status;
}

// reset_stats forgets every count and sample.
static void reset_stats(void) {
  memset(counters, 0, sizeof counters);
  memset(config_counters, 0, sizeof config_counters);
  memset(nsamples, 0, sizeof nsamples);
  last_config = 0;
}

#endif
