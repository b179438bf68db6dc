// Package etcdtest starts real etcd members in the test process
// (go.etcd.io/etcd/server/v3/embed), listening on 127.0.0.1 only, each with
// its own data directory: a single member or a cluster whose members a test
// can stop and restart to take the quorum away and give it back.
//
// It is for tests only; it must not be imported by code that ships.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/allotmesh/allot/control-plane/store/etcd"
)

// StartTimeout bounds the start of a cluster or of a restarted member.
const StartTimeout = 30 * time.Second

// Cluster is a running etcd cluster of in-process members.
type Cluster struct {
	t       testing.TB
	members []*member
	initial string // the initial-cluster setting every member shares
}

type member struct {
	name      string
	dir       string
	peer, cli url.URL
	etcd      *embed.Etcd
	restarted bool
}

// Start starts an n-member cluster and waits until every member serves;
// t.Cleanup stops it.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	var initial []string
	for i := range n {
		m := &member{
			name: fmt.Sprintf("m%d", i),
			dir:  t.TempDir(),
			peer: url.URL{Scheme: "http", Host: freeAddr(t)},
			cli:  url.URL{Scheme: "http", Host: freeAddr(t)},
		}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+m.peer.String())
	}
	c.initial = strings.Join(initial, ",")
	t.Cleanup(func() {
		for _, m := range c.members {
			if m.etcd != nil {
				m.etcd.Close()
			}
		}
	})
	errc := make(chan error, n)
	for _, m := range c.members {
		go func() { errc <- c.start(m) }()
	}
	for range n {
		if err := <-errc; err != nil {
			t.Fatalf("start etcd: %v", err)
		}
	}
	return c
}

func (c *Cluster) start(m *member) error {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ListenPeerUrls = []url.URL{m.peer}
	cfg.AdvertisePeerUrls = []url.URL{m.peer}
	cfg.ListenClientUrls = []url.URL{m.cli}
	cfg.AdvertiseClientUrls = []url.URL{m.cli}
	cfg.InitialCluster = c.initial
	cfg.InitialClusterToken = "allot-test"
	cfg.ClusterState = embed.ClusterStateFlagNew
	if m.restarted {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("member %s: %w", m.name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("member %s: %w", m.name, err)
	case <-time.After(StartTimeout):
		e.Close()
		return fmt.Errorf("member %s: not ready after %s", m.name, StartTimeout)
	}
	m.etcd = e
	return nil
}

// Endpoints are the members' client URLs, stopped members included.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.cli.String()
	}
	return out
}

// Stop stops member i (its data directory stays).
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	m := c.members[i]
	if m.etcd == nil {
		c.t.Fatalf("etcd member %s is not running", m.name)
	}
	m.etcd.Close()
	m.etcd = nil
}

// Restart starts stopped member i again on its data directory and ports,
// and waits until it serves (which needs a quorum of running members).
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	m := c.members[i]
	if m.etcd != nil {
		c.t.Fatalf("etcd member %s is running", m.name)
	}
	m.restarted = true
	if err := c.start(m); err != nil {
		c.t.Fatalf("restart etcd: %v", err)
	}
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pick a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Open opens an etcd store on every member of c, failing the test if it
// cannot, and closes it when the test ends.
func (c *Cluster) Open(t testing.TB, opts ...etcd.Option) *etcd.Store {
	t.Helper()
	s, err := etcd.Open(t.Context(), clientv3.Config{Endpoints: c.Endpoints()}, opts...)
	if err != nil {
		t.Fatalf("open etcd store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
