package harness

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"
)

// Allotd is the command line of an allotd on loopback.
type Allotd struct {
	// Admin and XDS are the admin and xDS listeners' addresses, host:port.
	Admin, XDS string
	// DB is the bbolt file (-db); Store, when set, is -store instead
	// (etcd://host:port,...), with ReplicaID and LeaseTTL when not zero.
	DB, Store, ReplicaID string
	LeaseTTL             time.Duration
	// Tokens is the admin API's token file; Wasm and Native are the
	// filter's artifacts (-wasm-path, -native-path; Native may be empty).
	Tokens, Wasm, Native string
	// LogLevel is -log-level.
	LogLevel string
	// Extra is appended to the command line.
	Extra []string
}

// Args is allotd's command line for a.
func (a Allotd) Args() []string {
	args := []string{"-admin-addr", a.Admin, "-xds-addr", a.XDS}
	if a.Store != "" {
		args = append(args, "-store", a.Store)
		if a.ReplicaID != "" {
			args = append(args, "-replica-id", a.ReplicaID)
		}
		if a.LeaseTTL != 0 {
			args = append(args, "-lease-ttl", a.LeaseTTL.String())
		}
	} else if a.DB != "" {
		args = append(args, "-db", a.DB)
	}
	args = append(args, "-tokens", a.Tokens, "-wasm-path", a.Wasm)
	if a.Native != "" {
		args = append(args, "-native-path", a.Native)
	}
	if a.LogLevel != "" {
		args = append(args, "-log-level", a.LogLevel)
	}
	return append(args, a.Extra...)
}

// LaunchAllotd starts allotd (binary bin) with a's command line, pinned to
// CPU cpu (unpinned when negative), its output in logPath. The caller
// stops it and waits until it is ready (WaitReady).
func LaunchAllotd(name, logPath, bin string, cpu int, a Allotd) (*Process, error) {
	return Launch(name, logPath, PinnedCommand(cpu, bin, a.Args()...))
}

// MustLaunchAllotd is LaunchAllotd for a test, unpinned: the log goes to
// t.TempDir() and the process is stopped at cleanup (MustLaunch).
func MustLaunchAllotd(t testing.TB, name, bin string, a Allotd) *Process {
	t.Helper()
	return MustLaunch(t, name, PinnedCommand(-1, bin, a.Args()...))
}

// WaitReady waits until the allotd p, started with a's command line over
// plain HTTP, answers its admin /readyz with 2xx.
func (a Allotd) WaitReady(p *Process, timeout time.Duration) error {
	if err := p.WaitHTTP("http://"+a.Admin+"/readyz", timeout); err != nil {
		return fmt.Errorf("allotd %s not ready: %w", a.ReplicaID, err)
	}
	return nil
}

// ReplicaID is replica i's -replica-id: r1, r2, ...
func ReplicaID(i int) string { return fmt.Sprintf("r%d", i+1) }

// Replica is the command line of replica i on cluster c: free loopback
// ports for the admin API and xDS, ReplicaID(i), the cluster's -store and
// leaseTTL. The caller sets the rest (tokens, artifacts, log level).
func (c *EtcdCluster) Replica(i int, leaseTTL time.Duration) (Allotd, error) {
	var ports [2]int
	for j := range ports {
		var err error
		if ports[j], err = FreePort(); err != nil {
			return Allotd{}, err
		}
	}
	return Allotd{
		Admin: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), XDS: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
		Store: c.StoreURL(), ReplicaID: ReplicaID(i), LeaseTTL: leaseTTL,
	}, nil
}
