package admin

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/allotmesh/allot/control-plane/experiment"
)

// Role is what a token may do.
type Role string

// Roles: admins do everything, owners write experiments of their owner
// namespaces, readers only read.
const (
	RoleAdmin  Role = "admin"
	RoleOwner  Role = "owner"
	RoleReader Role = "reader"
)

// Principal is an authenticated caller.
type Principal struct {
	Name       string   `json:"name"`
	Role       Role     `json:"role"`
	Namespaces []string `json:"namespaces,omitempty"`
}

// CanRead reports whether p may read experiments.
func (p *Principal) CanRead() bool { return p != nil }

// CanWrite reports whether p may write experiments of owner namespace ns.
func (p *Principal) CanWrite(ns string) bool {
	switch {
	case p == nil:
		return false
	case p.Role == RoleAdmin:
		return true
	case p.Role == RoleOwner:
		return slices.Contains(p.Namespaces, ns)
	}
	return false
}

// Tokens authenticates bearer tokens. Only SHA-256 digests of the tokens are
// kept in memory.
type Tokens struct {
	byDigest map[[32]byte]*Principal
}

// tokenFile is the tokens file's JSON shape.
type tokenFile struct {
	Tokens []struct {
		Principal
		Token string `json:"token"`
	} `json:"tokens"`
}

// LoadTokens reads a tokens file: {"tokens": [{"name", "token", "role",
// "namespaces"}]}. Every problem is reported with its field; an unknown
// key or a file without a token is refused. A name must
// match experiment.ActorNamePattern: it is what the audit history and a
// rollback's acknowledgedBy record, exactly.
func LoadTokens(path string) (*Tokens, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read tokens file: %w", err)
	}
	return ParseTokens(b)
}

// ParseTokens parses the tokens file's content.
func ParseTokens(b []byte) (*Tokens, error) {
	var f tokenFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("parse tokens file: %w", err)
	}
	if err := dec.Decode(&struct{}{}); err != io.EOF {
		return nil, fmt.Errorf("parse tokens file: data after the top-level object")
	}
	if len(f.Tokens) == 0 {
		return nil, fmt.Errorf("tokens: none: allotd would refuse every call; list at least one")
	}
	t := &Tokens{byDigest: map[[32]byte]*Principal{}}
	for i, e := range f.Tokens {
		switch name := experiment.ActorNameProblem(e.Name); {
		case e.Name == "":
			return nil, fmt.Errorf("tokens[%d].name: required", i)
		case name != "":
			return nil, fmt.Errorf("tokens[%d].name: %s", i, name)
		case len(e.Token) < 16:
			return nil, fmt.Errorf("tokens[%d].token: at least 16 characters", i)
		case e.Role != RoleAdmin && e.Role != RoleOwner && e.Role != RoleReader:
			return nil, fmt.Errorf("tokens[%d].role: %q, want admin, owner or reader", i, e.Role)
		case e.Role == RoleOwner && len(e.Namespaces) == 0:
			return nil, fmt.Errorf("tokens[%d].namespaces: an owner needs at least one namespace", i)
		}
		d := sha256.Sum256([]byte(e.Token))
		if _, dup := t.byDigest[d]; dup {
			return nil, fmt.Errorf("tokens[%d].token: duplicate token", i)
		}
		p := e.Principal
		t.byDigest[d] = &p
	}
	return t, nil
}

// bearer returns the token of an "Authorization: Bearer <token>" value
// (the scheme is case-insensitive), or "".
func bearer(header string) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// Authenticate returns the principal of a bearer token, or nil.
func (t *Tokens) Authenticate(token string) *Principal {
	if t == nil || token == "" {
		return nil
	}
	return t.byDigest[sha256.Sum256([]byte(token))]
}
