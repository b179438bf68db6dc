package harness

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// EtcdPackage is the etcd server the replicated allotd's store is tested
// and benchmarked against: the go.mod tool `make etcd` builds.
const EtcdPackage = "go.etcd.io/etcd/server/v3"

// EtcdCluster is the layout of a cluster of real etcd server processes on
// loopback: each member's name, ports and data directory. StartEtcd (the
// benchmark) and MustStartEtcd (a test) lay one out and start every member;
// Launch and MustLaunch start one member, so that a test can kill and
// restart members on their data and ports. Replica is the command line of
// an allotd replica on the cluster.
type EtcdCluster struct {
	// Bin is the etcd server binary.
	Bin string
	// Members are the cluster's members, in order.
	Members []EtcdMember
	initial string
}

// EtcdMember is one member of an EtcdCluster.
type EtcdMember struct {
	// Name is the member's name (m0, m1, ...).
	Name string
	// Dir is its data directory.
	Dir string
	// Client and Peer are its ports on 127.0.0.1.
	Client, Peer int
}

// Endpoint is the member's client address, host:port.
func (m EtcdMember) Endpoint() string { return fmt.Sprintf("127.0.0.1:%d", m.Client) }

// NewEtcdCluster lays out n members of binary bin with their data
// directories under dir and free loopback ports.
func NewEtcdCluster(bin, dir string, n int) (*EtcdCluster, error) {
	c := &EtcdCluster{Bin: bin}
	var initial []string
	for i := range n {
		m := EtcdMember{Name: fmt.Sprintf("m%d", i), Dir: filepath.Join(dir, fmt.Sprintf("etcd-m%d", i))}
		var err error
		if m.Client, err = FreePort(); err != nil {
			return nil, err
		}
		if m.Peer, err = FreePort(); err != nil {
			return nil, err
		}
		c.Members = append(c.Members, m)
		initial = append(initial, fmt.Sprintf("%s=http://127.0.0.1:%d", m.Name, m.Peer))
	}
	c.initial = strings.Join(initial, ",")
	return c, nil
}

// Command is member i's command line; state is "new" when the cluster
// forms and "existing" when a member of a running cluster restarts. The
// history is compacted periodically, as docs/operators.md advises
// for the mesh registry (every minute: a test's or a benchmark's history
// is short).
func (c *EtcdCluster) Command(i int, state string) *exec.Cmd {
	return exec.Command(c.Bin, c.args(i, state)...)
}

func (c *EtcdCluster) args(i int, state string) []string {
	m := c.Members[i]
	return []string{"--name", m.Name, "--data-dir", m.Dir,
		"--listen-client-urls", "http://" + m.Endpoint(), "--advertise-client-urls", "http://" + m.Endpoint(),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", m.Peer),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", m.Peer),
		"--initial-cluster", c.initial, "--initial-cluster-state", state, "--initial-cluster-token", "allot-harness",
		"--auto-compaction-mode", "periodic", "--auto-compaction-retention", "1m",
		"--log-level", "warn"}
}

// Launch starts member i (state as for Command) pinned to CPU cpu
// (unpinned when negative), its output in logPath. The caller stops it.
func (c *EtcdCluster) Launch(i int, state string, cpu int, logPath string) (*Process, error) {
	return Launch("etcd-"+c.Members[i].Name, logPath, PinnedCommand(cpu, c.Bin, c.args(i, state)...))
}

// MustLaunch is Launch for a test, unpinned: the member's log goes to
// t.TempDir() and the member is stopped at cleanup (MustLaunch).
func (c *EtcdCluster) MustLaunch(t testing.TB, i int, state string) *Process {
	t.Helper()
	return MustLaunch(t, "etcd-"+c.Members[i].Name, c.Command(i, state))
}

// StartEtcd starts a fresh cluster of n members of binary bin, their data
// and logs (etcd-<name>.log) under dir, each pinned to CPU cpu (unpinned
// when negative), and waits until every member is healthy. The caller
// stops the members it returns, in order, even with an error.
func StartEtcd(bin, dir string, n, cpu int) (*EtcdCluster, []*Process, error) {
	c, err := NewEtcdCluster(bin, dir, n)
	if err != nil {
		return nil, nil, err
	}
	var procs []*Process
	for i, m := range c.Members {
		p, err := c.Launch(i, "new", cpu, filepath.Join(dir, "etcd-"+m.Name+".log"))
		if err != nil {
			return nil, procs, err
		}
		procs = append(procs, p)
	}
	return c, procs, c.WaitHealthy(procs, EtcdStartTimeout)
}

// MustStartEtcd is StartEtcd for a test: n unpinned members of bin under
// t.TempDir(), stopped at cleanup; it fails the test if one does not
// become healthy.
func MustStartEtcd(t testing.TB, bin string, n int) (*EtcdCluster, []*Process) {
	t.Helper()
	c, err := NewEtcdCluster(bin, t.TempDir(), n)
	if err != nil {
		t.Fatal(err)
	}
	var procs []*Process
	for i := range c.Members {
		procs = append(procs, c.MustLaunch(t, i, "new"))
	}
	if err := c.WaitHealthy(procs, EtcdStartTimeout); err != nil {
		t.Fatal(err)
	}
	return c, procs
}

// EtcdStartTimeout bounds how long a member takes to become healthy.
const EtcdStartTimeout = 30 * time.Second

// HealthURL is member i's health endpoint: 2xx once the member has joined
// a cluster with a leader.
func (c *EtcdCluster) HealthURL(i int) string {
	return fmt.Sprintf("http://%s/health", c.Members[i].Endpoint())
}

// WaitHealthy waits until every member answers its health endpoint with
// 2xx, failing early if one of procs (the members' processes, in order)
// exits.
func (c *EtcdCluster) WaitHealthy(procs []*Process, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for i := range c.Members {
		for {
			err := get2xx(Client, c.HealthURL(i))
			if err == nil {
				break
			}
			if i < len(procs) && procs[i].Exited() {
				return fmt.Errorf("etcd member %s exited (%v):\n%s", c.Members[i].Name, procs[i].waitErr, procs[i].LogTail(20))
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("etcd member %s not healthy within %v: %w", c.Members[i].Name, timeout, err)
			}
			time.Sleep(pollInterval)
		}
	}
	return nil
}

// StoreURL is allotd's -store flag for the cluster: etcd://h:p,h:p,...
func (c *EtcdCluster) StoreURL() string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.Endpoint())
	}
	return "etcd://" + strings.Join(eps, ",")
}

// Leader returns the index of the member that leads the cluster, from
// etcd's own status endpoint; members that do not answer are skipped.
func (c *EtcdCluster) Leader() (int, error) {
	var id string
	var errs []string
	for i, m := range c.Members {
		resp, err := Client.Post(fmt.Sprintf("http://%s/v3/maintenance/status", m.Endpoint()), "application/json", strings.NewReader("{}"))
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		var st struct {
			Header struct {
				MemberID string `json:"member_id"`
			} `json:"header"`
			Leader string `json:"leader"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			return -1, fmt.Errorf("etcd member %s status: %w", m.Name, err)
		}
		if id = st.Leader; st.Header.MemberID == st.Leader {
			return i, nil
		}
	}
	return -1, fmt.Errorf("no etcd member leads (leader id %q; %s)", id, strings.Join(errs, "; "))
}
