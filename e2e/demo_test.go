//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/allotmesh/allot/internal/echo"
	"github.com/allotmesh/allot/internal/harness"
)

// The demos (`make run`: scripts/run-demo.sh, `make run-ha`:
// scripts/run-ha.sh) print commands for a person to try. These tests start
// a demo on free ports (the scripts' environment variables move them), read
// the commands from what it printed, run every one of them from the
// repository root as a person would, in order, and check what each shows:
// a printed command that stops working, or a new one, fails here.

// demoStopTimeout bounds how long a demo takes to stop everything on
// SIGTERM (Ctrl-C).
const demoStopTimeout = 20 * time.Second

// demoStep is one paragraph of a demo's instructions: what it says, then
// the commands it prints (the lines indented by two spaces).
type demoStep struct {
	say  string
	cmds []string
}

// demo is a demo script running in its own process group.
type demo struct {
	t    *testing.T
	root string
	proc *harness.Process
	env  []string // the commands' environment
	// steps are the instructions the demo printed, in order.
	steps []demoStep
}

// demoBin lays out in one directory what the demo scripts run from bin/
// (the BIN variable moves it), built by harness like every e2e binary:
// what `make build` builds, the native module when native is set (make
// build-native), etcd when etcd is set (make etcd).
func demoBin(t *testing.T, native, etcd bool) string {
	t.Helper()
	built := map[string]string{
		"allotd":     harness.MustBuild(t, "./control-plane/cmd/allotd"),
		"allotctl":   harness.MustBuild(t, "./control-plane/cmd/allotctl"),
		"allot-echo": harness.MustBuild(t, "./internal/echo/cmd/allot-echo"),
		"allot.wasm": harness.MustBuildWasm(t, "./filter"),
	}
	if native {
		built["liballot.so"] = harness.MustBuildNative(t, "./filter/native", "liballot.so")
	}
	if etcd {
		built["etcd"] = harness.MustBuild(t, harness.EtcdPackage)
	}
	dir := t.TempDir()
	for name, path := range built {
		if err := os.Symlink(path, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// startDemo runs script (relative to the repository root) with env added
// to the test's environment, waits until it printed its instructions
// ("Press Ctrl-C to stop."), and parses them. The script runs in its own
// process group; when the test ends it is stopped, and every process left
// in its group is killed (and fails the test).
func startDemo(t *testing.T, script string, env ...string) *demo {
	t.Helper()
	root := repoPath(t, ".")
	// Without ALLOT_* of the caller's shell, which would redirect allotctl.
	var base []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ALLOT_") {
			base = append(base, kv)
		}
	}
	cmd := exec.Command(filepath.Join(root, script))
	cmd.Dir = root
	cmd.Env = append(slices.Clone(base), env...)
	// Its own group, so that what it started can be found and killed; and
	// SIGTERM, which the script traps to stop its children, if this test
	// binary dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	var pgid int
	// Registered before StartCmd, so it runs after StartCmd's cleanup has
	// stopped the script.
	t.Cleanup(func() {
		if pgid == 0 {
			return
		}
		if left := groupMembers(pgid); len(left) > 0 {
			t.Errorf("%s left processes behind after it stopped:\n%s", script, strings.Join(left, "\n"))
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	})
	d := &demo{t: t, root: root, env: base}
	d.proc = harness.MustLaunch(t, filepath.Base(script), cmd)
	pgid = d.proc.Pid()

	deadline := time.Now().Add(90 * time.Second)
	for !strings.Contains(d.proc.MustLog(t), "Press Ctrl-C to stop.") {
		if d.proc.Exited() {
			t.Fatalf("%s exited (%v) before printing its instructions:\n%s", script, d.proc.Wait(), d.proc.MustLog(t))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s printed no instructions within 90 s:\n%s", script, d.proc.MustLog(t))
		}
		select {
		case <-d.proc.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	steps, err := parseDemoSteps(d.proc.MustLog(t))
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, d.proc.MustLog(t))
	}
	d.steps = steps
	return d
}

// parseDemoSteps reads a demo's instructions from its output: from the
// line "Allot is running..." to the line "Logs are in ... Press Ctrl-C to
// stop.", paragraphs separated by blank lines. The first paragraph says
// what runs where; every other is one step: text, then the commands, each
// on a line indented by two spaces. A paragraph without commands, or with
// text after them, is an error: every command printed must be found.
func parseDemoSteps(out string) ([]demoStep, error) {
	lines := strings.Split(out, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "Allot is running") })
	end := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "Press Ctrl-C to stop.") })
	if start < 0 || end < start {
		return nil, errors.New(`no "Allot is running" ... "Press Ctrl-C to stop." in the output`)
	}
	var steps []demoStep
	var para []string
	flush := func() error {
		defer func() { para = nil }()
		if len(para) == 0 {
			return nil
		}
		var s demoStep
		for _, l := range para {
			switch {
			case strings.HasPrefix(l, "  "):
				s.cmds = append(s.cmds, strings.TrimSpace(l))
			case len(s.cmds) > 0:
				return fmt.Errorf("paragraph %q: text %q after its commands", para[0], l)
			default:
				s.say = strings.TrimSpace(s.say + " " + l)
			}
		}
		if len(s.cmds) == 0 {
			return fmt.Errorf("paragraph %q prints no command", para[0])
		}
		steps = append(steps, s)
		return nil
	}
	// Skip the first paragraph (what runs where); the last line is "Logs
	// are in ...".
	i := start
	for i < end && strings.TrimSpace(lines[i]) != "" {
		i++
	}
	for ; i < end; i++ {
		if strings.TrimSpace(lines[i]) == "" {
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		para = append(para, lines[i])
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return steps, nil
}

// TestParseDemoSteps: the commands are the indented lines of each
// paragraph after the first; a paragraph that prints no command, or text
// after its commands, is an error rather than a step skipped.
func TestParseDemoSteps(t *testing.T) {
	const head = "created x\n\nAllot is running:\n  allotd  127.0.0.1:8080\n\n"
	const tail = "\nLogs are in tmp/. Press Ctrl-C to stop.\n02:00:00 allotd-1 exited\n"
	for _, tc := range []struct {
		name, out string
		want      []demoStep
		err       string
	}{
		{"steps", head + "See it:\n  curl a\n  curl b\n\nKill it\n(really):\n  kill 1\n" + tail,
			[]demoStep{{"See it:", []string{"curl a", "curl b"}}, {"Kill it (really):", []string{"kill 1"}}}, ""},
		{"no command", head + "See it:\n  curl a\n\nJust words.\n" + tail, nil, "prints no command"},
		{"text after commands", head + "See it:\n  curl a\nand more\n" + tail, nil, "after its commands"},
		{"no instructions", "created x\n", nil, "no \"Allot is running\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseDemoSteps(tc.out)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.EqualFunc(got, tc.want, func(a, b demoStep) bool {
				return a.say == b.say && slices.Equal(a.cmds, b.cmds)
			}) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// step returns step i after checking that it is the step the test expects:
// n commands, one of which contains want. A failure means the demo's
// instructions changed and this test must follow, running every command.
func (d *demo) step(i, n int, want string) demoStep {
	d.t.Helper()
	if i >= len(d.steps) {
		d.t.Fatalf("the demo printed %d steps; want step %d with a command containing %q", len(d.steps), i+1, want)
	}
	s := d.steps[i]
	if len(s.cmds) != n || !slices.ContainsFunc(s.cmds, func(c string) bool { return strings.Contains(c, want) }) {
		d.t.Fatalf("step %d (%q) prints %q; want %d commands, one containing %q", i+1, s.say, s.cmds, n, want)
	}
	return s
}

// run runs one printed command with bash from the repository root and
// returns its combined output; a non-zero exit fails the test.
func (d *demo) run(command string) string {
	d.t.Helper()
	out, err := d.try(command)
	if err != nil {
		d.t.Fatalf("%s: %v\n%s", command, err, out)
	}
	return out
}

// runAll runs every command of s in order and checks that the last one's
// output contains want.
func (d *demo) runAll(s demoStep, want string) {
	d.t.Helper()
	var out string
	for _, c := range s.cmds {
		out = d.run(c)
	}
	if !strings.Contains(out, want) {
		d.t.Fatalf("%s: want %q in its output:\n%s", s.cmds[len(s.cmds)-1], want, out)
	}
}

// try is run returning the error.
func (d *demo) try(command string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", command)
	cmd.Dir = d.root
	cmd.Env = d.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// alive fails the test if the demo has stopped.
func (d *demo) alive(when string) {
	d.t.Helper()
	if d.proc.Exited() {
		d.t.Fatalf("the demo stopped %s (%v):\n%s", when, d.proc.Wait(), d.proc.MustLog(d.t))
	}
}

// waitLog waits until the demo's output contains s.
func (d *demo) waitLog(s string, timeout time.Duration) {
	d.t.Helper()
	harness.MustEventually(d.t, timeout, func() error {
		d.alive("waiting for " + strconv.Quote(s))
		if !strings.Contains(d.proc.MustLog(d.t), s) {
			return fmt.Errorf("the demo's output has no %q", s)
		}
		return nil
	})
}

// stop sends SIGTERM (what Ctrl-C does to it) and checks that the demo
// exits within demoStopTimeout and leaves no process of its group behind.
func (d *demo) stop() {
	d.t.Helper()
	if err := d.proc.Signal(syscall.SIGTERM); err != nil {
		d.t.Fatal(err)
	}
	select {
	case <-d.proc.Done():
	case <-time.After(demoStopTimeout):
		d.t.Fatalf("the demo did not stop within %v of SIGTERM", demoStopTimeout)
	}
	// Its children were stopped and waited for before it exited.
	if left := groupMembers(d.proc.Pid()); len(left) > 0 {
		d.t.Fatalf("the demo exited leaving processes behind:\n%s", strings.Join(left, "\n"))
	}
}

// groupMembers lists the processes of process group pgid ("pid command").
func groupMembers(pgid int) []string {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []string
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // it exited meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces.
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		f := strings.Fields(rest)
		if len(f) < 3 || f[2] != strconv.Itoa(pgid) || f[0] == "Z" {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join(filepath.Dir(path), "cmdline"))
		out = append(out, filepath.Base(filepath.Dir(path))+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
	}
	return out
}

// echoHeader decodes what a printed curl through Envoy showed (the echo
// upstream's JSON, whole or the line grep kept) and returns the assignment
// header's value.
func echoHeader(t *testing.T, out, header string) string {
	t.Helper()
	var r echo.Response
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
		t.Fatalf("decode the echo upstream's answer: %v\n%s", err, out)
	}
	v := r.Header(header)
	if len(v) != 1 {
		t.Fatalf("%s: %q, want one value\n%s", header, v, out)
	}
	return v[0]
}

// rolloutRow is one proxy in `allotctl rollout`'s table.
type rolloutRow struct{ node, state, artifact, replica string }

// rolloutTable reads `allotctl rollout`'s table: each proxy's node, state,
// artifact and (replicated) replica; and the lines "replica ID ...: ..., store
// revision N" as replica → revision.
func rolloutTable(out string) (rows []rolloutRow, revisions map[string]int, err error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	header := strings.Fields(lines[0])
	if len(header) == 0 || header[0] != "NODE" {
		return nil, nil, fmt.Errorf("no NODE header in %q", out)
	}
	state, artifact, replica := slices.Index(header, "STATE"), slices.Index(header, "ARTIFACT"), slices.Index(header, "REPLICA")
	revisions = map[string]int{}
	replicaLine := regexp.MustCompile(`^replica (\S+) .*store revision (\d+)$`)
	for _, l := range lines[1:] {
		if m := replicaLine.FindStringSubmatch(l); m != nil {
			revisions[m[1]], _ = strconv.Atoi(m[2])
			continue
		}
		f := strings.Fields(l)
		if len(f) != len(header) {
			continue // the per-version summary
		}
		r := rolloutRow{node: f[0], state: f[state], artifact: f[artifact]}
		if replica >= 0 {
			r.replica = f[replica]
		}
		rows = append(rows, r)
	}
	return rows, revisions, nil
}

// TestDemoRun runs `make run`'s scripts/run-demo.sh with each artifact and
// every command it prints: the assignments, the forged header stripped,
// the ramp to 100% green seen through Envoy, and the listings.
func TestDemoRun(t *testing.T) {
	for _, filter := range []string{"wasm", "native"} {
		t.Run(filter, func(t *testing.T) {
			bin := demoBin(t, filter == "native", false)
			d := startDemo(t, "scripts/run-demo.sh",
				"ENVOY_BIN="+harness.MustEnvoyBinary(t), "BIN="+bin, "FILTER="+filter, "STATE_DIR="+t.TempDir(),
				fmt.Sprintf("ENVOY_PORTS=%d", harness.MustFreePort(t)),
				fmt.Sprintf("ENVOY_ADMIN_PORTS=%d", harness.MustFreePort(t)),
				fmt.Sprintf("ALLOTD_ADMIN_PORTS=%d", harness.MustFreePort(t)),
				fmt.Sprintf("ALLOTD_XDS_PORTS=%d", harness.MustFreePort(t)),
				fmt.Sprintf("ECHO_PORT=%d", harness.MustFreePort(t)))
			const header = "x-experiment-checkout-button"

			// See the assignments: alice and bob each get one variation.
			see := d.step(0, 2, "curl")
			for _, c := range see.cmds {
				if v := echoHeader(t, d.run(c), header); v != "blue" && v != "green" {
					t.Fatalf("%s: %s %q, want blue or green", c, header, v)
				}
			}
			alice := echoHeader(t, d.run(see.cmds[0]), header)

			// The forged header never reaches the service: alice keeps hers.
			forged := d.step(1, 1, header+": forged")
			if got := echoHeader(t, d.run(forged.cmds[0]), header); got != alice {
				t.Fatalf("%s: %s %q, want alice's own %q", forged.cmds[0], header, got, alice)
			}

			// The ramp: both users see green within a second or so.
			d.runAll(d.step(2, 2, "allotctl apply"), "experiment/checkout-button configured")
			for _, c := range see.cmds {
				harness.MustEventually(t, 5*time.Second, func() error {
					if v := echoHeader(t, d.run(c), header); v != "green" {
						return fmt.Errorf("%s: %s %q after the ramp, want green", c, header, v)
					}
					return nil
				})
			}

			// The listings.
			lists := d.step(3, 4, "allotctl list")
			for _, c := range lists.cmds {
				out := d.run(c)
				switch {
				case strings.Contains(c, "allotctl list"), strings.Contains(c, "/v1/experiments"):
					if !strings.Contains(out, "checkout-button") || !strings.Contains(out, "search-ranking") {
						t.Fatalf("%s lists no example experiments:\n%s", c, out)
					}
				case strings.Contains(c, "allotctl rollout"):
					rows, _, err := rolloutTable(out)
					if err != nil || len(rows) != 1 || rows[0].state != "applied" || rows[0].artifact != filter {
						t.Fatalf("%s: %+v, want the demo's Envoy running %s, applied (%v)\n%s", c, rows, filter, err, out)
					}
				case strings.Contains(c, "config_dump"):
					// The default configuration has none: allotd's arrived.
					if !strings.Contains(out, `"experiments": [`) {
						t.Fatalf("%s shows no experiments:\n%s", c, out)
					}
				default:
					t.Fatalf("step 4 prints %q, which this test does not know", c)
				}
			}
			if len(d.steps) != 4 {
				t.Fatalf("the demo printed %d steps, this test ran 4: %+v", len(d.steps), d.steps)
			}
			d.stop()
		})
	}
}

// TestDemoRunHA runs `make run-ha`'s scripts/run-ha.sh and every command
// it prints, the failures included: after `kill -9` of replica 1 the demo
// keeps running, Envoy 1 keeps serving its assignment and shows on another
// replica; after `kill -9` of an etcd member a waited write still reaches
// both Envoys; SIGUSR1 brings both back.
func TestDemoRunHA(t *testing.T) {
	etcdClient := []int{harness.MustFreePort(t), harness.MustFreePort(t), harness.MustFreePort(t)}
	portList := func(n int) string {
		var p []string
		for range n {
			p = append(p, strconv.Itoa(harness.MustFreePort(t)))
		}
		return strings.Join(p, " ")
	}
	state := t.TempDir()
	d := startDemo(t, "scripts/run-ha.sh",
		"ENVOY_BIN="+harness.MustEnvoyBinary(t), "BIN="+demoBin(t, false, true), "STATE_DIR="+state,
		fmt.Sprintf("ETCD_CLIENT_PORTS=%d %d %d", etcdClient[0], etcdClient[1], etcdClient[2]),
		"ETCD_PEER_PORTS="+portList(3), "ALLOTD_ADMIN_PORTS="+portList(3), "ALLOTD_XDS_PORTS="+portList(3),
		"ENVOY_PORTS="+portList(2), "ENVOY_ADMIN_PORTS="+portList(2), "ECHO_PORT="+portList(1))
	const header = "x-experiment-checkout-button"

	// rollout runs a printed `allotctl rollout` until check accepts what it
	// shows.
	rollout := func(c string, timeout time.Duration, check func([]rolloutRow, map[string]int) error) {
		t.Helper()
		harness.MustEventually(t, timeout, func() error {
			out, err := d.try(c)
			if err != nil {
				return fmt.Errorf("%s: %v\n%s", c, err, out)
			}
			rows, revs, err := rolloutTable(out)
			if err == nil {
				err = check(rows, revs)
			}
			if err != nil {
				return fmt.Errorf("%s: %v\n%s", c, err, out)
			}
			return nil
		})
	}
	// on checks that the demo's Envoys applied their configuration, each
	// on a replica that replica accepts.
	on := func(rows []rolloutRow, replica func(node, r string) bool) error {
		if len(rows) != 2 {
			return fmt.Errorf("%d proxies, want demo-1 and demo-2", len(rows))
		}
		for _, r := range rows {
			if r.state != "applied" || !replica(r.node, r.replica) {
				return fmt.Errorf("%s %s on %q", r.node, r.state, r.replica)
			}
		}
		return nil
	}
	// pidOf reads a component's pid file, as the printed kill commands do.
	pidOf := func(name string) int {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(state, name+".pid"))
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s.pid: %q", name, b)
		}
		return pid
	}

	// The mesh: demo-1 on r1, demo-2 on r2.
	first := d.step(0, 1, "allotctl rollout")
	rollout(first.cmds[0], 10*time.Second, func(rows []rolloutRow, _ map[string]int) error {
		return on(rows, func(node, r string) bool { return r == "r"+strings.TrimPrefix(node, "demo-") })
	})

	// A waited write through r1, applied by both.
	d.runAll(d.step(1, 2, "--wait"), "rollout applied, applied by 2/2 proxies")
	serve := d.step(2, 2, "curl")
	for _, c := range serve.cmds {
		if v := echoHeader(t, d.run(c), header); v != "green" {
			t.Fatalf("%s: %s %q, want green", c, header, v)
		}
	}

	// Kill replica 1: the demo goes on.
	r1 := pidOf("allotd-1")
	kill := d.step(3, 1, "kill -9")
	d.run(kill.cmds[0])
	d.waitLog(fmt.Sprintf("allotd-1 (pid %d) exited; the rest keeps running", r1), 10*time.Second)
	d.alive("when replica 1 was killed")

	// Envoy 1 keeps serving, and moves to r2 or r3.
	moved := d.step(4, 2, "allotctl rollout")
	for _, c := range moved.cmds {
		if !strings.Contains(c, "allotctl rollout") {
			if v := echoHeader(t, d.run(c), header); v != "green" {
				t.Fatalf("%s right after replica 1 died: %s %q, want green", c, header, v)
			}
			continue
		}
		rollout(c, 30*time.Second, func(rows []rolloutRow, _ map[string]int) error {
			return on(rows, func(node, r string) bool {
				return map[string]bool{"demo-1": r == "r2" || r == "r3", "demo-2": r == "r2"}[node]
			})
		})
	}
	d.alive("after the failover")

	// Kill etcd member 1: writes go on, waited on both Envoys.
	m1 := pidOf("etcd-1")
	d.run(d.step(5, 1, "kill -9").cmds[0])
	d.waitLog(fmt.Sprintf("etcd-1 (pid %d) exited; the rest keeps running", m1), 10*time.Second)
	blue := d.step(6, 3, "--wait")
	for _, c := range blue.cmds {
		out := d.run(c)
		switch {
		case strings.Contains(c, "--wait"):
			if !strings.Contains(out, "rollout applied, applied by 2/2 proxies") {
				t.Fatalf("%s with an etcd member down:\n%s", c, out)
			}
		case strings.Contains(c, "curl"):
			if v := echoHeader(t, out, header); v != "blue" {
				t.Fatalf("%s: %s %q, want blue", c, header, v)
			}
		}
	}
	d.alive("when an etcd member was killed")

	// SIGUSR1 restarts both: r1 serves again, at the store's latest
	// revision (a dead r1 stays listed, at an older one, until its lease
	// expires), and m1 is healthy.
	restart := d.step(7, 2, "kill -USR1")
	d.run(restart.cmds[0])
	d.waitLog("restarted etcd-1", 10*time.Second)
	d.waitLog("restarted allotd-1", 10*time.Second)
	rollout(restart.cmds[1], 30*time.Second, func(_ []rolloutRow, revs map[string]int) error {
		if len(revs) != 3 || revs["r1"] == 0 || revs["r1"] != revs["r2"] || revs["r1"] != revs["r3"] {
			return fmt.Errorf("replicas at store revisions %v, want r1, r2, r3 at one revision", revs)
		}
		return nil
	})
	if r1again := pidOf("allotd-1"); r1again == r1 || syscall.Kill(r1again, 0) != nil {
		t.Fatalf("allotd-1.pid holds %d (killed: %d), want a running replica", r1again, r1)
	}
	harness.MustEventually(t, 20*time.Second, func() error {
		_, err := d.try(fmt.Sprintf("curl -fsS http://127.0.0.1:%d/health", etcdClient[0]))
		return err
	})

	if len(d.steps) != 8 {
		t.Fatalf("the demo printed %d steps, this test ran 8: %+v", len(d.steps), d.steps)
	}
	d.stop()
}

// TestDemoPortsChecked: a demo refuses, naming the variable or the port,
// ports it was given that are not ports, too few or too many of them, and
// a port in use — before it starts anything.
func TestDemoPortsChecked(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().(*net.TCPAddr).Port
	for _, tc := range []struct {
		script, env, want string
	}{
		{"scripts/run-ha.sh", "ETCD_CLIENT_PORTS=2379 22379", "ETCD_CLIENT_PORTS: want 3 port(s), got '2379 22379'"},
		{"scripts/run-ha.sh", "ENVOY_PORTS=10000 10001 10002", "ENVOY_PORTS: want 2 port(s)"},
		{"scripts/run-ha.sh", "ALLOTD_XDS_PORTS=18000 x 18002", "ALLOTD_XDS_PORTS: 'x' is not a port number"},
		{"scripts/run-demo.sh", "ECHO_PORT=65536", "ECHO_PORT: '65536' is not a port number"},
		{"scripts/run-demo.sh", "ALLOTD_ADMIN_PORTS=0", "ALLOTD_ADMIN_PORTS: '0' is not a port number"},
		{"scripts/run-demo.sh", fmt.Sprintf("ENVOY_PORTS=%d", busy), fmt.Sprintf("port 127.0.0.1:%d is already in use", busy)},
	} {
		t.Run(tc.script+" "+tc.env, func(t *testing.T) {
			root := repoPath(t, ".")
			cmd := exec.Command(filepath.Join(root, tc.script))
			// BIN holds a stand-in for the filter module, which run-demo.sh
			// looks for first.
			bin := t.TempDir()
			if err := os.WriteFile(filepath.Join(bin, "allot.wasm"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd.Env = append(os.Environ(), "STATE_DIR="+t.TempDir(), "BIN="+bin, tc.env)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), tc.want) {
				t.Fatalf("%s with %s: %v, want exit status 1 and %q:\n%s", tc.script, tc.env, err, tc.want, out)
			}
		})
	}
}
