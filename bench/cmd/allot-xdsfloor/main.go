// Command allot-xdsfloor is the replicas section's floor (bench/xdsfloor): a
// bare go-control-plane xDS server on -xds-addr, and on -http-addr
//
//	GET  /streams            the number of open streams that sent a request
//	POST /push?wait=<dur>    body: an envoy.config.core.v3.TypedExtensionConfig
//	                         (binary protobuf); sets it as the next version and
//	                         answers {"version","acked"} once every open stream
//	                         acknowledged it (504 after wait, default 30s)
//	GET  /debug/pprof/profile a CPU profile (net/http/pprof)
//
// With -etcd it is also one server of the replicated floor
// (xdsfloor.Follow): it pushes every resource committed under -prefix's
// config key and commits, under its settled key for -id, that its fleet
// applied it.
//
// allot-bench starts it; it stops on SIGTERM or SIGINT. Both addresses, and
// every etcd endpoint, must be loopback.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/allotmesh/allot/bench/xdsfloor"
	"github.com/allotmesh/allot/internal/command"
)

// maxResourceBytes bounds a pushed resource: Allot's own are far smaller.
const maxResourceBytes = 16 << 20

func main() { command.Main("allot-xdsfloor", run) }

func run(ctx context.Context, args []string) error {
	var xdsAddr, httpAddr, etcd, id, prefix string
	fs := flag.NewFlagSet("allot-xdsfloor", flag.ContinueOnError)
	fs.StringVar(&xdsAddr, "xds-addr", "127.0.0.1:0", "xDS listen address (loopback only)")
	fs.StringVar(&httpAddr, "http-addr", "127.0.0.1:0", "control listen address (loopback only)")
	fs.StringVar(&etcd, "etcd", "", "comma-separated etcd endpoints (http://127.0.0.1:port): serve as one server of the replicated floor")
	fs.StringVar(&id, "id", "", "with -etcd: this server's id")
	fs.StringVar(&prefix, "prefix", "/bench/floor-replicated/", "with -etcd: the keys' prefix")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if etcd != "" && id == "" {
		return errors.New("-etcd needs -id")
	}
	xl, err := listenLoopback("-xds-addr", xdsAddr)
	if err != nil {
		return err
	}
	hl, err := listenLoopback("-http-addr", httpAddr)
	if err != nil {
		return err
	}
	s := xdsfloor.New(ctx)
	g := grpc.NewServer(grpc.MaxConcurrentStreams(1 << 20))
	s.Register(g)
	h := &http.Server{Handler: handler(s), ReadHeaderTimeout: 5 * time.Second}
	fmt.Printf("xds %s http %s\n", xl.Addr(), hl.Addr())
	go func() {
		<-ctx.Done()
		g.Stop()
		h.Close()
	}()
	go func() { _ = g.Serve(xl) }()
	if etcd != "" {
		c, err := dialEtcd(etcd)
		if err != nil {
			return err
		}
		defer c.Close()
		go func() {
			if err := xdsfloor.Follow(ctx, c, s, prefix, id); err != nil && ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, "allot-xdsfloor:", err)
				h.Close() // the run ends with the error
			}
		}()
	}
	if err := h.Serve(hl); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func listenLoopback(flag, addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("%s %q: want a loopback host:port", flag, addr)
	}
	return net.Listen("tcp", addr)
}

// dialEtcd connects to the comma-separated loopback endpoints.
func dialEtcd(endpoints string) (*clientv3.Client, error) {
	eps := strings.Split(endpoints, ",")
	for _, ep := range eps {
		u, err := url.Parse(ep)
		if err != nil || u.Hostname() == "" || !net.ParseIP(u.Hostname()).IsLoopback() {
			return nil, fmt.Errorf("-etcd %q: want http://<loopback ip>:<port>, comma-separated", ep)
		}
	}
	return clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

func handler(s *xdsfloor.Server) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /streams", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, s.Streams())
	})
	mux.HandleFunc("POST /push", func(w http.ResponseWriter, r *http.Request) {
		wait := 30 * time.Second
		if q := r.URL.Query().Get("wait"); q != "" {
			d, err := time.ParseDuration(q)
			if err != nil || d <= 0 {
				http.Error(w, "wait: want a positive duration", http.StatusBadRequest)
				return
			}
			wait = d
		}
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxResourceBytes))
		if err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		ext := &corev3.TypedExtensionConfig{}
		if err := proto.Unmarshal(b, ext); err != nil || ext.GetName() == "" {
			http.Error(w, "body: want a binary envoy.config.core.v3.TypedExtensionConfig with a name", http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		defer cancel()
		v, n, err := s.Push(ctx, ext)
		if err != nil {
			http.Error(w, err.Error(), http.StatusGatewayTimeout)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Version string `json:"version"`
			Acked   int    `json:"acked"`
		}{v, n})
	})
	return mux
}
