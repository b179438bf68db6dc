// warm_test drives the warm path's hit (wserve.c's allot_warm_serve), with
// the cache (wcache.c) and the stream hooks (hooks.c) it works with, over
// fake callbacks that record what the module asks of Envoy: the headers
// added and their order, the exposure record, the route clears, and the
// allocations (malloc, wrapped at link time: -Wl,--wrap=malloc).
// TestWarmServeInC (wcache_test.go) builds it with AddressSanitizer and
// UndefinedBehaviorSanitizer (which also fail it on a leak or undefined
// behaviour) and runs it: exit status 0 and "ok" when every check held,
// else each failed check on standard output.

#include "../hooks.c"
#include "../wcache.c"
#include "../wserve.c"

#include <stdio.h>

#include "fakes.h"

// Every malloc of the code under test, counted.
void* __real_malloc(size_t n);
static size_t mallocs;
void* __wrap_malloc(size_t n) {
  mallocs++;
  return __real_malloc(n);
}

// The fake Envoy: the request's headers, the worker index, the headers
// added (name: value lines, in order), the add that fails (-1: none),
// the filter state set, the route clears (the stats: fakes.h).
static const allot_header* request;
static size_t n_request;
static uint32_t worker;
static int get_headers_calls, add_calls, fail_add = -1, route_clears, states;
static char adds[4096], state[256];

size_t envoy_dynamic_module_callback_http_get_headers_size(uintptr_t f, int32_t type) {
  return type == 0 ? n_request : 0;
}

bool envoy_dynamic_module_callback_http_get_headers(uintptr_t f, int32_t type, allot_header* out) {
  get_headers_calls++;
  if (type != 0) return false;
  memcpy(out, request, n_request * sizeof(allot_header));
  return true;
}

uint32_t envoy_dynamic_module_callback_http_filter_get_worker_index(uintptr_t f) { return worker; }

bool envoy_dynamic_module_callback_http_add_header(uintptr_t f, int32_t type, allot_buffer key, allot_buffer value) {
  if (add_calls++ == fail_add) return false;
  size_t n = strlen(adds);
  snprintf(adds + n, sizeof adds - n, "%.*s: %.*s\n", (int)key.length, key.ptr, (int)value.length, value.ptr);
  return true;
}

bool envoy_dynamic_module_callback_http_set_filter_state_bytes(uintptr_t f, allot_buffer key, allot_buffer value) {
  states++;
  snprintf(state, sizeof state, "%.*s=%.*s", (int)key.length, key.ptr, (int)value.length, value.ptr);
  return true;
}

void envoy_dynamic_module_callback_http_clear_route_cache(uintptr_t f) { route_clears++; }

bool envoy_dynamic_module_callback_http_get_header(uintptr_t f, int32_t type, allot_buffer key, allot_buffer* result,
                                                   size_t index, size_t* n) {
  if (type != 2) return false;
  *result = (allot_buffer){"200", 3};
  return true;
}

static void reset_fake(void) {
  get_headers_calls = add_calls = route_clears = states = 0;
  fail_add = -1;
  adds[0] = state[0] = 0;
  worker = 0;
  reset_stats();
}

static allot_buffer B(const char* s) { return (allot_buffer){s, strlen(s)}; }

// Counter positions of the test configuration.
enum { EVALUATED = 0, HITS = 1, UNRECORDED = 2, A_OFF = 4, A_ON = 5, B_X = 6, B_Y = 7, N_COUNTERS = 10 };

// Outcome stat ids of experiment b's variations when observed.
static const size_t b_outcomes[] = {10, 11, 12, 13, 14, 15, 16, 20, 21, 22, 23, 24, 25, 26};

// make_config makes the C side of a configuration keyed by x-user-id, two
// workers, experiments a (off, on) and b (x, y; observed if asked).
static allot_wconfig* make_config(bool per_experiment, bool exposure, const char* version, bool observed) {
  const allot_wplan_header ph[] = {{"x-user-id", 9, 0}};
  allot_wplan* p = allot_wplan_new(1, ph, 1, NULL, B("x-experiment-"), B("x-experiments"), B("x-experiments-version"), NULL);
  allot_wrender* r = allot_wrender_new(2, per_experiment, exposure, B("x-experiments"), B("x-experiments-version"),
                                       B(version), EVALUATED, HITS, 0xc0f1, UNRECORDED, true, NULL);
  const allot_buffer av[] = {B("off"), B("on")}, am[] = {B(", a=\"off\""), B(", a=\"on\"")};
  const allot_buffer bv[] = {B("x"), B("y")}, bm[] = {B(", b=\"x\""), B(", b=\"y\"")};
  const uint32_t as[] = {A_OFF, A_ON}, bs[] = {B_X, B_Y};
  if (p == NULL || r == NULL || !allot_wrender_set(r, 0, B("x-experiment-a"), 2, av, am, as, NULL) ||
      !allot_wrender_set(r, 1, B("x-experiment-b"), 2, bv, bm, bs, observed ? b_outcomes : NULL)) {
    printf("the test configuration could not be made\n");
    exit(1);
  }
  allot_wconfig* w = allot_wconfig_new(p, r, 2, 64, 1 << 16, N_COUNTERS, B("wasm.allot"), NULL);
  if (w == NULL) exit(1);
  return w;
}

// cache inserts, on worker 0, x-user-id unit's assignment.
static void cache(allot_wconfig* w, const char* unit, const uint32_t* items, size_t n) {
  char key[64];
  key[0] = (char)strlen(unit);
  memcpy(key + 1, unit, strlen(unit));
  size_t kl = 1 + strlen(unit);
  if (!allot_wcache_insert(w->workers[0], allot_wkey_hash(key, kl), key, kl, items, n)) {
    printf("insert refused\n");
    exit(1);
  }
}

static const allot_header u1[] = {{"accept", 6, "*/*", 3}, {"x-user-id", 9, "u1", 2}};

// pending is worker 0's pending count i.
static uint64_t pending(allot_wconfig* w, size_t i) { return w->workers[0]->pending[i]; }

static uint64_t pending_sum(allot_wconfig* w) {
  uint64_t n = 0;
  for (size_t i = 0; i < N_COUNTERS; i++) n += pending(w, i);
  return n;
}

int main(void) {
  const uintptr_t f = 0xf17e;
  const uint32_t a_on_b_x[] = {0 << 16 | 1, 1 << 16 | 0};
  allot_set_warm_handles(true);

  // A hit in every header mode: the exact adds in the plugin's order, the
  // exposure record, the counts and one route clear.
  const struct {
    const char* name;
    bool per_experiment, exposure;
    const char* version;
    const char* adds;
    const char* state;
  } modes[] = {
      {"every header", true, true, "7",
       "x-experiment-a: on\nx-experiment-b: x\nx-experiments: a=\"on\", b=\"x\"\nx-experiments-version: 7\n",
       "wasm.allot=a=\"on\", b=\"x\""},
      {"dictionary only", false, true, "7", "x-experiments: a=\"on\", b=\"x\"\nx-experiments-version: 7\n",
       "wasm.allot=a=\"on\", b=\"x\""},
      {"every header, no version", true, true, "",
       "x-experiment-a: on\nx-experiment-b: x\nx-experiments: a=\"on\", b=\"x\"\n", "wasm.allot=a=\"on\", b=\"x\""},
      {"dictionary only, no version, no exposure", false, false, "", "x-experiments: a=\"on\", b=\"x\"\n", ""},
      {"every header, no exposure", true, false, "7",
       "x-experiment-a: on\nx-experiment-b: x\nx-experiments: a=\"on\", b=\"x\"\nx-experiments-version: 7\n", ""},
  };
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
    allot_wconfig* w = make_config(modes[i].per_experiment, modes[i].exposure, modes[i].version, false);
    cache(w, "u1", a_on_b_x, 2);
    for (int stateful = 0; stateful < 2; stateful++) {  // the handle, odd, or a stream of it
      reset_fake();
      request = u1, n_request = 2;
      uintptr_t m = stateful ? envoy_dynamic_module_on_http_filter_new((uintptr_t)w, f) : (uintptr_t)w | 1;
      size_t before = mallocs;
      CHECK(allot_warm_serve(f, m), "%s: not served", modes[i].name);
      CHECK(mallocs == before, "%s: a hit allocated %zu times", modes[i].name, mallocs - before);
      CHECK(strcmp(adds, modes[i].adds) == 0, "%s: added\n%swant\n%s", modes[i].name, adds, modes[i].adds);
      CHECK(strcmp(state, modes[i].state) == 0 && states == (modes[i].state[0] ? 1 : 0),
            "%s: filter state \"%s\" (%d sets), want \"%s\"", modes[i].name, state, states, modes[i].state);
      CHECK(route_clears == 1, "%s: %d route clears, want 1", modes[i].name, route_clears);
      CHECK(pending(w, EVALUATED) == 1 && pending(w, HITS) == 1 && pending(w, A_ON) == 1 && pending(w, B_X) == 1 &&
                pending_sum(w) == 4,
            "%s: pending counts evaluated %llu hits %llu a=on %llu b=x %llu of %llu", modes[i].name,
            (unsigned long long)pending(w, EVALUATED), (unsigned long long)pending(w, HITS),
            (unsigned long long)pending(w, A_ON), (unsigned long long)pending(w, B_X),
            (unsigned long long)pending_sum(w));
      if (stateful) envoy_dynamic_module_on_http_filter_destroy(m);
      uint64_t taken[N_COUNTERS];
      allot_wcache_take_all(w->workers[0], taken, N_COUNTERS);
    }
    allot_wconfig_free(w);
  }

  // A configuration that answers the requests under a path prefix itself
  // (an OFREP evaluation): a request under it goes to Go even when its
  // unit is cached, with nothing added, counted or looked; one outside it,
  // or without a :path, is served; with the prefix gone, both are.
  {
    allot_wconfig* w = make_config(true, true, "7", false);
    cache(w, "u1", a_on_b_x, 2);
    CHECK(allot_wconfig_set_answer_prefix(w, B("/ofrep/v1/evaluate/flags")), "answer prefix refused");
    const allot_header under[] = {{":path", 5, "/ofrep/v1/evaluate/flags/a", 26}, {"x-user-id", 9, "u1", 2}};
    const allot_header bulk[] = {{":path", 5, "/ofrep/v1/evaluate/flags", 24}, {"x-user-id", 9, "u1", 2}};
    const allot_header outside[] = {{":path", 5, "/ofrep/v1/evaluate", 18}, {"x-user-id", 9, "u1", 2}};
    const struct {
      const char* name;
      const allot_header* h;
      bool served;
    } cases[] = {{"a flag under the prefix", under, false}, {"the prefix itself", bulk, false},
                 {"a path shorter than the prefix", outside, true}, {"no :path", u1, true}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      reset_fake();
      request = cases[i].h, n_request = 2;
      uint32_t looks = w->workers[0]->looks;
      CHECK(allot_warm_serve(f, (uintptr_t)w | 1) == cases[i].served, "answer prefix, %s: served %d, want %d",
            cases[i].name, !cases[i].served, cases[i].served);
      if (!cases[i].served) {
        CHECK(adds[0] == 0 && states == 0 && route_clears == 0 && pending_sum(w) == 0 && w->workers[0]->looks == looks,
              "answer prefix, %s: added\n%scounted %llu, looked %u", cases[i].name, adds,
              (unsigned long long)pending_sum(w), w->workers[0]->looks - looks);
      }
      uint64_t taken[N_COUNTERS];
      allot_wcache_take_all(w->workers[0], taken, N_COUNTERS);
    }
    CHECK(allot_wconfig_set_answer_prefix(w, B("")) && w->answer_prefix.ptr == NULL, "empty answer prefix kept");
    reset_fake();
    request = under, n_request = 2;
    CHECK(allot_warm_serve(f, (uintptr_t)w | 1), "no answer prefix: a request under the old one not served");
    allot_wconfig_free(w);
  }

  // An entry with no assignment: no dictionary, no exposure record, the
  // version header alone; counted as evaluated and a hit.
  {
    allot_wconfig* w = make_config(true, true, "7", false);
    cache(w, "u1", NULL, 0);
    reset_fake();
    request = u1, n_request = 2;
    CHECK(allot_warm_serve(f, (uintptr_t)w | 1), "no assignment: not served");
    CHECK(strcmp(adds, "x-experiments-version: 7\n") == 0 && states == 0 && route_clears == 1,
          "no assignment: added\n%s%d filter states, %d route clears", adds, states, route_clears);
    CHECK(pending(w, EVALUATED) == 1 && pending(w, HITS) == 1 && pending_sum(w) == 2, "no assignment: %llu counts",
          (unsigned long long)pending_sum(w));
    allot_wconfig_free(w);
  }

  // An item out of range (an experiment, a variation): nothing added,
  // counted or cleared; Go serves it.
  const uint32_t bad[][2] = {{0 << 16 | 1, 2 << 16 | 0}, {0 << 16 | 1, 1 << 16 | 2}};
  for (size_t i = 0; i < 2; i++) {
    allot_wconfig* w = make_config(true, true, "7", false);
    cache(w, "u1", bad[i], 2);
    reset_fake();
    request = u1, n_request = 2;
    CHECK(!allot_warm_serve(f, (uintptr_t)w | 1), "item %#x out of range: served", bad[i][1]);
    CHECK(add_calls == 0 && states == 0 && route_clears == 0 && pending_sum(w) == 0,
          "item %#x out of range: %d adds, %d states, %d clears, %llu counts", bad[i][1], add_calls, states,
          route_clears, (unsigned long long)pending_sum(w));
    allot_wconfig_free(w);
  }

  // Envoy refuses the add at each position: false, nothing counted, no
  // exposure record, no route clear (Go removes the adds made, as forged).
  for (int k = 0; k < 4; k++) {
    allot_wconfig* w = make_config(true, true, "7", false);
    cache(w, "u1", a_on_b_x, 2);
    reset_fake();
    request = u1, n_request = 2;
    fail_add = k;
    CHECK(!allot_warm_serve(f, (uintptr_t)w | 1), "add %d refused: served", k);
    CHECK(add_calls == k + 1 && states == 0 && route_clears == 0 && pending_sum(w) == 0,
          "add %d refused: %d adds tried, %d states, %d clears, %llu counts", k, add_calls, states, route_clears,
          (unsigned long long)pending_sum(w));
    allot_wconfig_free(w);
  }

  // An observed hit: the stream (made with room for the configuration's
  // observed experiments) gets the assigned variation's outcome ids with no
  // allocation, its response counts them, its destroy frees it all.
  const uint32_t variations[][2] = {{0 << 16 | 1, 1 << 16 | 0}, {0 << 16 | 0, 1 << 16 | 1}};
  for (size_t i = 0; i < 2; i++) {
    allot_wconfig* w = make_config(true, true, "7", true);
    cache(w, "u1", variations[i], 2);
    reset_fake();
    request = u1, n_request = 2;
    uintptr_t m = envoy_dynamic_module_on_http_filter_new((uintptr_t)w, f);
    allot_stream* s = (allot_stream*)m;
    CHECK(s != NULL && s->room == 1, "observed: stream with room for %zu variations, want 1", s ? s->room : 0);
    size_t before = mallocs;
    CHECK(allot_warm_serve(f, m), "observed %zu: not served", i);
    CHECK(mallocs == before, "observed %zu: a hit allocated %zu times", i, mallocs - before);
    CHECK(s->n_outcomes == 1 && s->outcomes != NULL && s->outcomes[0] == b_outcomes[7 * i] &&
              s->outcomes[6] == b_outcomes[7 * i + 6] && s->envoy_config == 0xc0f1,
          "observed %zu: %zu outcomes, first id %zu", i, s->n_outcomes, s->outcomes ? s->outcomes[0] : 0);
    CHECK(pending(w, UNRECORDED) == 0, "observed %zu: counted as unrecorded", i);
    envoy_dynamic_module_on_http_filter_response_headers(f, m, true);
    CHECK(counters[b_outcomes[7 * i]] == 1, "observed %zu: the 2xx of the variation not counted", i);
    // Go's path observes into the same stream the same way (fits: no
    // allocation), and the next destroy counts its reset.
    before = mallocs;
    CHECK(allot_stream_observe(m, 0xc0f1, b_outcomes + 7 * i, 1) && mallocs == before,
          "observed %zu: Go's observe allocated %zu times", i, mallocs - before);
    envoy_dynamic_module_on_http_filter_destroy(m);
    CHECK(config_counters[b_outcomes[7 * i + 5]] == 1, "observed %zu: the reset not counted", i);
    allot_wconfig_free(w);
  }

  // A stateless handle of a configuration with observed experiments (no
  // stream to leave outcomes in): Go's, before any header is read.
  {
    allot_wconfig* w = make_config(true, true, "7", true);
    cache(w, "u1", a_on_b_x, 2);
    reset_fake();
    request = u1, n_request = 2;
    CHECK(!allot_warm_serve(f, (uintptr_t)w | 1), "stateless observed: served");
    CHECK(get_headers_calls == 0 && add_calls == 0 && pending_sum(w) == 0,
          "stateless observed: %d header reads, %d adds, %llu counts", get_headers_calls, add_calls,
          (unsigned long long)pending_sum(w));
    allot_wconfig_free(w);
  }

  // Go's: a miss, a forged header, a worker with nothing cached (nothing
  // read), a worker with no cache, handles that are not allot_wconfig's.
  {
    allot_wconfig* w = make_config(true, true, "7", false);
    cache(w, "u1", a_on_b_x, 2);
    const allot_header u2[] = {{"x-user-id", 9, "u2", 2}};
    const allot_header forged[] = {{"x-user-id", 9, "u1", 2}, {"X-Experiment-a", 14, "off", 3}};
    reset_fake();
    request = u2, n_request = 1;
    CHECK(!allot_warm_serve(f, (uintptr_t)w | 1) && add_calls == 0 && get_headers_calls == 1, "miss: served");
    reset_fake();
    request = forged, n_request = 2;
    CHECK(!allot_warm_serve(f, (uintptr_t)w | 1) && add_calls == 0, "forged header: served");
    for (uint32_t i = 1; i <= 2; i++) {
      reset_fake();
      request = u1, n_request = 2;
      worker = i;
      CHECK(!allot_warm_serve(f, (uintptr_t)w | 1) && get_headers_calls == 0,
            "worker %u (1: nothing cached, 2: no cache): served, or %d header reads", i, get_headers_calls);
    }
    reset_fake();
    request = u1, n_request = 2;
    allot_set_warm_handles(false);
    CHECK(!allot_warm_serve(f, (uintptr_t)w | 1) && get_headers_calls == 0, "not warm handles: served");
    CHECK(allot_warm_observed((uintptr_t)w) == 0, "not warm handles: the handle was read");
    allot_set_warm_handles(true);
    CHECK(pending_sum(w) == 0 && route_clears == 0, "Go's requests counted %llu", (unsigned long long)pending_sum(w));
    allot_wconfig_free(w);
  }

  // A worker whose looks mostly miss stops looking (one look in 16) and
  // looks at every request again once a window hits: only which path
  // serves changes.
  {
    allot_wconfig* w = make_config(true, true, "7", false);
    cache(w, "u1", a_on_b_x, 2);
    const allot_header u2[] = {{"x-user-id", 9, "u2", 2}};
    int served = 0;
    // A window with exactly ALLOT_WLOOK_MIN_HITS hits keeps looking.
    reset_fake();
    for (int i = 0; i < ALLOT_WLOOK_WINDOW; i++) {
      if (i < ALLOT_WLOOK_MIN_HITS) request = u1, n_request = 2; else request = u2, n_request = 1;
      served += allot_warm_serve(f, (uintptr_t)w | 1);
    }
    CHECK(served == ALLOT_WLOOK_MIN_HITS && get_headers_calls == ALLOT_WLOOK_WINDOW,
          "look window at the minimum: %d served, %d header reads", served, get_headers_calls);
    reset_fake();
    request = u1, n_request = 2;
    served = allot_warm_serve(f, (uintptr_t)w | 1);
    CHECK(served == 1 && get_headers_calls == 1, "after a window at the minimum: not looked");
    // One hit fewer (the window above's first look was this hit): the
    // next ALLOT_WLOOK_SKIP requests go to Go unread, a cached unit's too.
    reset_fake();
    served = 0;
    for (int i = 1; i < ALLOT_WLOOK_WINDOW; i++) {
      if (i < ALLOT_WLOOK_MIN_HITS - 1) request = u1, n_request = 2; else request = u2, n_request = 1;
      served += allot_warm_serve(f, (uintptr_t)w | 1);
    }
    CHECK(served == ALLOT_WLOOK_MIN_HITS - 2, "window under the minimum: %d served", served);
    reset_fake();
    request = u1, n_request = 2;
    served = 0;
    for (int i = 0; i < ALLOT_WLOOK_SKIP; i++) served += allot_warm_serve(f, (uintptr_t)w | 1);
    CHECK(served == 0 && get_headers_calls == 0 && add_calls == 0,
          "skipping: %d served, %d header reads, %d adds", served, get_headers_calls, add_calls);
    // Then every request looks again, and a window of hits keeps it so.
    for (int i = 0; i < 2 * ALLOT_WLOOK_WINDOW; i++) served += allot_warm_serve(f, (uintptr_t)w | 1);
    CHECK(served == 2 * ALLOT_WLOOK_WINDOW && get_headers_calls == 2 * ALLOT_WLOOK_WINDOW,
          "after the skip: %d served, %d header reads", served, get_headers_calls);
    // A new skip ends at Go's insert of an entry C holds: a request C
    // would have served.
    request = u2, n_request = 1;
    for (int i = 0; i < ALLOT_WLOOK_WINDOW; i++) allot_warm_serve(f, (uintptr_t)w | 1);
    reset_fake();
    request = u1, n_request = 2;
    served = allot_warm_serve(f, (uintptr_t)w | 1);
    CHECK(served == 0 && get_headers_calls == 0, "a new skip: looked");
    // While it skips, Go's result for a new unit is not cached (no
    // allocation), a seen unit's is; and Go's insert of an entry C holds
    // (a request C would have served) ends the skip.
    const char k3[] = {2, 'u', '3'}, k4[] = {2, 'u', '4'};
    size_t before = mallocs;
    CHECK(!allot_wcache_put(w->workers[0], k3, 3, a_on_b_x, 2, false) && mallocs == before,
          "skipping: a new unit's result cached");
    CHECK(allot_wcache_put(w->workers[0], k4, 3, a_on_b_x, 2, true), "skipping: a seen unit's result refused");
    served = allot_warm_serve(f, (uintptr_t)w | 1);
    CHECK(served == 0 && get_headers_calls == 0, "a seen unit's insert ended the skip");
    cache(w, "u1", a_on_b_x, 2);
    served = allot_warm_serve(f, (uintptr_t)w | 1);
    CHECK(served == 1 && get_headers_calls == 1, "after Go's insert of a held entry: still skipping");
    CHECK(allot_wcache_put(w->workers[0], k3, 3, a_on_b_x, 2, false), "looking: a new unit's result refused");
    allot_wconfig_free(w);
  }

  if (failures == 0) printf("ok\n");
  return failures != 0;
}
