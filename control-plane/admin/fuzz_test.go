package admin_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/store/bolt"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
	"github.com/allotmesh/allot/proto/allot/admin/v1/adminv1grpc"
)

// fuzzService is an admin Service over a real bbolt store for fuzzing.
func fuzzService(f *testing.F) (*admin.Service, *admin.Tokens) {
	db, err := bolt.Open(filepath.Join(f.TempDir(), "allot.db"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { db.Close() })
	tokens, err := admin.ParseTokens([]byte(tokensJSON))
	if err != nil {
		f.Fatal(err)
	}
	return admin.NewService(db, nil), tokens
}

// FuzzHTTPWrite sends arbitrary JSON bodies to the HTTP API's writes: every
// answer is a JSON document with a 2xx or 4xx status, never a 5xx.
func FuzzHTTPWrite(f *testing.F) {
	svc, tokens := fuzzService(f)
	h := admin.NewHTTP(svc, tokens)
	for _, seed := range []string{
		`{"key":"k","variations":["a","b"],"weights":[0.5,0.5]}`,
		`{"key":"k","variations":["a",{"x":1}],"weights":[2],"coverage":-1,"condition":{"$or":[{"a":{"$regex":"("}}]}}`,
		`{"key":"k","variations":["a","b"],"namespace":["n",0,0.5],"startTime":"2030-01-01T00:00:00Z"}`,
		`[]`, `{"unknown":true}`, `{"key":"k","revision":"x"}`, ``,
	} {
		f.Add("POST", seed)
		f.Add("PUT", seed)
	}
	f.Fuzz(func(t *testing.T, method, body string) {
		if method != "POST" && method != "PUT" {
			method = "POST"
		}
		path := "/v1/experiments"
		if method == "PUT" {
			path += "/k"
		}
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+adminToken)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s %q: status %d: %s", method, path, body, rec.Code, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s %q: answer is not JSON: %q", method, body, rec.Body)
		}
		if rec.Code == http.StatusCreated || rec.Code == http.StatusOK {
			// Read back the experiment the answer names (a create may be
			// of any key).
			var written struct {
				Key string `json:"key"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &written); err != nil || written.Key == "" {
				t.Fatalf("%s %q: the answer names no key: %s", method, body, rec.Body)
			}
			get := httptest.NewRecorder()
			r := httptest.NewRequest("GET", "/v1/experiments/"+url.PathEscape(written.Key), nil)
			r.Header.Set("Authorization", "Bearer "+adminToken)
			h.ServeHTTP(get, r)
			if get.Code != http.StatusOK {
				t.Fatalf("accepted %q but cannot read it back: %d", body, get.Code)
			}
		}
	})
}

// FuzzGRPCWrite decodes arbitrary bytes as gRPC create and update requests
// (the protobuf wire format a client sends) and makes the calls over a real
// loopback gRPC connection: the answer is never INTERNAL or UNKNOWN.
func FuzzGRPCWrite(f *testing.F) {
	svc, tokens := fuzzService(f)
	g := admin.NewGRPC(svc, tokens)
	srv := grpc.NewServer(g.ServerOptions()...)
	g.Register(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	go srv.Serve(ln)
	f.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { conn.Close() })
	client := adminv1grpc.NewAdminServiceClient(conn)
	seed, _ := proto.Marshal(&adminv1.CreateExperimentRequest{Experiment: exp("k", "team-a", 0)})
	f.Add(seed)
	f.Add([]byte{0x0a, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		var create adminv1.CreateExperimentRequest
		if proto.Unmarshal(b, &create) == nil {
			create.Wait = nil // waiting is not what is fuzzed
			_, err := client.CreateExperiment(ctx(adminToken), &create)
			checkCode(t, err)
		}
		var update adminv1.UpdateExperimentRequest
		if proto.Unmarshal(b, &update) == nil {
			update.Wait = nil
			_, err := client.UpdateExperiment(ctx(adminToken), &update)
			checkCode(t, err)
		}
	})
}

func checkCode(t *testing.T, err error) {
	t.Helper()
	switch status.Code(err) {
	case codes.Internal, codes.Unknown, codes.Unavailable:
		t.Fatalf("server error: %v", err)
	}
}
