package harness

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/allotmesh/allot/internal/echo"
)

// StartEcho starts the echo upstream (package internal/echo) in-process on a
// free 127.0.0.1 port; the caller closes it.
func StartEcho() (*echo.Server, error) {
	s, err := echo.Start("127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("start echo: %w", err)
	}
	return s, nil
}

// MustStartEcho is StartEcho for a test: it returns the upstream's
// "127.0.0.1:port" address and closes it when the test ends.
func MustStartEcho(t testing.TB) string {
	t.Helper()
	s := must[*echo.Server](t)(StartEcho())
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close echo: %v", err)
		}
	})
	return s.Addr()
}

// EchoResponse is the echo upstream's description of the request it got, plus
// the status and headers of the response as the client saw it (after Envoy).
// Header(name) looks up a request header as the upstream received it.
type EchoResponse struct {
	echo.Response
	// StatusCode is the HTTP status of the response.
	StatusCode int
	// ResponseHeader holds the response headers.
	ResponseHeader http.Header
}

// GetEcho sends GET url with the given request headers (a "Host" entry sets
// the Host header) and decodes the echo upstream's JSON. It returns an error,
// rather than failing the test, so it can be used inside Eventually; see
// MustGetEcho otherwise. Any status other than 200 is an error.
func GetEcho(url string, header http.Header) (EchoResponse, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return EchoResponse{}, err
	}
	for name, values := range header {
		if http.CanonicalHeaderKey(name) == "Host" && len(values) > 0 {
			req.Host = values[0]
			continue
		}
		for _, v := range values {
			req.Header.Add(name, v)
		}
	}
	resp, err := Client.Do(req)
	if err != nil {
		return EchoResponse{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return EchoResponse{}, fmt.Errorf("GET %s: read body: %w", url, err)
	}
	out := EchoResponse{StatusCode: resp.StatusCode, ResponseHeader: resp.Header}
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("GET %s: status %d: %.512s", url, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, &out.Response); err != nil {
		return out, fmt.Errorf("GET %s: decode echo json %.512q: %w", url, body, err)
	}
	return out, nil
}

// MustGetEcho is GetEcho that fails the test on error.
func MustGetEcho(t testing.TB, url string, header http.Header) EchoResponse {
	t.Helper()
	return must[EchoResponse](t)(GetEcho(url, header))
}
