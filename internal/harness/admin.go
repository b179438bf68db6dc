package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// AdminCall calls allotd's admin API at base ("http://127.0.0.1:port")
// through c with token as its bearer: body, unless nil, is sent as JSON
// (a json.RawMessage as it is), and a JSON answer is decoded into out
// (unless nil). It returns the status code and the body, or an error if no
// answer came or it did not decode; any status is an answer. It fails no
// test, so goroutines other than the test's and the benchmark can call it.
func AdminCall(ctx context.Context, c *http.Client, base, token, method, path string, body, out any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, fmt.Errorf("%s %s: encode body: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, b, err
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, b, fmt.Errorf("decode %s: %w", b, err)
		}
	}
	return resp.StatusCode, b, nil
}
