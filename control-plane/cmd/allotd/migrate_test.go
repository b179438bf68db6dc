package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/store/bolt"
	"github.com/allotmesh/allot/control-plane/store/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
	"github.com/allotmesh/allot/control-plane/store/storetest"
)

// runMain runs allotd with args and returns its stdout, stderr and error.
func runMain(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = Main(t.Context(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// TestMigrateFlags: allotd migrate refuses a command line it cannot act
// on, before touching the file or the cluster, and -h prints its usage.
func TestMigrateFlags(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "sub", "missing.db")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"nothing", nil, "-db is required"},
		{"no -store", []string{"-db", "allot.db"}, "-store is required"},
		{"no -db", []string{"-store", "etcd://127.0.0.1:2379"}, "-db is required"},
		{"-store not etcd", []string{"-db", "allot.db", "-store", "http://127.0.0.1:2379"}, "want etcd://host:port"},
		{"-store without port", []string{"-db", "allot.db", "-store", "etcd://127.0.0.1"}, `endpoint "127.0.0.1"`},
		{"arguments", []string{"-db", "allot.db", "-store", "etcd://127.0.0.1:2379", "now"}, "unexpected arguments: [now]"},
		{"cert without key", []string{"-db", "allot.db", "-store", "etcd://127.0.0.1:2379", "-etcd-cert", "c.pem"}, "-etcd-cert and -etcd-key go together"},
		{"replica flag", []string{"-db", "allot.db", "-store", "etcd://127.0.0.1:2379", "-replica-id", "a"}, "flag provided but not defined: -replica-id"},
		{"missing file", []string{"-db", missing, "-store", "etcd://127.0.0.1:1"}, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, _, err := runMain(t, append([]string{"migrate"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("allotd migrate %s: %v, want an error saying %q", strings.Join(tt.args, " "), err, tt.want)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
		})
	}
	if _, err := os.Stat(filepath.Dir(missing)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("allotd migrate created %s", filepath.Dir(missing))
	}

	_, stderr, err := runMain(t, "migrate", "-h")
	if err != nil || !strings.Contains(stderr, "Usage: allotd migrate -db") || !strings.Contains(stderr, "-etcd-prefix") {
		t.Errorf("allotd migrate -h: %v, usage %q", err, stderr)
	}
	_, stderr, err = runMain(t, "-h")
	if err != nil || !strings.Contains(stderr, "allotd migrate [flags]") {
		t.Errorf("allotd -h: %v, usage %q does not name allotd migrate", err, stderr)
	}
}

// TestMigrateLocked: a bbolt file an allotd holds is not copied, and the
// error says why.
func TestMigrateLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "allot.db")
	running, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer running.Close()
	_, _, err = runMain(t, "migrate", "-db", path, "-store", "etcd://127.0.0.1:1")
	if !errors.Is(err, bolt.ErrLocked) || !strings.Contains(err.Error(), "is allotd still running on it?") {
		t.Fatalf("migrate of a locked file: %v, want bolt.ErrLocked and a word on the running allotd", err)
	}
}

// TestMigrate runs allotd migrate from a real bbolt file into a real etcd
// member: it prints the summary, leaves the file's bytes as they were,
// refuses a second run into the same prefix naming what it found, and the
// prefix then opens as an ordinary store at the file's revision.
func TestMigrate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "allot.db")
	w, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	history := storetest.Fill(t, w, 40, "gone", "checkout.button", "search_ranking-v2")
	list, _, err := w.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c := etcdtest.Start(t, 1)
	endpoint := strings.TrimPrefix(c.Endpoints()[0], "http://")
	args := []string{"migrate", "-db", path, "-store", "etcd://" + endpoint, "-etcd-prefix", "/migrated/", "-store-timeout", "3s"}

	stdout, stderr, err := runMain(t, args...)
	if err != nil {
		t.Fatalf("allotd migrate: %v (stderr %q)", err, stderr)
	}
	want := fmt.Sprintf("migrated %d experiments, %d changes of 3 keys, revision %d from %s to etcd %s prefix /migrated/\n",
		len(list), len(history), len(history), path, c.Endpoints()[0])
	if stdout != want {
		t.Errorf("stdout %q\nwant   %q", stdout, want)
	}
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(before, after) {
		t.Errorf("allotd migrate changed the bbolt file (%v)", err)
	}

	_, _, err = runMain(t, args...)
	for _, w := range []string{"not empty", fmt.Sprintf("revision %d", len(history)), "etcdctl del --prefix /migrated/"} {
		if !errors.Is(err, etcd.ErrNotEmpty) || !strings.Contains(err.Error(), w) {
			t.Errorf("second allotd migrate: %v, want etcd.ErrNotEmpty saying %q", err, w)
		}
	}

	s, err := etcd.Open(context.Background(), clientv3.Config{Endpoints: c.Endpoints()}, etcd.WithPrefix("/migrated/"))
	if err != nil {
		t.Fatalf("open the migrated prefix as allotd does: %v", err)
	}
	defer s.Close()
	if rev, err := s.Revision(t.Context()); err != nil || rev != int64(len(history)) {
		t.Errorf("migrated revision %d (%v), want %d", rev, err, len(history))
	}
}
