package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAdminSlowBodyCut: a client that sends a request's headers and then
// its body too slowly has its connection closed once the read timeout
// passes; the listener goes on serving.
func TestAdminSlowBodyCut(t *testing.T) {
	const readTimeout = 300 * time.Millisecond
	a := start(t, func(c *Config) { c.AdminReadTimeout = readTimeout })
	conn, err := net.Dial("tcp", a.Admin.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/experiments HTTP/1.1\r\nHost: allotd\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"key\":", testToken)
	begin := time.Now()
	conn.SetReadDeadline(begin.Add(10 * time.Second)) // the test's own bound, far above the timeout
	rest, err := io.ReadAll(conn)                     // an error response, then the close
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("connection still open %v after a stalled body (read timeout %v); read %q", time.Since(begin), readTimeout, rest)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("closed after %v, want about %v", took, readTimeout)
	}
	if code, body := get(t, http.DefaultClient, "http://"+a.Admin.String()+"/healthz"); code != http.StatusOK {
		t.Errorf("healthz after the slow client: %d %s", code, body)
	}
}

// TestAdminWaitedWriteOutlivesReadTimeout: a waited write that waits far
// longer than the read timeout (a proxy never answers) gets its full
// wait and its answer.
func TestAdminWaitedWriteOutlivesReadTimeout(t *testing.T) {
	const readTimeout, wait = 300 * time.Millisecond, 2 * time.Second
	a := start(t, func(c *Config) { c.AdminReadTimeout = readTimeout })
	silent := dialADS(t, a.XDS.String(), "never-acks", "shop")
	if err := silent.send("", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := silent.st.Recv(); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest("POST", fmt.Sprintf("http://%s/v1/experiments?wait=%v", a.Admin, wait),
		strings.NewReader(`{"key":"btn","variations":["a","b"]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	begin := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("waited write: %v after %v", err, time.Since(begin))
	}
	defer resp.Body.Close()
	var out struct {
		Rollout struct{ Result string } `json:"rollout"`
	}
	if err := json.NewDecoder(bufio.NewReader(resp.Body)).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); resp.StatusCode != http.StatusCreated || out.Rollout.Result != "timeout" || took < wait {
		t.Errorf("waited write: %d, result %q after %v; want 201, timeout, after the full %v wait", resp.StatusCode, out.Rollout.Result, took, wait)
	}
}
