package bolt_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/store/bolt"
	"github.com/allotmesh/allot/control-plane/store/bolt/bolttest"
	"github.com/allotmesh/allot/control-plane/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return bolttest.Open(t, filepath.Join(t.TempDir(), "allot.db"))
	})
}

func TestOpenCreatesParentDirectories(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b", "c", "allot.db")
	db := bolttest.Open(t, path)
	if db.Path() != path {
		t.Errorf("Path() = %q, want %q", db.Path(), path)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("store file: %v", err)
	}
}

func TestReopenPersists(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "allot.db")
	db, err := bolt.Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	a, err := db.Create(ctx, &store.Experiment{Key: "a", Owner: "o", Spec: json.RawMessage(`{"v":1}`)}, "alice")
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := db.Create(ctx, &store.Experiment{Key: "b", Owner: "o", Spec: json.RawMessage(`{}`)}, "alice"); err != nil {
		t.Fatalf("Create: %v", err)
	}
	a2, err := db.Update(ctx, &store.Experiment{Key: "a", Owner: "o", Spec: json.RawMessage(`{"v":2}`)}, a.Revision, "bob")
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if err := db.Delete(ctx, "b", 0, "carol"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantHistory, err := db.History(ctx, "")
	if err != nil {
		t.Fatalf("History: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	db = bolttest.Open(t, path)
	if rev, err := db.Revision(ctx); err != nil || rev != 4 {
		t.Fatalf("Revision after reopen = %d, %v; want 4", rev, err)
	}
	got, err := db.Get(ctx, "a")
	if err != nil {
		t.Fatalf("Get after reopen: %v", err)
	}
	if got.Revision != a2.Revision || got.CreateRevision != a.CreateRevision || string(got.Spec) != `{"v":2}` ||
		!got.UpdatedAt.Equal(a2.UpdatedAt) || got.UpdatedBy != "bob" || got.CreatedBy != "alice" {
		t.Errorf("Get after reopen = %+v, want %+v", got, a2)
	}
	if _, err := db.Get(ctx, "b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleted experiment after reopen: Get error %v, want ErrNotFound", err)
	}
	gotHistory, err := db.History(ctx, "")
	if err != nil {
		t.Fatalf("History after reopen: %v", err)
	}
	if len(gotHistory) != len(wantHistory) {
		t.Fatalf("History after reopen has %d changes, want %d", len(gotHistory), len(wantHistory))
	}
	for i := range wantHistory {
		g, w := gotHistory[i], wantHistory[i]
		if g.Revision != w.Revision || g.Key != w.Key || g.Op != w.Op || g.Actor != w.Actor ||
			!g.Time.Equal(w.Time) || !bytes.Equal(g.Before, w.Before) || !bytes.Equal(g.After, w.After) {
			t.Errorf("History[%d] after reopen = %+v, want %+v", i, g, w)
		}
	}

	// The revision continues from where it stopped, and Watch starts there.
	ch := db.Watch(ctx)
	if rev := <-ch; rev != 4 {
		t.Errorf("first Watch value after reopen = %d, want 4", rev)
	}
	c, err := db.Create(ctx, &store.Experiment{Key: "c", Spec: json.RawMessage(`{}`)}, "dave")
	if err != nil {
		t.Fatalf("Create after reopen: %v", err)
	}
	if c.Revision != 5 {
		t.Errorf("Create after reopen: Revision %d, want 5", c.Revision)
	}
}

func TestOpenLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "allot.db")
	bolttest.Open(t, path)

	tests := []struct {
		name    string
		opts    []bolt.Option
		timeout time.Duration
	}{
		{"default timeout", nil, bolt.DefaultLockTimeout},
		{"short timeout", []bolt.Option{bolt.WithLockTimeout(100 * time.Millisecond)}, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			db, err := bolt.Open(path, tt.opts...)
			elapsed := time.Since(start)
			if err == nil {
				_ = db.Close()
				t.Fatal("second Open of a locked file succeeded")
			}
			if !errors.Is(err, bolt.ErrLocked) {
				t.Errorf("error %v, want errors.Is(err, ErrLocked)", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the path %q", err, path)
			}
			if elapsed > tt.timeout+2*time.Second {
				t.Errorf("Open took %s, want about the lock timeout %s", elapsed, tt.timeout)
			}
			t.Logf("error after %s: %v", elapsed.Round(time.Millisecond), err)
		})
	}
}

// TestReadOnly: a read-only open reads everything, writes nothing (the
// file's bytes stay the same), shares the file with other readers, waits
// out a writer's lock (ErrLocked), and never creates a file.
func TestReadOnly(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "allot.db")
	w, err := bolt.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Create(ctx, &store.Experiment{Key: "a", Spec: json.RawMessage(`{}`)}, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := bolt.Open(path, bolt.WithReadOnly(), bolt.WithLockTimeout(100*time.Millisecond)); !errors.Is(err, bolt.ErrLocked) {
		t.Fatalf("read-only Open beside a writer: %v, want ErrLocked", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	r1 := bolttest.Open(t, path, bolt.WithReadOnly())
	r2 := bolttest.Open(t, path, bolt.WithReadOnly())
	for _, r := range []*bolt.DB{r1, r2} {
		if rev, err := r.Revision(ctx); err != nil || rev != 1 {
			t.Fatalf("Revision = %d, %v; want 1", rev, err)
		}
		if h, err := r.History(ctx, ""); err != nil || len(h) != 1 {
			t.Fatalf("History = %d changes, %v; want 1", len(h), err)
		}
	}
	if _, err := r1.Create(ctx, &store.Experiment{Key: "b", Spec: json.RawMessage(`{}`)}, "alice"); err == nil {
		t.Fatal("Create on a read-only store succeeded")
	}
	if _, err := bolt.Open(path, bolt.WithLockTimeout(100*time.Millisecond)); !errors.Is(err, bolt.ErrLocked) {
		t.Fatalf("writer Open beside a reader: %v, want ErrLocked", err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("a read-only store changed its file")
	}

	missing := filepath.Join(dir, "sub", "missing.db")
	if _, err := bolt.Open(missing, bolt.WithReadOnly()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read-only Open of a missing file: %v, want os.ErrNotExist", err)
	}
	if _, err := os.Stat(filepath.Dir(missing)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read-only Open created %s", filepath.Dir(missing))
	}
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := bolt.Open(empty, bolt.WithReadOnly()); err == nil {
		t.Error("read-only Open of an empty file succeeded")
	}
}

func TestClock(t *testing.T) {
	ctx := t.Context()
	zone := time.FixedZone("UTC+2", 2*60*60)
	now := time.Date(2026, 3, 1, 12, 0, 0, 123456789, zone)
	db := bolttest.Open(t, filepath.Join(t.TempDir(), "allot.db"), bolt.WithClock(func() time.Time { return now }))

	created, err := db.Create(ctx, &store.Experiment{Key: "a", Spec: json.RawMessage(`{}`)}, "alice")
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	now = now.Add(time.Hour)
	updated, err := db.Update(ctx, &store.Experiment{Key: "a", Spec: json.RawMessage(`{}`)}, 0, "bob")
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	got, err := db.Get(ctx, "a")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	wantCreated := time.Date(2026, 3, 1, 10, 0, 0, 123456789, time.UTC)
	wantUpdated := wantCreated.Add(time.Hour)
	for _, e := range []*store.Experiment{updated, got} {
		if e.CreatedAt != wantCreated || e.UpdatedAt != wantUpdated {
			t.Errorf("CreatedAt %v UpdatedAt %v, want %v and %v (UTC)", e.CreatedAt, e.UpdatedAt, wantCreated, wantUpdated)
		}
	}
	if created.CreatedAt != wantCreated {
		t.Errorf("Create: CreatedAt %v, want %v", created.CreatedAt, wantCreated)
	}
	h, err := db.History(ctx, "a")
	if err != nil {
		t.Fatalf("History: %v", err)
	}
	if !h[0].Time.Equal(wantCreated) || !h[1].Time.Equal(wantUpdated) {
		t.Errorf("History times %v, %v; want %v, %v", h[0].Time, h[1].Time, wantCreated, wantUpdated)
	}
}

// TestSpecBytesPreserved checks that a compact Spec comes back byte for byte,
// including characters that encoding/json would HTML-escape by default.
func TestSpecBytesPreserved(t *testing.T) {
	ctx := t.Context()
	db := bolttest.Open(t, filepath.Join(t.TempDir(), "allot.db"))
	spec := `{"cond":"a<b && c>d","name":"日本","n":1.50}`
	if _, err := db.Create(ctx, &store.Experiment{Key: "a", Spec: json.RawMessage(" " + spec + "\n")}, "alice"); err != nil {
		t.Fatalf("Create: %v", err)
	}
	got, err := db.Get(ctx, "a")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if string(got.Spec) != spec {
		t.Errorf("Spec = %s, want %s", got.Spec, spec)
	}
}

func TestOpenRejectsForeignFiles(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(tx *bbolt.Tx) error
		want    string
	}{
		{
			name: "newer schema",
			prepare: func(tx *bbolt.Tx) error {
				b, err := tx.CreateBucket([]byte("meta"))
				if err != nil {
					return err
				}
				if err := b.Put([]byte("revision"), binary.BigEndian.AppendUint64(nil, 0)); err != nil {
					return err
				}
				return b.Put([]byte("schema_version"), binary.BigEndian.AppendUint64(nil, 99))
			},
			want: "schema version 99",
		},
		{
			name: "other application",
			prepare: func(tx *bbolt.Tx) error {
				_, err := tx.CreateBucket([]byte("widgets"))
				return err
			},
			want: "not an allot store",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "allot.db")
			raw, err := bbolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatalf("bbolt.Open: %v", err)
			}
			if err := raw.Update(tt.prepare); err != nil {
				t.Fatalf("prepare: %v", err)
			}
			if err := raw.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			db, err := bolt.Open(path)
			if err == nil {
				_ = db.Close()
				t.Fatal("Open succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %q, want it to mention %q and the path", err, tt.want)
			}
		})
	}
}

// Crash durability. The test binary re-executes itself running
// TestCrashWriterProcess, which writes into the store and acknowledges each
// write on stdout after Create returns; the parent SIGKILLs it mid-stream and
// checks that every acknowledged write survived.
const (
	crashEnv      = "ALLOT_BOLT_CRASHWRITER_DB"
	crashWrites   = 1000
	crashKillAt   = 300
	crashAckLabel = "ack "
)

// TestCrashWriterProcess is the child side of TestCrashDurability; it does
// nothing unless started by it.
func TestCrashWriterProcess(t *testing.T) {
	path := os.Getenv(crashEnv)
	if path == "" {
		t.Skip("helper process for TestCrashDurability")
	}
	db, err := bolt.Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	for i := range crashWrites {
		key := fmt.Sprintf("exp-%04d", i)
		spec := fmt.Sprintf(`{"i":%d,"pad":%q}`, i, strings.Repeat("x", i%200))
		if _, err := db.Create(t.Context(), &store.Experiment{Key: key, Owner: "crash", Spec: json.RawMessage(spec)}, "crashwriter"); err != nil {
			t.Fatalf("Create(%s): %v", key, err)
		}
		if _, err := fmt.Fprintln(os.Stdout, crashAckLabel+key); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestCrashDurability(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a writer process")
	}
	path := filepath.Join(t.TempDir(), "allot.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashWriterProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("stdout pipe: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start writer: %v", err)
	}
	// Whatever happens, do not leave the child behind or hang on its output.
	watchdog := time.AfterFunc(2*time.Minute, func() { _ = cmd.Process.Kill() })
	defer watchdog.Stop()

	var (
		acked  []string
		killed bool
		other  []string
	)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		key, ok := strings.CutPrefix(line, crashAckLabel)
		if !ok {
			other = append(other, line)
			continue
		}
		acked = append(acked, key)
		if len(acked) == crashKillAt && !killed {
			if err := cmd.Process.Kill(); err != nil {
				t.Fatalf("kill writer: %v", err)
			}
			killed = true
		}
	}
	// Lines already in the pipe when the kill landed were acknowledged too;
	// the scan above read them to EOF.
	waitErr := cmd.Wait()
	if !killed {
		t.Fatalf("writer ended after %d acknowledgements without being killed: %v\nstdout: %s\nstderr: %s",
			len(acked), waitErr, strings.Join(other, "\n"), stderr.String())
	}
	t.Logf("killed writer after %d acknowledged writes (%v)", len(acked), waitErr)

	// The file must be consistent at the bbolt level...
	raw, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatalf("bbolt.Open after crash: %v", err)
	}
	err = raw.View(func(tx *bbolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
	if cerr := raw.Close(); cerr != nil {
		t.Fatalf("close after check: %v", cerr)
	}
	if err != nil {
		t.Fatalf("bbolt consistency check after crash: %v", err)
	}

	// ...and at the store level: every acknowledged write is there, and the
	// revision, experiments and history agree.
	db := bolttest.Open(t, path)
	ctx := t.Context()
	for _, key := range acked {
		if _, err := db.Get(ctx, key); err != nil {
			t.Errorf("acknowledged write lost: Get(%s): %v", key, err)
		}
	}
	list, rev, err := db.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	h, err := db.History(ctx, "")
	if err != nil {
		t.Fatalf("History: %v", err)
	}
	if rev < int64(len(acked)) || int64(len(list)) != rev || int64(len(h)) != rev {
		t.Errorf("after crash: revision %d, %d experiments, %d changes, %d acknowledged; want revision = experiments = changes >= acknowledged",
			rev, len(list), len(h), len(acked))
	}
	t.Logf("after reopen: revision %d, %d acknowledged", rev, len(acked))
}
