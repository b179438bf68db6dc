package admin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/store/bolt"
	"github.com/allotmesh/allot/control-plane/translate"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
	"github.com/allotmesh/allot/proto/allot/admin/v1/adminv1grpc"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// Tokens of the test deployment: one per role.
const (
	adminToken  = "admin-token-0123456789"
	aliceToken  = "alice-token-0123456789" // owner of team-a
	bobToken    = "bob-token-0123456789"   // owner of team-b
	readerToken = "reader-token-0123456789"
)

const tokensJSON = `{"tokens": [
  {"name": "root", "role": "admin", "token": "admin-token-0123456789"},
  {"name": "alice", "role": "owner", "namespaces": ["team-a"], "token": "alice-token-0123456789"},
  {"name": "bob", "role": "owner", "namespaces": ["team-b"], "token": "bob-token-0123456789"},
  {"name": "dashboard", "role": "reader", "token": "reader-token-0123456789"}
]}`

// syncBuffer is a bytes.Buffer safe for the server's and the test's
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// env is one admin API over a real bbolt store, served over real HTTP and
// real gRPC on loopback.
type env struct {
	t       *testing.T
	url     string
	client  adminv1grpc.AdminServiceClient
	logs    *syncBuffer
	reg     *prometheus.Registry
	store   store.Store
	now     time.Time
	httpSrv *httptest.Server
}

// newEnv starts the admin API over st (nil: a fresh bbolt store), with
// extra service options.
func newEnv(t *testing.T, st store.Store, opts ...admin.ServiceOption) *env {
	t.Helper()
	if st == nil {
		db, err := bolt.Open(filepath.Join(t.TempDir(), "allot.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		st = db
	}
	tokens, err := admin.ParseTokens([]byte(tokensJSON))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, logs: &syncBuffer{}, reg: prometheus.NewRegistry(), store: st, now: time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)}
	log := slog.New(slog.NewJSONHandler(e.logs, nil))
	metrics, err := admin.NewMetrics(e.reg, st)
	if err != nil {
		t.Fatal(err)
	}
	svc := admin.NewService(st, log, append([]admin.ServiceOption{
		admin.WithClock(func() time.Time { return e.now }), admin.WithMesh(translate.Mesh{WasmPath: "/allot.wasm"}),
	}, opts...)...)

	e.httpSrv = httptest.NewServer(admin.NewHTTP(svc, tokens, admin.WithLogger(log), admin.WithMetrics(metrics)))
	t.Cleanup(e.httpSrv.Close)
	e.url = e.httpSrv.URL

	g := admin.NewGRPC(svc, tokens, admin.WithLogger(log), admin.WithMetrics(metrics))
	gs := grpc.NewServer(g.ServerOptions()...)
	g.Register(gs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	e.client = adminv1grpc.NewAdminServiceClient(conn)
	return e
}

// ctx returns a context carrying token as gRPC bearer metadata ("" none).
func ctx(token string) context.Context {
	c := context.Background()
	if token == "" {
		return c
	}
	return metadata.AppendToOutgoingContext(c, "authorization", "Bearer "+token)
}

// do sends one HTTP request and returns the status and body.
func (e *env) do(token, method, path, body string) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// mustDo is do that fails unless the status is want; it decodes the body
// into out when out is non-nil.
func (e *env) mustDo(want int, token, method, path, body string, out any) {
	e.t.Helper()
	got, b := e.do(token, method, path, body)
	if got != want {
		e.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, got, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
}

// apiError is the HTTP error body.
type apiError struct {
	Error struct {
		Code    string   `json:"code"`
		Message string   `json:"message"`
		Details []string `json:"details"`
	} `json:"error"`
}

// seed creates the experiments the error cases refer to: exp-a (team-a),
// exp-b (team-b) and exp-stopped (team-a, stopped).
func (e *env) seed() {
	e.t.Helper()
	for _, body := range []string{
		`{"key": "exp-a", "owner": "team-a", "variations": ["control", "treatment"], "services": ["svc-a"]}`,
		`{"key": "exp-b", "owner": "team-b", "variations": ["control", "treatment"], "status": "draft"}`,
		`{"key": "exp-stopped", "owner": "team-a", "variations": ["a", "b"], "status": "stopped"}`,
	} {
		e.mustDo(http.StatusCreated, adminToken, "POST", "/v1/experiments", body, nil)
	}
}

func exp(key, owner string, revision int64) *experimentv1.Experiment {
	return &experimentv1.Experiment{
		Key: key, Owner: owner, Revision: revision,
		Variations: []*structpb.Value{structpb.NewStringValue("control"), structpb.NewStringValue("treatment")},
	}
}

// TestErrors checks every error path over both transports: the same input
// must give the mapped HTTP status and gRPC code, with every field error
// listed for invalid input.
func TestErrors(t *testing.T) {
	e := newEnv(t, nil)
	e.seed()
	big := strings.Repeat("x", admin.MaxBodyBytes+1)
	invalid := &experimentv1.Experiment{
		Key: "Bad Key", Variations: []*structpb.Value{structpb.NewStringValue("only")},
		Weights: []float64{0.3}, Coverage: new(2.0),
		StartTime: timestamppb.New(e.now), EndTime: timestamppb.New(e.now.Add(-time.Hour)),
	}
	invalidJSON := `{"key": "Bad Key", "variations": ["only"], "weights": [0.3], "coverage": 2, "startTime": "2030-01-01T12:00:00Z", "endTime": "2030-01-01T11:00:00Z"}`
	tests := []struct {
		name     string
		token    string
		method   string
		path     string
		body     string
		wantHTTP int
		grpc     func(context.Context, adminv1grpc.AdminServiceClient) error // nil: HTTP only
		wantCode codes.Code
		// wantFields are the field paths every one of which must appear in
		// the details (HTTP) and the BadRequest field violations (gRPC).
		wantFields []string
	}{
		{
			name: "invalid definition lists every field error", token: adminToken,
			method: "POST", path: "/v1/experiments", body: invalidJSON, wantHTTP: 400,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				_, err := cl.CreateExperiment(c, &adminv1.CreateExperimentRequest{Experiment: invalid})
				return err
			},
			wantCode:   codes.InvalidArgument,
			wantFields: []string{"key", "variations", "coverage", "endTime"},
		},
		{
			name: "unknown JSON field", token: adminToken,
			method: "POST", path: "/v1/experiments", body: `{"key": "k", "variations": ["a", "b"], "colour": "red"}`, wantHTTP: 400,
		},
		{
			name: "update without a revision", token: adminToken,
			method: "PUT", path: "/v1/experiments/exp-a", body: `{"variations": ["a", "b"]}`, wantHTTP: 400,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				_, err := cl.UpdateExperiment(c, &adminv1.UpdateExperimentRequest{Experiment: exp("exp-a", "", 0)})
				return err
			},
			wantCode: codes.InvalidArgument, wantFields: []string{"revision"},
		},
		{
			name: "unknown list filter value", token: readerToken,
			method: "GET", path: "/v1/experiments?status=finished", wantHTTP: 400,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				_, err := cl.ListExperiments(c, &adminv1.ListExperimentsRequest{Status: "finished"})
				return err
			},
			wantCode: codes.InvalidArgument, wantFields: []string{"status"},
		},
		{
			name: "no token", token: "",
			method: "GET", path: "/v1/experiments/exp-a", wantHTTP: 401,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				_, err := cl.GetExperiment(c, &adminv1.GetExperimentRequest{Key: "exp-a"})
				return err
			},
			wantCode: codes.Unauthenticated,
		},
		{
			name: "unknown token", token: "not-a-token-0123456789",
			method: "GET", path: "/v1/experiments", wantHTTP: 401,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				_, err := cl.ListExperiments(c, &adminv1.ListExperimentsRequest{})
				return err
			},
			wantCode: codes.Unauthenticated,
		},
		{
			name: "owner updates another owner's experiment", token: aliceToken,
			method: "PUT", path: "/v1/experiments/exp-b", body: `{"variations": ["a", "b"], "revision": "2"}`, wantHTTP: 403,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				_, err := cl.UpdateExperiment(c, &adminv1.UpdateExperimentRequest{Experiment: exp("exp-b", "", 2)})
				return err
			},
			wantCode: codes.PermissionDenied,
		},
		{
			name: "owner moves its experiment to another namespace", token: aliceToken,
			method: "PUT", path: "/v1/experiments/exp-a", body: `{"owner": "team-b", "variations": ["a", "b"], "revision": "1"}`, wantHTTP: 403,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				_, err := cl.UpdateExperiment(c, &adminv1.UpdateExperimentRequest{Experiment: exp("exp-a", "team-b", 1)})
				return err
			},
			wantCode: codes.PermissionDenied,
		},
		{
			name: "owner creates in another namespace", token: aliceToken,
			method: "POST", path: "/v1/experiments", body: `{"key": "new", "owner": "team-b", "variations": ["a", "b"]}`, wantHTTP: 403,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				_, err := cl.CreateExperiment(c, &adminv1.CreateExperimentRequest{Experiment: exp("new", "team-b", 0)})
				return err
			},
			wantCode: codes.PermissionDenied,
		},
		{
			name: "owner stops another owner's experiment", token: bobToken,
			method: "POST", path: "/v1/experiments/exp-a:stop", wantHTTP: 403,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				_, err := cl.StopExperiment(c, &adminv1.StopExperimentRequest{Key: "exp-a"})
				return err
			},
			wantCode: codes.PermissionDenied,
		},
		{
			name: "reader creates", token: readerToken,
			method: "POST", path: "/v1/experiments", body: `{"key": "new", "owner": "team-a", "variations": ["a", "b"]}`, wantHTTP: 403,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				_, err := cl.CreateExperiment(c, &adminv1.CreateExperimentRequest{Experiment: exp("new", "team-a", 0)})
				return err
			},
			wantCode: codes.PermissionDenied,
		},
		{
			name: "reader deletes", token: readerToken,
			method: "DELETE", path: "/v1/experiments/exp-a", wantHTTP: 403,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				_, err := cl.DeleteExperiment(c, &adminv1.DeleteExperimentRequest{Key: "exp-a"})
				return err
			},
			wantCode: codes.PermissionDenied,
		},
		{
			name: "not found", token: readerToken,
			method: "GET", path: "/v1/experiments/missing", wantHTTP: 404,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				_, err := cl.GetExperiment(c, &adminv1.GetExperimentRequest{Key: "missing"})
				return err
			},
			wantCode: codes.NotFound,
		},
		{
			name: "history of a key never written", token: readerToken,
			method: "GET", path: "/v1/experiments/missing/history", wantHTTP: 404,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				_, err := cl.GetHistory(c, &adminv1.GetHistoryRequest{Key: "missing"})
				return err
			},
			wantCode: codes.NotFound,
		},
		{
			name: "stale revision", token: aliceToken,
			method: "PUT", path: "/v1/experiments/exp-a", body: `{"variations": ["a", "b"], "revision": "999"}`, wantHTTP: 409,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				_, err := cl.UpdateExperiment(c, &adminv1.UpdateExperimentRequest{Experiment: exp("exp-a", "", 999)})
				return err
			},
			wantCode: codes.Aborted,
		},
		{
			name: "stale revision on delete", token: aliceToken,
			method: "DELETE", path: "/v1/experiments/exp-a?revision=999", wantHTTP: 409,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				_, err := cl.DeleteExperiment(c, &adminv1.DeleteExperimentRequest{Key: "exp-a", Revision: 999})
				return err
			},
			wantCode: codes.Aborted,
		},
		{
			name: "stale revision on a transition", token: aliceToken,
			method: "POST", path: "/v1/experiments/exp-a:pause", body: `{"revision": "999"}`, wantHTTP: 409,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				_, err := cl.PauseExperiment(c, &adminv1.PauseExperimentRequest{Key: "exp-a", Revision: 999})
				return err
			},
			wantCode: codes.Aborted,
		},
		{
			name: "key exists", token: aliceToken,
			method: "POST", path: "/v1/experiments", body: `{"key": "exp-a", "variations": ["a", "b"]}`, wantHTTP: 409,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				_, err := cl.CreateExperiment(c, &adminv1.CreateExperimentRequest{Experiment: exp("exp-a", "team-a", 0)})
				return err
			},
			wantCode: codes.AlreadyExists,
		},
		{
			name: "starting a stopped experiment", token: aliceToken,
			method: "POST", path: "/v1/experiments/exp-stopped/start", wantHTTP: 409,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				_, err := cl.StartExperiment(c, &adminv1.StartExperimentRequest{Key: "exp-stopped"})
				return err
			},
			wantCode: codes.FailedPrecondition,
		},
		{
			name: "pausing a draft", token: bobToken,
			method: "POST", path: "/v1/experiments/exp-b:pause", wantHTTP: 409,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				_, err := cl.PauseExperiment(c, &adminv1.PauseExperimentRequest{Key: "exp-b"})
				return err
			},
			wantCode: codes.FailedPrecondition,
		},
		{
			name: "restarting a stopped experiment by update", token: aliceToken,
			method: "PUT", path: "/v1/experiments/exp-stopped", body: `{"variations": ["a", "b"], "status": "running", "revision": "3"}`, wantHTTP: 409,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				x := exp("exp-stopped", "", 3)
				x.Status = "running"
				_, err := cl.UpdateExperiment(c, &adminv1.UpdateExperimentRequest{Experiment: x})
				return err
			},
			wantCode: codes.FailedPrecondition,
		},
		{
			name: "unknown action", token: aliceToken,
			method: "POST", path: "/v1/experiments/exp-a:resume", wantHTTP: 404,
		},
		{
			name: "oversized payload", token: adminToken,
			method: "POST", path: "/v1/experiments", body: `{"key": "big", "variations": ["a", "b"], "description": "` + big + `"}`, wantHTTP: 413,
			grpc: func(c context.Context, cl adminv1grpc.AdminServiceClient) error {
				x := exp("big", "team-a", 0)
				x.Description = big
				_, err := cl.CreateExperiment(c, &adminv1.CreateExperimentRequest{Experiment: x})
				return err
			},
			wantCode: codes.ResourceExhausted,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.history(t)
			t.Run("http", func(t *testing.T) {
				got, b := e.do(tt.token, tt.method, tt.path, tt.body)
				if got != tt.wantHTTP {
					t.Fatalf("status %d, want %d; body %s", got, tt.wantHTTP, b)
				}
				var ae apiError
				if err := json.Unmarshal(b, &ae); err != nil || ae.Error.Code == "" {
					t.Fatalf("body %s is not an error (%v)", b, err)
				}
				for _, f := range tt.wantFields {
					if !slices.ContainsFunc(ae.Error.Details, func(d string) bool { return strings.HasPrefix(d, f+": ") || strings.HasPrefix(d, f+"[") }) {
						t.Errorf("details %q lack field %s", ae.Error.Details, f)
					}
				}
			})
			if tt.grpc != nil {
				t.Run("grpc", func(t *testing.T) {
					err := tt.grpc(ctx(tt.token), e.client)
					st := status.Convert(err)
					if st.Code() != tt.wantCode {
						t.Fatalf("code %v (%v), want %v", st.Code(), err, tt.wantCode)
					}
					var fields []string
					for _, d := range st.Details() {
						if br, ok := d.(*errdetails.BadRequest); ok {
							for _, v := range br.GetFieldViolations() {
								fields = append(fields, v.GetField())
							}
						}
					}
					for _, f := range tt.wantFields {
						if !slices.ContainsFunc(fields, func(g string) bool { return g == f || strings.HasPrefix(g, f+"[") }) {
							t.Errorf("field violations %q lack %s", fields, f)
						}
					}
				})
			}
			if after := e.history(t); after != before {
				t.Errorf("a failed request changed the store: history %d → %d entries", before, after)
			}
		})
	}

	logs := e.logs.String()
	for _, want := range []string{`"msg":"admin write denied"`, `"principal":"alice"`, `"principal":"dashboard"`, `"msg":"admin request unauthenticated"`, `"transport":"grpc"`, `"transport":"http"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s:\n%s", want, logs)
		}
	}
}

// history is the number of audit entries.
func (e *env) history(t *testing.T) int {
	t.Helper()
	h, err := e.store.History(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return len(h)
}

// failingStore fails every read with an error whose text must not leak.
type failingStore struct{ store.Store }

var errSecret = errors.New("bolt: page 42 corrupt at /var/lib/allot/secret.db")

func (failingStore) Get(context.Context, string) (*store.Experiment, error) { return nil, errSecret }

func (failingStore) List(context.Context) ([]*store.Experiment, int64, error) {
	return nil, 0, errSecret
}

// TestInternalErrorsAreNotLeaked: an unknown error is a generic internal
// error on both transports, with the detail only in the log.
func TestInternalErrorsAreNotLeaked(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "allot.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e := newEnv(t, failingStore{db})
	got, b := e.do(readerToken, "GET", "/v1/experiments/exp-a", "")
	if got != http.StatusInternalServerError || strings.Contains(string(b), "corrupt") || !strings.Contains(string(b), `"internal error"`) {
		t.Errorf("HTTP: %d %s, want 500 with a generic message", got, b)
	}
	_, err = e.client.ListExperiments(ctx(readerToken), &adminv1.ListExperimentsRequest{})
	if st := status.Convert(err); st.Code() != codes.Internal || strings.Contains(st.Message(), "corrupt") {
		t.Errorf("gRPC: %v, want INTERNAL with a generic message", err)
	}
	if n := strings.Count(e.logs.String(), "page 42 corrupt"); n != 2 {
		t.Errorf("the detail is logged %d times, want 2 (once per transport):\n%s", n, e.logs.String())
	}
}

// TestHTTPLifecycle walks the HTTP routes' happy paths: create, get, list
// with filters, update, transitions, evaluate, history, delete.
func TestHTTPLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	var created map[string]any
	// An owner with one namespace may leave the owner out.
	e.mustDo(201, aliceToken, "POST", "/v1/experiments", `{"key": "checkout", "variations": ["control", "treatment"], "weights": [0.5, 0.5], "services": ["svc-a"], "status": "draft"}`, &created)
	if created["owner"] != "team-a" || created["revision"] != "1" || created["createdBy"] != "alice" {
		t.Fatalf("created %v, want owner team-a, revision 1, createdBy alice", created)
	}
	e.mustDo(201, bobToken, "POST", "/v1/experiments", `{"key": "search", "variations": ["a", "b"]}`, nil)

	listKeys := func(query string) []string {
		t.Helper()
		var l struct {
			Experiments []struct {
				Key string `json:"key"`
			} `json:"experiments"`
			Revision string `json:"revision"`
		}
		e.mustDo(200, readerToken, "GET", "/v1/experiments"+query, "", &l)
		keys := []string{}
		for _, x := range l.Experiments {
			keys = append(keys, x.Key)
		}
		return keys
	}
	for _, tt := range []struct {
		query string
		want  []string
	}{
		{"", []string{"checkout", "search"}},
		{"?owner=team-a", []string{"checkout"}},
		{"?status=running", []string{"search"}},
		{"?status=draft", []string{"checkout"}},
		{"?service=svc-a", []string{"checkout", "search"}}, // search targets every service
		{"?service=svc-b", []string{"search"}},
		{"?owner=team-b&status=draft", []string{}},
	} {
		if got := listKeys(tt.query); !slices.Equal(got, tt.want) {
			t.Errorf("list%s = %q, want %q", tt.query, got, tt.want)
		}
	}

	// Transitions: draft → running → paused → running → stopped.
	for _, step := range []struct{ path, want string }{
		{"/v1/experiments/checkout:start", "running"},
		{"/v1/experiments/checkout/pause", "paused"},
		{"/v1/experiments/checkout:pause", "paused"}, // idempotent: no write
		{"/v1/experiments/checkout:start", "running"},
	} {
		var got map[string]any
		e.mustDo(200, aliceToken, "POST", step.path, "", &got)
		if got["status"] != step.want {
			t.Fatalf("POST %s: status %v, want %s", step.path, got["status"], step.want)
		}
	}

	// Update with the revision read.
	var cur map[string]any
	e.mustDo(200, readerToken, "GET", "/v1/experiments/checkout", "", &cur)
	var updated map[string]any
	e.mustDo(200, aliceToken, "PUT", "/v1/experiments/checkout",
		`{"variations": ["control", "treatment"], "weights": [0, 1], "services": ["svc-a"], "revision": "`+cur["revision"].(string)+`"}`, &updated)
	if updated["updatedBy"] != "alice" || updated["status"] != nil {
		t.Errorf("updated %v", updated)
	}

	// Evaluate: svc-a sees both (checkout forced to treatment by weights),
	// svc-b only the untargeted one.
	var ev struct {
		Version     string `json:"version"`
		Assignments []struct {
			Experiment   string `json:"experiment"`
			Value        string `json:"value"`
			InExperiment bool   `json:"inExperiment"`
			Header       string `json:"header"`
		} `json:"assignments"`
	}
	e.mustDo(200, readerToken, "POST", "/v1/evaluate", `{"service": "svc-a", "attributes": {"id": "alice"}}`, &ev)
	if len(ev.Assignments) != 2 || ev.Assignments[0].Experiment != "checkout" || ev.Assignments[0].Value != "treatment" ||
		!ev.Assignments[0].InExperiment || ev.Assignments[0].Header != "x-experiment-checkout" || ev.Version == "" {
		t.Errorf("evaluate svc-a = %+v", ev)
	}
	e.mustDo(200, readerToken, "POST", "/v1/evaluate", `{"service": "svc-b", "attributes": {"id": "alice"}}`, &ev)
	if len(ev.Assignments) != 1 || ev.Assignments[0].Experiment != "search" {
		t.Errorf("evaluate svc-b = %+v", ev)
	}

	e.mustDo(200, aliceToken, "POST", "/v1/experiments/checkout:stop", "", nil)
	e.mustDo(204, aliceToken, "DELETE", "/v1/experiments/checkout", "", nil)
	e.mustDo(404, readerToken, "GET", "/v1/experiments/checkout", "", nil)

	var h struct {
		Changes []struct {
			Revision string         `json:"revision"`
			Op       string         `json:"op"`
			Actor    string         `json:"actor"`
			Time     string         `json:"time"`
			Before   map[string]any `json:"before"`
			After    map[string]any `json:"after"`
		} `json:"changes"`
	}
	e.mustDo(200, readerToken, "GET", "/v1/experiments/checkout/history", "", &h)
	var ops []string
	for _, c := range h.Changes {
		ops = append(ops, c.Op+"/"+c.Actor)
	}
	want := []string{"create/alice", "update/alice", "update/alice", "update/alice", "update/alice", "update/alice", "delete/alice"}
	if !slices.Equal(ops, want) {
		t.Fatalf("history ops %q, want %q", ops, want)
	}
	first, last := h.Changes[0], h.Changes[len(h.Changes)-1]
	if first.Before != nil || first.After["status"] != "draft" || last.After != nil || last.Before["status"] != "stopped" || first.Time == "" {
		t.Errorf("history before/after wrong: first %+v, last %+v", first, last)
	}
	e.mustDo(200, readerToken, "GET", "/v1/history", "", &h)
	if len(h.Changes) != 8 {
		t.Errorf("whole history has %d changes, want 8", len(h.Changes))
	}
}

// TestGRPCLifecycle walks the gRPC happy paths.
func TestGRPCLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	c := ctx(aliceToken)
	x := exp("checkout", "", 0)
	x.Status = "draft"
	x.Services = []string{"svc-a"}
	got, err := e.client.CreateExperiment(c, &adminv1.CreateExperimentRequest{Experiment: x})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetOwner() != "team-a" || got.GetRevision() != 1 {
		t.Fatalf("created %v", got)
	}
	if _, err := e.client.CreateExperiment(ctx(bobToken), &adminv1.CreateExperimentRequest{Experiment: exp("search", "", 0)}); err != nil {
		t.Fatal(err)
	}

	list := func(req *adminv1.ListExperimentsRequest) []string {
		t.Helper()
		resp, err := e.client.ListExperiments(ctx(readerToken), req)
		if err != nil {
			t.Fatal(err)
		}
		keys := []string{}
		for _, x := range resp.GetExperiments() {
			keys = append(keys, x.GetKey())
		}
		return keys
	}
	for _, tt := range []struct {
		req  *adminv1.ListExperimentsRequest
		want []string
	}{
		{&adminv1.ListExperimentsRequest{}, []string{"checkout", "search"}},
		{&adminv1.ListExperimentsRequest{Owner: "team-b"}, []string{"search"}},
		{&adminv1.ListExperimentsRequest{Status: "draft"}, []string{"checkout"}},
		{&adminv1.ListExperimentsRequest{Service: "svc-b"}, []string{"search"}},
	} {
		if got := list(tt.req); !slices.Equal(got, tt.want) {
			t.Errorf("list %v = %q, want %q", tt.req, got, tt.want)
		}
	}

	if got, err = e.client.StartExperiment(c, &adminv1.StartExperimentRequest{Key: "checkout", Revision: got.GetRevision()}); err != nil || got.GetStatus() != "running" {
		t.Fatalf("start: %v %v", got, err)
	}
	if got, err = e.client.PauseExperiment(c, &adminv1.PauseExperimentRequest{Key: "checkout"}); err != nil || got.GetStatus() != "paused" {
		t.Fatalf("pause: %v %v", got, err)
	}
	ev, err := e.client.EvaluateExperiments(ctx(readerToken), &adminv1.EvaluateExperimentsRequest{Service: "svc-a", Attributes: &structpb.Struct{Fields: map[string]*structpb.Value{"id": structpb.NewStringValue("u1")}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ev.GetAssignments()) != 1 || ev.GetAssignments()[0].GetExperiment() != "search" {
		t.Errorf("a paused experiment is evaluated: %v", ev)
	}
	if got, err = e.client.StartExperiment(c, &adminv1.StartExperimentRequest{Key: "checkout"}); err != nil {
		t.Fatal(err)
	}
	// A schedule in the future hides the experiment until its start.
	x = exp("checkout", "", got.GetRevision())
	x.Services = []string{"svc-a"}
	x.StartTime = timestamppb.New(e.now.Add(time.Hour))
	if got, err = e.client.UpdateExperiment(c, &adminv1.UpdateExperimentRequest{Experiment: x}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		at   *timestamppb.Timestamp
		want int
	}{{nil, 1}, {timestamppb.New(e.now.Add(2 * time.Hour)), 2}} {
		ev, err := e.client.EvaluateExperiments(ctx(readerToken), &adminv1.EvaluateExperimentsRequest{Service: "svc-a", Time: tt.at,
			Attributes: &structpb.Struct{Fields: map[string]*structpb.Value{"id": structpb.NewStringValue("u1")}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(ev.GetAssignments()) != tt.want {
			t.Errorf("evaluate at %v: %d assignments, want %d", tt.at, len(ev.GetAssignments()), tt.want)
		}
	}
	if _, err := e.client.StopExperiment(c, &adminv1.StopExperimentRequest{Key: "checkout"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.DeleteExperiment(c, &adminv1.DeleteExperimentRequest{Key: "checkout"}); err != nil {
		t.Fatal(err)
	}
	h, err := e.client.GetHistory(ctx(readerToken), &adminv1.GetHistoryRequest{Key: "checkout"})
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, ch := range h.GetChanges() {
		ops = append(ops, ch.GetOp())
	}
	if want := []string{"create", "update", "update", "update", "update", "update", "delete"}; !slices.Equal(ops, want) {
		t.Errorf("history %q, want %q", ops, want)
	}
	if h.GetChanges()[1].GetBefore().GetStatus() != "draft" || h.GetChanges()[1].GetAfter().GetStatus() != "running" || h.GetChanges()[1].GetActor() != "alice" {
		t.Errorf("start's audit entry: %v", h.GetChanges()[1])
	}
}

// TestStickyBucketingFields: bucketVersion, minBucketVersion and
// disableStickyBucketing survive create, get, list and update over HTTP,
// read back over gRPC too, and an invalid pair is refused naming the field.
func TestStickyBucketingFields(t *testing.T) {
	e := newEnv(t, nil)
	type sticky struct {
		Revision               string `json:"revision"`
		BucketVersion          *int   `json:"bucketVersion"`
		MinBucketVersion       *int   `json:"minBucketVersion"`
		DisableStickyBucketing *bool  `json:"disableStickyBucketing"`
	}
	check := func(what string, got sticky, bucket, minBucket int, disabled bool) {
		t.Helper()
		if got.BucketVersion == nil || *got.BucketVersion != bucket || got.MinBucketVersion == nil || *got.MinBucketVersion != minBucket ||
			(got.DisableStickyBucketing != nil && *got.DisableStickyBucketing) != disabled {
			t.Errorf("%s: got %s, want bucketVersion %d, minBucketVersion %d, disableStickyBucketing %v", what, jsonOf(t, got), bucket, minBucket, disabled)
		}
	}
	var created, got sticky
	e.mustDo(201, aliceToken, "POST", "/v1/experiments",
		`{"key": "checkout", "variations": ["a", "b"], "bucketVersion": 3, "minBucketVersion": 2, "disableStickyBucketing": true}`, &created)
	check("create", created, 3, 2, true)
	e.mustDo(200, readerToken, "GET", "/v1/experiments/checkout", "", &got)
	check("get", got, 3, 2, true)
	var l struct {
		Experiments []sticky `json:"experiments"`
	}
	e.mustDo(200, readerToken, "GET", "/v1/experiments", "", &l)
	if len(l.Experiments) != 1 {
		t.Fatalf("list: %d experiments, want 1", len(l.Experiments))
	}
	check("list", l.Experiments[0], 3, 2, true)
	g, err := e.client.GetExperiment(ctx(readerToken), &adminv1.GetExperimentRequest{Key: "checkout"})
	if err != nil {
		t.Fatal(err)
	}
	if g.GetBucketVersion() != 3 || g.GetMinBucketVersion() != 2 || !g.GetDisableStickyBucketing() {
		t.Errorf("gRPC get: %v", g)
	}

	e.mustDo(200, aliceToken, "PUT", "/v1/experiments/checkout",
		`{"variations": ["a", "b"], "bucketVersion": 4, "minBucketVersion": 4, "revision": "`+got.Revision+`"}`, nil)
	var updated sticky // fresh: decoding does not clear fields absent from the answer
	e.mustDo(200, readerToken, "GET", "/v1/experiments/checkout", "", &updated)
	check("get after update", updated, 4, 4, false)

	var ae apiError
	e.mustDo(400, aliceToken, "PUT", "/v1/experiments/checkout",
		`{"variations": ["a", "b"], "bucketVersion": 4, "minBucketVersion": 5, "revision": "`+updated.Revision+`"}`, &ae)
	if want := "minBucketVersion: 5 is above bucketVersion 4: every unit's new sticky bucket would be blocked"; !slices.Contains(ae.Error.Details, want) {
		t.Errorf("details %q lack %q", ae.Error.Details, want)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMetrics: request latency by transport, method and code, and
// experiments by status.
func TestMetrics(t *testing.T) {
	e := newEnv(t, nil)
	e.seed()
	e.do(readerToken, "GET", "/v1/experiments/missing", "")
	e.client.GetExperiment(ctx(readerToken), &adminv1.GetExperimentRequest{Key: "exp-a"})
	want := `
# HELP allot_experiments Stored experiments by status (an empty status counts as running).
# TYPE allot_experiments gauge
allot_experiments{status="draft"} 1
allot_experiments{status="paused"} 0
allot_experiments{status="running"} 1
allot_experiments{status="stopped"} 1
`
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(want), "allot_experiments"); err != nil {
		t.Error(err)
	}
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var series []string
	for _, mf := range mfs {
		if mf.GetName() != "allot_admin_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var l []string
			for _, lp := range m.GetLabel() {
				l = append(l, lp.GetName()+"="+lp.GetValue())
			}
			series = append(series, strings.Join(l, ","))
		}
	}
	for _, want := range []string{
		"code=201,method=CreateExperiment,transport=http",
		"code=404,method=GetExperiment,transport=http",
		"code=OK,method=GetExperiment,transport=grpc",
	} {
		if !slices.Contains(series, want) {
			t.Errorf("no latency series %s in %q", want, series)
		}
	}
}

// TestWhoAmI: every token learns its own name, role and namespaces over
// both transports, the same on each; no token is unauthenticated.
func TestWhoAmI(t *testing.T) {
	e := newEnv(t, nil)
	tests := []struct {
		name, token string
		want        *adminv1.Caller
	}{
		{"admin", adminToken, &adminv1.Caller{Name: "root", Role: "admin"}},
		{"owner", aliceToken, &adminv1.Caller{Name: "alice", Role: "owner", Namespaces: []string{"team-a"}}},
		{"reader", readerToken, &adminv1.Caller{Name: "dashboard", Role: "reader"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got struct {
				Name       string   `json:"name"`
				Role       string   `json:"role"`
				Namespaces []string `json:"namespaces"`
			}
			e.mustDo(http.StatusOK, tc.token, "GET", "/v1/whoami", "", &got)
			if got.Name != tc.want.Name || got.Role != tc.want.Role || !slices.Equal(got.Namespaces, tc.want.Namespaces) {
				t.Errorf("GET /v1/whoami: %+v, want %v", got, tc.want)
			}
			c, err := e.client.WhoAmI(ctx(tc.token), &adminv1.WhoAmIRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if c.Name != tc.want.Name || c.Role != tc.want.Role || !slices.Equal(c.Namespaces, tc.want.Namespaces) {
				t.Errorf("WhoAmI: %v, want %v", c, tc.want)
			}
		})
	}
	if code, b := e.do("", "GET", "/v1/whoami", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/whoami without a token: %d %s, want 401", code, b)
	}
	if _, err := e.client.WhoAmI(ctx(""), &adminv1.WhoAmIRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("WhoAmI without a token: %v, want UNAUTHENTICATED", err)
	}
}
