package variant

import (
	"fmt"
	"strings"
	"sync"

	"github.com/allotmesh/allot/bench/load"
	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/proxywasm"
	"github.com/allotmesh/allot/filter/wire"
	filterv1 "github.com/allotmesh/allot/proto/allot/filter/v1"
)

// The stickiness rows (#23): what sticky bucketing costs each artifact —
// reading a unit's cookie, verifying and decoding it, evaluating with it,
// sealing a changed unit's new cookie and setting it on the response — and
// what the Wasm module's proxy_on_response_headers export costs every
// stream of a mesh that does not use stickiness. Variants V–Y and v–x
// (catalogue.go), each set against a baseline measured in the same
// interleaved rounds (report.stickyRows).

const (
	stickyCookieName = "allot_sb"
	stickyKeyID      = "bench"
	// StickyPool is how many units the cache-missing returning variants
	// (W, w) cycle through, each with its cookie: twice the cache's
	// default bound on entries, so that taking them in order misses the
	// LRU cache on every request.
	StickyPool = 2 * config.DefaultCacheSize
)

// stickySecret is the bench's signing key: config.MinSigningKeyBytes long.
var stickySecret = []byte("allot-bench-sticky-cookie-key-32")

// stickyCookie is the sticky configuration's cookie: every attribute at
// its default (Path=/, a year's Max-Age, Secure, HttpOnly, SameSite=Lax),
// as a mesh with stickiness would set it.
func stickyCookie() *filterv1.StickyCookie {
	return &filterv1.StickyCookie{Name: stickyCookieName, Keys: []*filterv1.SigningKey{{Id: stickyKeyID, Secret: stickySecret}}}
}

// Units is how many user ids a warm variant cycles through.
func (v Variant) Units() int {
	if v.Pool > 0 {
		return v.Pool
	}
	return WarmIDs
}

// Request is the load generator's request for v in the run numbered seq:
// the attributes' headers, x-user-id and, for returning units, the unit's
// cookie; for an OFREP variant, a bulk evaluation of the unit's context.
func (v Variant) Request(seq uint64) (load.RequestFunc, error) {
	if v.OFREP {
		return ofrepRequest(v, seq), nil
	}
	var more []load.Header
	if v.Returning {
		if v.Cold {
			return nil, fmt.Errorf("variant %s: returning units need a cookie made ahead, a cold variant's ids are new", v.ID)
		}
		table, err := stickyCookies()
		if err != nil {
			return nil, err
		}
		n := uint64(v.Units())
		more = append(more, load.Header{Name: "cookie", Append: func(dst []byte, i uint64) []byte { return append(dst, table[i%n]...) }})
	}
	return load.Request("/", RequestHeaders, ids(v.Cold, v.Units(), seq), more...), nil
}

// cookieJar is what a browser keeps of Allot's sticky cookie: the
// Set-Cookie that Allot's plugin, run natively on the fake host with the
// sticky configuration (translate.ConfigJSON, the bytes the native
// variants get), sets on a new unit's first response. The pre-flight
// compares Envoy's Set-Cookie with it (new units) and sends it back
// (returning units); the load generator sends it back from stickyCookies.
type cookieJar struct {
	mu   sync.Mutex
	host *fakehost.Host
	p    *proxywasm.Handler
	root uint32
}

// jar is the suite's cookie jar, made on first use.
var jar = sync.OnceValues(func() (*cookieJar, error) {
	cfg, err := allotConfig(50, sticky)
	if err != nil {
		return nil, err
	}
	js, err := translate.ConfigJSON(cfg)
	if err != nil {
		return nil, fmt.Errorf("sticky configuration: %w", err)
	}
	j := &cookieJar{host: fakehost.New()}
	j.p = proxywasm.New(j.host)
	root, ok := j.host.StartPlugin(j.p, js)
	if !ok {
		return nil, fmt.Errorf("sticky configuration refused on the fake host: %v", j.host.Logs)
	}
	j.root = root
	return j, nil
})

// setCookie is the Set-Cookie value Allot sets on unit id's response when
// its request carries no cookie.
func (j *cookieJar) setCookie(id string) (string, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, resp, err := j.host.Exchange(j.p, j.root, BenchRequest(id), [][2]string{{":status", "200"}})
	if err != nil {
		return "", err
	}
	var sc []string
	for _, h := range resp {
		if h[0] == wire.SetCookieHeader {
			sc = append(sc, h[1])
		}
	}
	if len(sc) != 1 {
		return "", fmt.Errorf("sticky cookie of %s: Set-Cookie %q, want one", id, sc)
	}
	return sc[0], nil
}

// cookie is the Cookie header a browser sends after that response: the
// Set-Cookie's name=value.
func (j *cookieJar) cookie(id string) (string, error) {
	sc, err := j.setCookie(id)
	nv, _, _ := strings.Cut(sc, ";")
	return nv, err
}

// stickyCookies are the Cookie headers of units user-0 … user-<stickyPool
// − 1>, made once: the returning variants' requests carry them, the warm
// ones the first warmIDs.
var stickyCookies = sync.OnceValues(func() ([]string, error) {
	j, err := jar()
	if err != nil {
		return nil, err
	}
	table := make([]string, StickyPool)
	for i := range table {
		if table[i], err = j.cookie(unitID(uint64(i))); err != nil {
			return nil, err
		}
	}
	return table, nil
})

// withCookies gives a sticky variant its pre-flight's cookies: returning
// units send theirs and must get none back; new units send none and must
// get exactly the one Allot sets natively.
func withCookies(v Variant) (Variant, error) {
	if !v.Sticky {
		return v, nil
	}
	j, err := jar()
	if err != nil {
		return v, err
	}
	if v.Returning {
		v.Cookie = j.cookie
	} else {
		v.SetCookie = j.setCookie
	}
	return v, nil
}
