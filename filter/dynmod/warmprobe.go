//go:build cgo

package dynmod

// WarmVerdict is what the warm path's lookup decided for a request's
// headers (allot_wcache_find).
type WarmVerdict int

// The lookup's verdicts.
const (
	// WarmHit: the key is cached; C serves the request.
	WarmHit WarmVerdict = warmHit
	// WarmMiss: the key is built and not cached; Go serves the request.
	WarmMiss WarmVerdict = warmMiss
	// WarmOwned: a header the filter owns, or a name C does not fold (not
	// ASCII); Go serves the request.
	WarmOwned WarmVerdict = warmOwned
	// WarmTooMany: more than WarmMaxHeaders headers; Go serves the request.
	WarmTooMany WarmVerdict = warmTooMany
	// WarmTooLong: the key would exceed WarmMaxKey; Go serves the request.
	WarmTooLong WarmVerdict = warmTooLong
)

// Probe runs the warm path's lookup over request headers pairs, copied
// into C memory as Envoy's are, exactly as the C request hook runs it,
// and returns its verdict and the key it built (empty unless a hit or a
// miss). It is for tests of other packages (nativemod's differential
// against the plugin): use it on the cache's worker's thread, never
// beside a request.
func (c *WarmCache) Probe(pairs [][2]string) (WarmVerdict, string) {
	status, key, _, _ := c.find(pairs)
	if v := WarmVerdict(status); v != WarmHit && v != WarmMiss {
		return v, ""
	}
	return WarmVerdict(status), key
}

// Answers reports whether the warm path hands a request of headers pairs
// to Go because the configuration answers it itself (its :path under the
// answer prefix: SetAnswerPrefix), as the C request hook decides on a hit.
// It is for tests of other packages, as Probe.
func (w *WarmConfig) Answers(pairs [][2]string) bool { return w.answers(pairs) }
