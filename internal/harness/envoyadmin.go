package harness

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"
)

// What the harness reads from Envoy's admin interface.

// Admin sends method (GET, POST) to the admin path (e.g. "/reset_counters")
// and returns the body; any status but 200 is an error.
func (e *Envoy) Admin(method, path string) ([]byte, error) {
	body, err := do(method, e.adminURL+path)
	if err != nil {
		return nil, fmt.Errorf("envoy admin: %w", err)
	}
	return body, nil
}

// MustAdmin is Admin that fails the test on error.
func (e *Envoy) MustAdmin(t testing.TB, method, path string) []byte {
	t.Helper()
	return must[[]byte](t)(e.Admin(method, path))
}

// ConfigDump returns the JSON of the admin /config_dump (with EDS).
func (e *Envoy) ConfigDump() ([]byte, error) {
	return e.Admin(http.MethodGet, "/config_dump?include_eds")
}

// MustConfigDump is ConfigDump that fails the test on error.
func (e *Envoy) MustConfigDump(t testing.TB) []byte {
	t.Helper()
	return e.MustAdmin(t, http.MethodGet, "/config_dump?include_eds")
}

// Stats returns every counter and gauge from the admin /stats endpoint by
// name, e.g. "server.live" or "http.ingress_http.downstream_rq_total".
// Histograms and text readouts are left out.
func (e *Envoy) Stats() (map[string]int64, error) {
	return adminStats(e.adminURL, "")
}

// MustStats is Stats that fails the test on error.
func (e *Envoy) MustStats(t testing.TB) map[string]int64 {
	t.Helper()
	return must[map[string]int64](t)(e.Stats())
}

// Stat returns the counter or gauge name and whether Envoy has it; the
// admin renders that one stat alone.
func (e *Envoy) Stat(name string) (int64, bool, error) {
	stats, err := adminStats(e.adminURL, "^"+regexp.QuoteMeta(name)+"$")
	if err != nil {
		return 0, false, err
	}
	v, ok := stats[name]
	return v, ok, nil
}

// MustStat is Stat that fails the test on error.
func (e *Envoy) MustStat(t testing.TB, name string) (int64, bool) {
	t.Helper()
	v, ok, err := e.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	return v, ok
}

// Listener returns the address ("127.0.0.1:port") Envoy's first listener
// is bound to, from the admin's /listeners: a bootstrap's port_value 0 gets
// its port from the kernel.
func (e *Envoy) Listener() (string, error) {
	body, err := get(e.adminURL + "/listeners?format=json")
	if err != nil {
		return "", err
	}
	var l struct {
		ListenerStatuses []struct {
			LocalAddress struct {
				SocketAddress struct {
					Address   string `json:"address"`
					PortValue int    `json:"port_value"`
				} `json:"socket_address"`
			} `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return "", fmt.Errorf("envoy listeners: %w: %s", err, body)
	}
	if len(l.ListenerStatuses) == 0 {
		return "", fmt.Errorf("envoy listeners: none: %s", body)
	}
	a := l.ListenerStatuses[0].LocalAddress.SocketAddress
	return net.JoinHostPort(a.Address, strconv.Itoa(a.PortValue)), nil
}

// adminStats returns the counters and gauges of the Envoy whose admin
// interface is at adminURL ("http://127.0.0.1:port"), by name; filter, when
// not empty, is the admin's regular expression over the names (e.g.
// `^wasmcustom\.allot\.`), which spares Envoy rendering the rest.
func adminStats(adminURL, filter string) (map[string]int64, error) {
	u := adminURL + "/stats?format=json"
	if filter != "" {
		u += "&filter=" + url.QueryEscape(filter)
	}
	body, err := get(u)
	if err != nil {
		return nil, fmt.Errorf("envoy stats: %w", err)
	}
	return parseStats(body)
}

// parseStats decodes the JSON form of /stats: {"stats":[{"name":..,"value":..},
// {"histograms":..}]}. Entries without an integer value are skipped.
func parseStats(body []byte) (map[string]int64, error) {
	var doc struct {
		Stats []struct {
			Name  string          `json:"name"`
			Value json.RawMessage `json:"value"`
		} `json:"stats"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("decode stats json: %w", err)
	}
	stats := make(map[string]int64, len(doc.Stats))
	for _, s := range doc.Stats {
		if s.Name == "" {
			continue
		}
		if v, err := strconv.ParseInt(string(s.Value), 10, 64); err == nil {
			stats[s.Name] = v
		}
	}
	return stats, nil
}
