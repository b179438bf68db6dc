package admin_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/store/bolt/bolttest"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// tokensWithName is a tokens file of an admin "root" and an admin named
// name, whose token is nameToken.
func tokensWithName(t *testing.T, name string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"tokens": []map[string]any{
		{"name": "root", "role": "admin", "token": adminToken},
		{"name": name, "role": "admin", "token": nameToken},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const nameToken = "named-token-0123456789"

// TestTokenNames: a token's name follows experiment.ActorNamePattern,
// checked when the tokens file is loaded with an error naming the field;
// the names of the shipped dev tokens file and of the docs are valid.
func TestTokenNames(t *testing.T) {
	for _, name := range []string{"<&>", "a b", "é", "-lead", ".lead", "tab\t", `quo"te`, "back\\slash", "slash/ed", "x" + strings.Repeat("y", experiment.MaxActorBytes)} {
		_, err := admin.ParseTokens(tokensWithName(t, name))
		if err == nil || !strings.HasPrefix(err.Error(), "tokens[1].name: ") {
			t.Errorf("name %q: %v, want refused naming tokens[1].name", name, err)
		}
	}
	for _, name := range []string{"root", "dev-admin", "growth-owner", "dashboard", "platform", "payments", "e2e",
		"ci.bot@team-a:42_x", "allotd:guardian", "A" + strings.Repeat("z", experiment.MaxActorBytes-1)} {
		if _, err := admin.ParseTokens(tokensWithName(t, name)); err != nil {
			t.Errorf("name %q: %v, want accepted", name, err)
		}
	}
	if _, err := admin.LoadTokens(filepath.Join("..", "..", "envoy-configs", "dev-tokens.json")); err != nil {
		t.Errorf("envoy-configs/dev-tokens.json: %v", err)
	}
}

// TestTokensFileStrict: a tokens file with a misspelt key or no token at
// all is refused with an error naming what is wrong, instead of starting
// an allotd that answers every call with 401.
func TestTokensFileStrict(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{`{"tokenz":[{"name":"root","role":"admin","token":"` + adminToken + `"}]}`, `unknown field "tokenz"`},
		{`{"tokens":[{"name":"root","role":"admin","token":"` + adminToken + `","namespace":["a"]}]}`, `unknown field "namespace"`},
		{`{"tokens":[]}`, "tokens: none"},
		{`{}`, "tokens: none"},
		{`{"tokens":[{"name":"root","role":"admin","token":"` + adminToken + `"}]} {}`, "data after the top-level object"},
		{`{"tokens":[{"name":"root","role":"admin","token":"` + adminToken + `"}]}}`, "data after the top-level object"},
	} {
		if _, err := admin.ParseTokens([]byte(tc.file)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.file, err, tc.want)
		}
	}
}

// TestAcknowledgedByTheTokensName: a start acknowledging a rollback
// records the caller's name exactly, and the rollback is no longer
// pending.
func TestAcknowledgedByTheTokensName(t *testing.T) {
	const name = "ci.bot@team-a:42_x"
	tokens, err := admin.ParseTokens(tokensWithName(t, name))
	if err != nil {
		t.Fatal(err)
	}
	p := tokens.Authenticate(nameToken)
	if p == nil || p.Name != name {
		t.Fatalf("the token authenticates %+v, want %s", p, name)
	}
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	svc := admin.NewService(bolttest.Open(t, filepath.Join(t.TempDir(), "allot.db")), nil, admin.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	e := &experimentv1.Experiment{Key: "checkout", Variations: []*structpb.Value{structpb.NewStringValue("a"), structpb.NewStringValue("b")}}
	if _, err := svc.Create(ctx, p, e); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.WriteState(ctx, "checkout", 0, "allotd", func(x *experimentv1.Experiment) {
		x.Status = experiment.StatusPaused
		x.Rollback = &experimentv1.Rollback{Guardrail: 0, Variation: 1}
	}); err != nil {
		t.Fatal(err)
	}
	started, err := svc.StartAcknowledgingRollback(ctx, p, "checkout", 0)
	if err != nil {
		t.Fatal(err)
	}
	rb := started.GetRollback()
	if rb.GetAcknowledgedBy() != name || experiment.RollbackPending(started) || started.GetUpdatedBy() != name ||
		experiment.Status(started) != experiment.StatusRunning || !rb.GetAcknowledgeTime().AsTime().Equal(now) {
		t.Errorf("after an acknowledging start by %s: status %s, updatedBy %q, rollback %v, pending %v",
			name, experiment.Status(started), started.GetUpdatedBy(), rb, experiment.RollbackPending(started))
	}
}
