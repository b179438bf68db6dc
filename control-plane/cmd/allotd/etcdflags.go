package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	outcomesetcd "github.com/allotmesh/allot/control-plane/outcomes/etcd"
	rolloutetcd "github.com/allotmesh/allot/control-plane/rollout/etcd"
	"github.com/allotmesh/allot/control-plane/server"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/store/etcd"
)

// etcdFlags are the options of -store etcd://: the connection's (allotd
// and allotd migrate) and the replica's (allotd only).
type etcdFlags struct {
	ca, cert, key string
	prefix        string
	timeout       time.Duration
	replicaID     string
	leaseTTL      time.Duration
}

// register defines the flags of the connection to etcd.
func (f *etcdFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.ca, "etcd-ca", "", "PEM CA `file` to verify the etcd members' certificates (connects over TLS)")
	fs.StringVar(&f.cert, "etcd-cert", "", "PEM client certificate `file` for etcd (with -etcd-key; connects over TLS)")
	fs.StringVar(&f.key, "etcd-key", "", "PEM private key `file` of -etcd-cert")
	fs.StringVar(&f.prefix, "etcd-prefix", etcd.DefaultPrefix, "key prefix of Allot's data in etcd (replicas of one mesh share it)")
	fs.DurationVar(&f.timeout, "store-timeout", etcd.DefaultRequestTimeout, "bound on each etcd request, and on all the requests of one admin write together: a write retries through a leader election for at most this long (allotd then answers 503)")
}

// registerReplica defines the flags of a replica in the mesh registry.
func (f *etcdFlags) registerReplica(fs *flag.FlagSet) {
	fs.StringVar(&f.replicaID, "replica-id", "", "this replica's name in the mesh registry, unique among the replicas (default: host name and -xds-addr)")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", rolloutetcd.DefaultLeaseTTL, "how long a dead replica's proxies stay in the mesh's live set (its etcd lease's TTL)")
}

// clientConfig turns -store etcd://h1:2379,h2:2379 and the TLS flags into
// an etcd client configuration.
func (f *etcdFlags) clientConfig(storeURL string) (clientv3.Config, error) {
	hosts, ok := strings.CutPrefix(storeURL, "etcd://")
	if !ok || hosts == "" {
		return clientv3.Config{}, fmt.Errorf("-store %q: want etcd://host:port[,host:port...]", storeURL)
	}
	var tlsCfg *tls.Config
	if f.ca != "" || f.cert != "" || f.key != "" {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
		if f.ca != "" {
			pem, err := os.ReadFile(f.ca)
			if err != nil {
				return clientv3.Config{}, fmt.Errorf("-etcd-ca: %w", err)
			}
			tlsCfg.RootCAs = x509.NewCertPool()
			if !tlsCfg.RootCAs.AppendCertsFromPEM(pem) {
				return clientv3.Config{}, fmt.Errorf("-etcd-ca %s: no PEM certificate", f.ca)
			}
		}
		switch {
		case f.cert != "" && f.key != "":
			c, err := tls.LoadX509KeyPair(f.cert, f.key)
			if err != nil {
				return clientv3.Config{}, fmt.Errorf("-etcd-cert/-etcd-key: %w", err)
			}
			tlsCfg.Certificates = []tls.Certificate{c}
		case f.cert != "" || f.key != "":
			return clientv3.Config{}, fmt.Errorf("-etcd-cert and -etcd-key go together")
		}
	}
	scheme := "http://"
	if tlsCfg != nil {
		scheme = "https://"
	}
	var eps []string
	for h := range strings.SplitSeq(hosts, ",") {
		if _, _, err := net.SplitHostPort(h); err != nil {
			return clientv3.Config{}, fmt.Errorf("-store %q: endpoint %q: %w", storeURL, h, err)
		}
		eps = append(eps, scheme+h)
	}
	return clientv3.Config{
		Endpoints: eps, TLS: tlsCfg, DialTimeout: f.timeout,
		DialKeepAliveTime: 5 * time.Second, DialKeepAliveTimeout: 3 * time.Second,
	}, nil
}

// runEtcd runs allotd as one replica on the etcd store.
func runEtcd(ctx context.Context, storeURL string, f etcdFlags, cfg server.Config) error {
	cc, err := f.clientConfig(storeURL)
	if err != nil {
		return err
	}
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "allot_store_request_duration_seconds",
		Help:    "Duration of the etcd store's calls by operation and result: ok (it answered, refusals included), unavailable, error.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"op", "result"})
	observe := func(op string, d time.Duration, err error) {
		result := "ok" // the store answered, refusals (not found, conflict...) included
		switch {
		case errors.Is(err, store.ErrUnavailable):
			result = "unavailable"
		case err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrExists) &&
			!errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrInvalid):
			result = "error"
		}
		latency.WithLabelValues(op, result).Observe(d.Seconds())
	}
	cfg.Collectors = append(cfg.Collectors, latency)
	db, err := etcd.Open(ctx, cc, etcd.WithPrefix(f.prefix), etcd.WithRequestTimeout(f.timeout), etcd.WithObserver(observe))
	if err != nil {
		return err
	}
	defer db.Close()
	id := f.replicaID
	if id == "" {
		host, _ := os.Hostname()
		id = host + "/" + cfg.XDSAddr
	}
	reg := rolloutetcd.New(db.Conn(), id, f.leaseTTL)
	cfg.Registry, cfg.ReplicaID, cfg.Outcomes = reg, id, outcomesetcd.New(db.Conn(), id)
	cfg.Logger.Info("store opened", "store", db.Name(), "prefix", f.prefix, "replica", id)
	return server.Run(ctx, db, cfg)
}
