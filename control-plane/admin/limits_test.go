package admin_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/store/bolt/bolttest"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/filter/config"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
	filterv1 "github.com/allotmesh/allot/proto/allot/filter/v1"
)

// TestValidateBounds: every field of a document is accepted at its bound
// and refused one past it, with an error naming the field.
func TestValidateBounds(t *testing.T) {
	rep := func(n int) string { return strings.Repeat("x", n) }
	names := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("svc-%d", i)
		}
		return out
	}
	values := func(n int) []*structpb.Value {
		out := make([]*structpb.Value, n)
		for i := range out {
			out[i] = structpb.NewStringValue(fmt.Sprintf("v%d", i))
		}
		return out
	}
	tests := []struct {
		name string
		set  func(e *experimentv1.Experiment, past int)
		want string
	}{
		{"description", func(e *experimentv1.Experiment, p int) { e.Description = rep(experiment.MaxDescriptionBytes + p) },
			"description: 4097 bytes, limit 4096"},
		{"owner", func(e *experimentv1.Experiment, p int) { e.Owner = rep(experiment.MaxOwnerBytes + p) }, "owner: 129 bytes, limit 128"},
		{"services", func(e *experimentv1.Experiment, p int) { e.Services = names(experiment.MaxServices + p) }, "services: 65 services, limit 64"},
		{"a service name", func(e *experimentv1.Experiment, p int) {
			e.Services = []string{"a", rep(experiment.MaxServiceNameBytes + p)}
		},
			"services[1]: 129 bytes, limit 128"},
		{"variations", func(e *experimentv1.Experiment, p int) { e.Variations = values(experiment.MaxVariations + p) },
			"variations: 65 variations, limit 64"},
		{"a variation's header value", func(e *experimentv1.Experiment, p int) {
			e.Variations[1] = structpb.NewStringValue(rep(experiment.MaxVariationValueBytes + p))
		}, "variations[1]: 4097 bytes as a header value, limit 4096"},
		{"hashAttribute", func(e *experimentv1.Experiment, p int) { e.HashAttribute = rep(experiment.MaxAttributeNameBytes + p) },
			"hashAttribute: 129 bytes, limit 128"},
		{"fallbackAttribute", func(e *experimentv1.Experiment, p int) {
			e.FallbackAttribute = rep(experiment.MaxAttributeNameBytes + p)
		},
			"fallbackAttribute: 129 bytes, limit 128"},
		{"seed", func(e *experimentv1.Experiment, p int) { e.Seed = rep(experiment.MaxSeedBytes + p) }, "seed: 257 bytes, limit 256"},
		{"the document", func(e *experimentv1.Experiment, p int) { *e = *largest(t, p) },
			fmt.Sprintf("experiment: %d bytes as compact JSON (with the longest status), limit %d", experiment.MaxDocumentBytes+1, experiment.MaxDocumentBytes)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at := exp("k", "team-a", 0)
			tt.set(at, 0)
			if err := translate.Validate(at, translate.Mesh{}); err != nil {
				t.Errorf("at the bound: %v", err)
			}
			past := exp("k", "team-a", 0)
			tt.set(past, 1)
			err := translate.Validate(past, translate.Mesh{})
			if got := admin.ErrorOf(err); err == nil || got.Code != admin.CodeInvalid || !slices.Contains(got.Details, tt.want) {
				t.Errorf("one past the bound: %v, want invalid with %q", err, tt.want)
			}
		})
	}
}

// largest is the largest document Validate accepts, plus past bytes: an
// experiment of team-a for service checkout, in draft, whose condition
// fills it.
func largest(t *testing.T, past int) *experimentv1.Experiment {
	t.Helper()
	build := func(pad int) *experimentv1.Experiment {
		e := exp("big", "team-a", 0)
		e.Status = experiment.StatusDraft
		e.Services = []string{"checkout"}
		e.Description = "d1"
		cond, err := structpb.NewStruct(map[string]any{"id": map[string]any{"$in": []any{strings.Repeat("u", pad)}}})
		if err != nil {
			t.Fatal(err)
		}
		e.Condition = cond
		return e
	}
	base, err := experiment.DocumentBytes(build(0))
	if err != nil {
		t.Fatal(err)
	}
	e := build(experiment.MaxDocumentBytes - base + past)
	if n, _ := experiment.DocumentBytes(e); n != experiment.MaxDocumentBytes+past {
		t.Fatalf("largest document is %d bytes, want %d", n, experiment.MaxDocumentBytes+past)
	}
	return e
}

// TestLargestDocumentLifecycle: the largest document the API accepts goes
// through its whole life — create, update, start, pause, stop, delete — on
// a real etcd with its default request limit (and on bbolt), and one byte
// more is refused as invalid input naming the field on both transports,
// never answered as an internal error.
func TestLargestDocumentLifecycle(t *testing.T) {
	stores := []struct {
		name string
		open func(t *testing.T) store.Store
	}{
		{"etcd", func(t *testing.T) store.Store { return etcdtest.Start(t, 1).Open(t) }},
		{"bolt", func(t *testing.T) store.Store {
			db := bolttest.Open(t, filepath.Join(t.TempDir(), "allot.db"))
			return db
		}},
	}
	tooBig := fmt.Sprintf("experiment: %d bytes as compact JSON (with the longest status), limit %d", experiment.MaxDocumentBytes+1, experiment.MaxDocumentBytes)
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			e := newEnv(t, st.open(t))
			body := func(x *experimentv1.Experiment) string {
				b, err := protojson.Marshal(x)
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}
			var cur experimentv1.Experiment
			read := func() {
				t.Helper()
				_, b := e.do(readerToken, "GET", "/v1/experiments/big", "")
				if err := protojson.Unmarshal(b, &cur); err != nil {
					t.Fatalf("get big: %v: %s", err, b)
				}
			}
			refused := func(method, path, body string) {
				t.Helper()
				var ae apiError
				e.mustDo(http.StatusBadRequest, aliceToken, method, path, body, &ae)
				if ae.Error.Code != string(admin.CodeInvalid) || !slices.Contains(ae.Error.Details, tooBig) {
					t.Errorf("%s %s one byte over: %+v, want invalid_argument with %q", method, path, ae.Error, tooBig)
				}
			}

			refused("POST", "/v1/experiments", body(largest(t, 1)))
			_, err := e.client.CreateExperiment(ctx(aliceToken), &adminv1.CreateExperimentRequest{Experiment: largest(t, 1)})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tooBig) {
				t.Errorf("gRPC create one byte over: %v, want InvalidArgument naming the document", err)
			}

			e.mustDo(http.StatusCreated, aliceToken, "POST", "/v1/experiments", body(largest(t, 0)), nil)
			read()
			up := largest(t, 0)
			up.Description, up.Revision = "d2", cur.Revision
			e.mustDo(http.StatusOK, aliceToken, "PUT", "/v1/experiments/big", body(up), nil)
			read()
			over := largest(t, 1)
			over.Revision = cur.Revision
			refused("PUT", "/v1/experiments/big", body(over))
			for _, step := range []struct{ op, want string }{
				{"start", experiment.StatusRunning}, {"pause", experiment.StatusPaused}, {"stop", experiment.StatusStopped},
			} {
				e.mustDo(http.StatusOK, aliceToken, "POST", "/v1/experiments/big:"+step.op, "", nil)
				read()
				if cur.Status != step.want || cur.Description != "d2" {
					t.Fatalf("after %s: status %q, description %q; want %q, d2", step.op, cur.Status, cur.Description, step.want)
				}
				if n, _ := experiment.DocumentBytes(&cur); n != experiment.MaxDocumentBytes {
					t.Fatalf("after %s: %d bytes, want %d", step.op, n, experiment.MaxDocumentBytes)
				}
			}
			e.mustDo(http.StatusNoContent, aliceToken, "DELETE", "/v1/experiments/big?revision="+fmt.Sprint(cur.Revision), "", nil)
			if code, b := e.do(readerToken, "GET", "/v1/experiments/big", ""); code != http.StatusNotFound {
				t.Errorf("after delete: %d %s, want 404", code, b)
			}
		})
	}
}

// TestServiceHeaderBudget: the headers one request of a service can
// receive from all running experiments are bounded; the experiment that
// would pass the bound is refused naming the field and the service, the
// same experiments on different services are accepted, and a start checks
// it as a create does.
func TestServiceHeaderBudget(t *testing.T) {
	root := &admin.Principal{Name: "root", Role: admin.RoleAdmin}
	big := func(key, status string, services ...string) *experimentv1.Experiment {
		e := exp(key, "team-a", 0)
		e.Variations[1] = structpb.NewStringValue(strings.Repeat("t", experiment.MaxVariationValueBytes))
		e.Services, e.Status = services, status
		return e
	}
	newService := func(t *testing.T) *admin.Service {
		db := bolttest.Open(t, filepath.Join(t.TempDir(), "allot.db"))
		return admin.NewService(db, nil, admin.WithMesh(translate.Mesh{WasmPath: "/allot.wasm"}))
	}
	refused := func(t *testing.T, err error, want string) {
		t.Helper()
		got := admin.ErrorOf(err)
		if err == nil || got.Code != admin.CodeInvalid || !slices.ContainsFunc(got.Details, func(d string) bool { return strings.HasPrefix(d, want) }) {
			t.Fatalf("write: %v, want invalid with a detail starting %q", err, want)
		}
		if !strings.Contains(strings.Join(got.Details, "; "), fmt.Sprintf("over the limit of %d", admin.MaxServiceHeaderBytes)) {
			t.Errorf("details %q do not say by how much the limit is passed", got.Details)
		}
	}
	ctx := context.Background()

	t.Run("two on one service", func(t *testing.T) {
		s := newService(t)
		if _, err := s.Create(ctx, root, big("one", "", "checkout")); err != nil {
			t.Fatal(err)
		}
		_, err := s.Create(ctx, root, big("two", "", "search", "checkout"))
		refused(t, err, `services[1]: service "checkout": a request could receive`)
		// For every service: checkout is named by one and would get both.
		_, err = s.Create(ctx, root, big("two", ""))
		refused(t, err, `services: service "checkout": a request could receive`)
		// A draft may wait; starting it is refused the same way.
		d, err := s.Create(ctx, root, big("two", experiment.StatusDraft, "checkout"))
		if err != nil {
			t.Fatalf("a draft does not run: %v", err)
		}
		_, err = s.Start(ctx, root, "two", d.Revision)
		refused(t, err, `services[0]: service "checkout": a request could receive`)
		d.Status = experiment.StatusRunning
		_, err = s.Update(ctx, root, d)
		refused(t, err, `services[0]: service "checkout": a request could receive`)
	})
	t.Run("two for every service", func(t *testing.T) {
		s := newService(t)
		if _, err := s.Create(ctx, root, big("one", "")); err != nil {
			t.Fatal(err)
		}
		_, err := s.Create(ctx, root, big("two", ""))
		refused(t, err, `services: every service no experiment names: a request could receive`)
	})
	t.Run("the same on different services", func(t *testing.T) {
		s := newService(t)
		if _, err := s.Create(ctx, root, big("one", "", "checkout")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Create(ctx, root, big("two", "", "search")); err != nil {
			t.Errorf("the same experiment on another service: %v", err)
		}
		// Stopping one makes room on its service.
		if _, err := s.Stop(ctx, root, "one", 0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Create(ctx, root, big("three", "", "checkout")); err != nil {
			t.Errorf("after checkout's experiment stopped: %v", err)
		}
	})
}

// TestExperimentsPerService: a service runs at most
// MaxExperimentsPerService experiments (in the dictionary-only header mode,
// where 1,000 short ones fit the header budget); a draft, or the same
// experiment on another service, is not refused.
func TestExperimentsPerService(t *testing.T) {
	db := bolttest.Open(t, filepath.Join(t.TempDir(), "allot.db"))
	ctx := context.Background()
	seedService(t, db, "checkout", admin.MaxExperimentsPerService)
	s := admin.NewService(db, nil, admin.WithMesh(dictionaryMesh))
	root := &admin.Principal{Name: "root", Role: admin.RoleAdmin}
	one := func(key, status string, services ...string) *experimentv1.Experiment {
		e := exp(key, "team-a", 0)
		e.Status, e.Services = status, services
		return e
	}
	_, err := s.Create(ctx, root, one("more", "", "search", "checkout"))
	want := fmt.Sprintf(`services[1]: service "checkout": %d running experiments, limit %d`, admin.MaxExperimentsPerService+1, admin.MaxExperimentsPerService)
	if got := admin.ErrorOf(err); err == nil || !slices.Equal(got.Details, []string{want}) {
		t.Fatalf("one experiment too many: %v, want only %q", err, want)
	}
	if _, err := s.Create(ctx, root, one("more", experiment.StatusDraft, "checkout")); err != nil {
		t.Errorf("a draft does not run: %v", err)
	}
	if _, err := s.Create(ctx, root, one("other", "", "search")); err != nil {
		t.Errorf("another service: %v", err)
	}
}

// dictionaryMesh sends the assignments in one dictionary header, so that a
// service's header budget holds more experiments than its count bound.
var dictionaryMesh = translate.Mesh{WasmPath: "/allot.wasm",
	Filter: &filterv1.FilterConfig{AssignmentHeaders: filterv1.AssignmentHeaders_ASSIGNMENT_HEADERS_DICTIONARY}}

// seedService stores n running experiments of service straight into db,
// as another writer would, past the admin API.
func seedService(t *testing.T, db store.Store, service string, n int) {
	t.Helper()
	for i := range n {
		e := exp(fmt.Sprintf("e%d", i), "team-a", 0)
		e.Services = []string{service}
		e.Variations = []*structpb.Value{structpb.NewStringValue("a"), structpb.NewStringValue("b")}
		spec, err := protojson.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Create(context.Background(), &store.Experiment{Key: e.Key, Owner: e.Owner, Spec: spec}, "seed"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestExperimentsPerServiceStaleList: a write checks its services against
// the experiments as the builder last read them (WithLists), and when the
// store moved on since (another replica's writes), against the store: the
// bound holds either way, and a write under it is not refused.
func TestExperimentsPerServiceStaleList(t *testing.T) {
	db := bolttest.Open(t, filepath.Join(t.TempDir(), "allot.db"))
	ctx := context.Background()
	lists := store.NewLists(db)
	if _, _, err := lists.List(ctx, 0); err != nil { // read while the store is empty
		t.Fatal(err)
	}
	seedService(t, db, "checkout", admin.MaxExperimentsPerService) // by another replica: the shared list is stale
	s := admin.NewService(db, nil, admin.WithMesh(dictionaryMesh), admin.WithLists(lists))
	root := &admin.Principal{Name: "root", Role: admin.RoleAdmin}
	one := exp("more", "team-a", 0)
	one.Services = []string{"checkout"}
	_, err := s.Create(ctx, root, one)
	want := fmt.Sprintf(`services[0]: service "checkout": %d running experiments, limit %d`, admin.MaxExperimentsPerService+1, admin.MaxExperimentsPerService)
	if got := admin.ErrorOf(err); err == nil || !slices.Equal(got.Details, []string{want}) {
		t.Fatalf("one experiment too many, the shared list empty: %v, want only %q", err, want)
	}
	other := exp("other", "team-a", 0)
	other.Services = []string{"search"}
	if _, err := s.Create(ctx, root, other); err != nil {
		t.Fatalf("another service, the shared list stale: %v", err)
	}
	// The shared list read now, then e0 updated by another replica: an
	// update of e0 at its new revision is not a conflict; and a create is
	// not refused for an experiment another replica deleted since.
	if _, _, err := lists.List(ctx, lastRevision(t, db)); err != nil {
		t.Fatal(err)
	}
	cur, err := db.Get(ctx, "e0")
	if err != nil {
		t.Fatal(err)
	}
	moved, err := db.Update(ctx, &store.Experiment{Key: "e0", Owner: cur.Owner, Spec: cur.Spec}, cur.Revision, "other-replica")
	if err != nil {
		t.Fatal(err)
	}
	again := exp("e0", "team-a", moved.Revision)
	again.Services = []string{"checkout"}
	again.Variations = []*structpb.Value{structpb.NewStringValue("a"), structpb.NewStringValue("b")}
	if _, err := s.Update(ctx, root, again); err != nil {
		t.Fatalf("an update at the revision another replica wrote, the shared list older: %v", err)
	}
	if _, _, err := lists.List(ctx, lastRevision(t, db)); err != nil {
		t.Fatal(err)
	}
	cur, err = db.Get(ctx, "e2")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Delete(ctx, "e2", cur.Revision, "other-replica"); err != nil {
		t.Fatal(err)
	}
	again = exp("more", "team-a", 0)
	again.Services = []string{"checkout"}
	if _, err := s.Create(ctx, root, again); err != nil {
		t.Fatalf("a create under the bound since another replica deleted one, the shared list older: %v", err)
	}
}

// lastRevision is db's revision now.
func lastRevision(t *testing.T, db store.Store) int64 {
	t.Helper()
	rev, err := db.Revision(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// TestServiceHeaderBudgetConcurrentWrite: another experiment written to the
// same service between the service's read of the store and its write
// cannot take the service past its bound: the write, based on the
// revision it checked, is checked again and refused.
func TestServiceHeaderBudgetConcurrentWrite(t *testing.T) {
	db := bolttest.Open(t, filepath.Join(t.TempDir(), "allot.db"))
	st := &interleavingStore{Store: db}
	s := admin.NewService(st, nil, admin.WithMesh(translate.Mesh{WasmPath: "/allot.wasm"}))
	root := &admin.Principal{Name: "root", Role: admin.RoleAdmin}
	big := func(key string) *experimentv1.Experiment {
		e := exp(key, "team-a", 0)
		e.Variations[1] = structpb.NewStringValue(strings.Repeat("t", experiment.MaxVariationValueBytes))
		e.Services = []string{"checkout"}
		return e
	}
	ctx := context.Background()
	st.hook = func() {
		spec, err := protojson.Marshal(big("one"))
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := db.Create(ctx, &store.Experiment{Key: "one", Owner: "team-a", Spec: spec}, "other-replica"); err != nil {
			t.Errorf("the concurrent create: %v", err)
		}
	}
	_, err := s.Create(ctx, root, big("two"))
	if got := admin.ErrorOf(err); err == nil || got.Code != admin.CodeInvalid ||
		!slices.ContainsFunc(got.Details, func(d string) bool {
			return strings.HasPrefix(d, `services[0]: service "checkout": a request could receive`)
		}) {
		t.Fatalf("create racing another create on checkout: %v, want invalid naming checkout", err)
	}
	if _, err := s.Get(ctx, root, "two"); codeOf(err) != admin.CodeNotFound {
		t.Errorf("two was stored: %v", err)
	}
}

// TestObservedPerService: at most config.MaxObserved running experiments
// of one service observe their outcomes (the filter refuses a
// configuration with more); the write of one more is refused naming
// observe, while an experiment that does not observe, or one on another
// service, is not.
func TestObservedPerService(t *testing.T) {
	db := bolttest.Open(t, filepath.Join(t.TempDir(), "allot.db"))
	ctx := context.Background()
	s := admin.NewService(db, nil, admin.WithMesh(translate.Mesh{WasmPath: "/allot.wasm"}))
	root := &admin.Principal{Name: "root", Role: admin.RoleAdmin}
	one := func(key string, observe bool, services ...string) *experimentv1.Experiment {
		e := exp(key, "team-a", 0)
		e.Services, e.Observe = services, observe
		return e
	}
	for i := range config.MaxObserved {
		if _, err := s.Create(ctx, root, one(fmt.Sprintf("e%d", i), true, "checkout")); err != nil {
			t.Fatal(err)
		}
	}
	_, err := s.Create(ctx, root, one("more", true, "search", "checkout"))
	want := fmt.Sprintf(`observe: service "checkout": %d running experiments observe their outcomes, limit %d`, config.MaxObserved+1, config.MaxObserved)
	if got := admin.ErrorOf(err); err == nil || !slices.Equal(got.Details, []string{want}) {
		t.Fatalf("one observed experiment too many: %v, want only %q", err, want)
	}
	if _, err := s.Create(ctx, root, one("more", false, "checkout")); err != nil {
		t.Errorf("an experiment that does not observe: %v", err)
	}
	if _, err := s.Create(ctx, root, one("other", true, "search")); err != nil {
		t.Errorf("another service: %v", err)
	}
}
