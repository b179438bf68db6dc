// Package load is the benchmark's HTTP/1.1 load generator: keep-alive
// connections on raw TCP, a request that may vary per request (a new user id
// each time; a GET, or a POST with a body), a closed-loop max-throughput mode and an open-loop fixed-rate
// mode whose latency is measured from each request's intended send time, so
// a stalled server is charged for every request it delayed (no coordinated
// omission).
//
// It is deliberately minimal (no net/http) so that one CPU of load
// generation can saturate one Envoy worker. It understands only responses
// with a Content-Length (Envoy's direct_response always sends one).
package load

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/allotmesh/allot/bench/stats"
)

// RequestFunc appends the raw HTTP/1.1 request number i to dst.
type RequestFunc func(dst []byte, i uint64) []byte

// Request returns a RequestFunc for GET path with the fixed headers and, when
// appendID is non-nil, an x-user-id header whose value appendID(dst, i)
// appends (without allocating, so the generator stays cheap), then each of
// the varying headers more whose Append is non-nil (a unit's cookie).
func Request(path string, headers [][2]string, appendID func(dst []byte, i uint64) []byte, more ...Header) RequestFunc {
	var fixed []byte
	fixed = fmt.Appendf(fixed, "GET %s HTTP/1.1\r\nhost: bench\r\n", path)
	for _, h := range headers {
		fixed = fmt.Appendf(fixed, "%s: %s\r\n", h[0], h[1])
	}
	varied := slices.DeleteFunc(append([]Header{{Name: "x-user-id", Append: appendID}}, more...), func(h Header) bool { return h.Append == nil })
	return func(dst []byte, i uint64) []byte {
		dst = append(dst, fixed...)
		for _, h := range varied {
			dst = append(dst, h.Name...)
			dst = append(dst, ": "...)
			dst = h.Append(dst, i)
			dst = append(dst, "\r\n"...)
		}
		return append(dst, "\r\n"...)
	}
}

// Post returns a RequestFunc for POST path with the fixed headers, a
// content-type and the body request number i gets from appendBody(dst, i)
// (which must not allocate either), preceded by its content-length. The
// body is appended in place and moved up past its content-length header,
// so a request costs no allocation once dst has grown to one request.
func Post(path string, headers [][2]string, contentType string, appendBody func(dst []byte, i uint64) []byte) RequestFunc {
	var fixed []byte
	fixed = fmt.Appendf(fixed, "POST %s HTTP/1.1\r\nhost: bench\r\n", path)
	for _, h := range headers {
		fixed = fmt.Appendf(fixed, "%s: %s\r\n", h[0], h[1])
	}
	fixed = fmt.Appendf(fixed, "content-type: %s\r\ncontent-length: ", contentType)
	return func(dst []byte, i uint64) []byte {
		dst = append(dst, fixed...)
		start := len(dst)
		dst = appendBody(dst, i)
		n := len(dst) - start
		var num [24]byte
		length := append(strconv.AppendInt(num[:0], int64(n), 10), "\r\n\r\n"...)
		dst = append(dst, length...) // room for the length before the body
		copy(dst[start+len(length):], dst[start:start+n])
		copy(dst[start:], length)
		return dst
	}
}

// Header is a request header whose value varies per request: Append
// appends request number i's value to dst, without allocating.
type Header struct {
	Name   string
	Append func(dst []byte, i uint64) []byte
}

// Result is one run's outcome.
type Result struct {
	// Requests completed with status 200, and Errors (other statuses,
	// connection failures).
	Requests, Errors uint64
	// Elapsed is the measured wall time.
	Elapsed time.Duration
	// Latencies are the sorted per-request latencies (fixed-rate mode
	// only; bounded by rate × duration).
	Latencies []time.Duration
	// Intended is how many requests the schedule asked for (fixed rate).
	Intended uint64
	// PacerLag is the median delay of the fixed-rate pacer behind the
	// schedule (included in every latency).
	PacerLag time.Duration
}

// RPS is completed requests per second.
func (r Result) RPS() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }

// Quantile returns the q-quantile (0..1) of the latencies (nearest rank).
func (r Result) Quantile(q float64) time.Duration { return stats.Quantile(r.Latencies, q) }

// conn is one keep-alive connection.
type conn struct {
	c   net.Conn
	r   *bufio.Reader
	buf []byte
}

func dial(addr string) (*conn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, r: bufio.NewReaderSize(c, 16<<10)}, nil
}

// do sends one request and reads its response; it returns the status code.
func (c *conn) do(req RequestFunc, i uint64) (int, error) {
	c.buf = req(c.buf[:0], i)
	if _, err := c.c.Write(c.buf); err != nil {
		return 0, err
	}
	return readResponse(c.r)
}

var errMalformed = errors.New("malformed response")

// readResponse reads one HTTP/1.1 response with a Content-Length body.
func readResponse(r *bufio.Reader) (int, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, errMalformed
	}
	code, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, errMalformed
	}
	length := 0
	for {
		line, err = r.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(line) <= 2 {
			break
		}
		if len(line) > 16 && bytes.EqualFold(line[:15], []byte("content-length:")) {
			length, err = strconv.Atoi(string(bytes.TrimSpace(line[15:])))
			if err != nil {
				return 0, errMalformed
			}
		}
	}
	if length > 0 {
		if _, err := r.Discard(length); err != nil {
			return 0, err
		}
	}
	return code, nil
}

// dialAll opens n connections.
func dialAll(addr string, n int) ([]*conn, error) {
	conns := make([]*conn, 0, n)
	for range n {
		c, err := dial(addr)
		if err != nil {
			closeAll(conns)
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		conns = append(conns, c)
	}
	return conns, nil
}

func closeAll(conns []*conn) {
	for _, c := range conns {
		c.c.Close()
	}
}

// MaxThroughput runs conns closed-loop connections (one request in flight
// each) for d, or until limit requests were sent when limit > 0, and counts
// completed requests. Request numbers start at first and are unique across
// connections.
func MaxThroughput(ctx context.Context, addr string, conns int, d time.Duration, limit uint64, req RequestFunc, first uint64) (Result, error) {
	cs, err := dialAll(addr, conns)
	if err != nil {
		return Result{}, err
	}
	defer closeAll(cs)
	var next atomic.Uint64
	next.Store(first)
	var ok, bad atomic.Uint64
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	var firstErr error
	var errOnce sync.Once
	for _, c := range cs {
		wg.Go(func() {
			for ctx.Err() == nil {
				n := next.Add(1) - 1
				if limit > 0 && n-first >= limit {
					return
				}
				code, err := c.do(req, n)
				switch {
				case err != nil:
					bad.Add(1)
					errOnce.Do(func() { firstErr = err })
					return
				case code == 200:
					ok.Add(1)
				default:
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	res := Result{Requests: ok.Load(), Errors: bad.Load(), Elapsed: time.Since(start)}
	if firstErr != nil && !errors.Is(firstErr, io.EOF) {
		return res, fmt.Errorf("connection failed: %w", firstErr)
	}
	return res, nil
}

// FixedRate sends rate requests per second for d over up to conns
// connections (open loop). Each request has an intended send time on a fixed
// schedule; its latency is from that time to the end of its response, so
// time spent waiting for a free connection counts. Requests still unsent when
// d plus a grace period has passed are counted as errors.
//
// A pacer on its own locked OS thread sleeps with nanosleep(2) (timer slack
// 1 ns) until each intended time and hands the request to an idle
// connection: Go's own timers round sub-millisecond sleeps up to the
// millisecond of epoll_wait, which would swamp the latencies measured. How
// late the pacer itself ran is reported as PacerLag: part of every
// latency, the generator's floor.
func FixedRate(ctx context.Context, addr string, conns int, rate float64, d time.Duration, req RequestFunc, first uint64) (Result, error) {
	cs, err := dialAll(addr, conns)
	if err != nil {
		return Result{}, err
	}
	defer closeAll(cs)
	// The pacer holds a P while it sleeps in a system call; the connections
	// need another one (both share the pinned CPU).
	if prev := runtime.GOMAXPROCS(0); prev < 2 {
		runtime.GOMAXPROCS(2)
		defer runtime.GOMAXPROCS(prev)
	}
	total := uint64(rate * d.Seconds())
	interval := time.Duration(float64(time.Second) / rate)
	lat := make([]time.Duration, total)
	lag := make([]time.Duration, 0, total)
	work := make(chan uint64, total)
	var done, bad atomic.Uint64
	var wg sync.WaitGroup
	var firstErr error
	var errOnce sync.Once
	start := time.Now().Add(20 * time.Millisecond)
	deadline := start.Add(d + 2*time.Second)
	for _, c := range cs {
		wg.Go(func() {
			for n := range work {
				intended := start.Add(time.Duration(n) * interval)
				if time.Now().After(deadline) {
					continue
				}
				code, err := c.do(req, first+n)
				end := time.Now()
				if err != nil {
					bad.Add(1)
					errOnce.Do(func() { firstErr = err })
					return
				}
				if code != 200 {
					bad.Add(1)
					continue
				}
				lat[n] = max(end.Sub(intended), 1)
				done.Add(1)
			}
		})
	}
	func() { // the pacer
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
		defer syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 0, 0) // back to the default
		defer close(work)
		for n := range total {
			if ctx.Err() != nil {
				return
			}
			intended := start.Add(time.Duration(n) * interval)
			if wait := time.Until(intended); wait > 0 {
				ts := syscall.NsecToTimespec(int64(wait))
				syscall.Nanosleep(&ts, nil)
			}
			lag = append(lag, time.Since(intended))
			work <- n
		}
	}()
	wg.Wait()
	res := Result{Requests: done.Load(), Errors: bad.Load(), Elapsed: time.Since(start), Intended: total}
	res.Latencies = slices.DeleteFunc(lat, func(l time.Duration) bool { return l == 0 })
	slices.Sort(res.Latencies)
	slices.Sort(lag)
	if len(lag) > 0 {
		res.PacerLag = lag[len(lag)/2]
	}
	if firstErr != nil {
		return res, fmt.Errorf("connection failed: %w", firstErr)
	}
	return res, nil
}

// prSetTimerSlack is prctl's PR_SET_TIMERSLACK.
const prSetTimerSlack = 29
