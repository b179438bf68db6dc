package experiment

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/allotmesh/allot/filter/engine"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// MaxSpecBytes is the largest document, as the store keeps it (Spec,
// compacted proto3 JSON): what an owner writes (at most MaxDocumentBytes,
// CheckBounds names the field) and the state allotd adds (at most
// StateReserveBytes). Every store must carry a document of this
// size through every write: an update sends it about five times (the
// experiment, and the Change with its Before and After twice: the history
// and its per-key index), 320 KiB plus metadata, well inside etcd's default
// request limit (--max-request-bytes, 1.5 MiB). The store conformance suite
// (store/storetest) writes one to every store.
const MaxSpecBytes = 64 << 10

// Bounds of an experiment document's fields, enforced by CheckBounds with
// an error naming the field (docs/reference.md lists them for
// owners). The whole document is bounded by MaxDocumentBytes; the key by the
// engine (^[a-z][a-z0-9._-]{0,62}$); a condition's size by the document
// and its nesting by the filter's decoder.
const (
	// MaxDescriptionBytes bounds description.
	MaxDescriptionBytes = 4 << 10
	// MaxOwnerBytes bounds owner.
	MaxOwnerBytes = 128
	// MaxServices bounds the entries of services.
	MaxServices = 64
	// MaxServiceNameBytes bounds a service name: each entry of services,
	// and the cluster a proxy presents over xDS (control-plane/xds
	// refuses a longer one), so that an experiment can name every service
	// whose proxies may connect and no other. ServiceNameProblem checks
	// both with the same rule.
	MaxServiceNameBytes = 128
	// MaxVariations bounds the entries of variations.
	MaxVariations = 64
	// MaxVariationValueBytes bounds a variation's rendered header value:
	// what the filter writes (engine.RenderVariation). A header at the
	// bound still fits the 8 KiB line common upstreams accept (nginx's
	// large_client_header_buffers, Apache's LimitRequestFieldSize); two
	// experiments at the bound exceed the admin API's per-service header
	// budget (admin.MaxServiceHeaderBytes).
	MaxVariationValueBytes = 4 << 10
	// MaxAttributeNameBytes bounds hashAttribute and fallbackAttribute.
	MaxAttributeNameBytes = 128
	// MaxSeedBytes bounds seed.
	MaxSeedBytes = 256
	// MaxGuardrails bounds the entries of guardrails: one per metric and
	// control variation is the common case, 8 leaves room for a second
	// control without making a rollback's cause hard to read.
	MaxGuardrails = 8
	// MinGuardrailRequests and MaxGuardrailRequests bound a guardrail's
	// minRequests: below 100 requests a proportion's normal approximation
	// is poor; 10,000,000 is still reached by a busy service in a day.
	MinGuardrailRequests = 100
	MaxGuardrailRequests = 10_000_000
	// DefaultGuardrailRequests is a guardrail's minRequests when unset: an
	// error rate of 1% then rests on about 10 errors per variation.
	DefaultGuardrailRequests = 1_000
	// MaxGuardrailRatio bounds latencyP95's maxRatio: a ratio above it
	// guards nothing.
	MaxGuardrailRatio = 100
	// MaxRampSteps bounds the steps of ramp.
	MaxRampSteps = 16
	// MaxRampHold bounds a ramp step's minHold: a ramp of 16 steps at the
	// bound still ends within about a year.
	MaxRampHold = 30 * 24 * time.Hour
	// StateReserveBytes is the room MaxSpecBytes keeps for what allotd
	// writes into a document (rampState, rollback, assignmentRevision)
	// after the admin API
	// accepted it, so a state write never makes a document larger than
	// the store carries (TestStateFitsReserve).
	StateReserveBytes = 1 << 10
	// MaxActorBytes bounds the name of a caller (ActorNameProblem).
	MaxActorBytes = 128
	// MaxAcknowledgedByBytes bounds rollback.acknowledgedBy, the name of
	// the caller who acknowledged a rollback (Acknowledge records only a
	// name ActorNameProblem accepts).
	MaxAcknowledgedByBytes = MaxActorBytes
	// MaxDocumentBytes is the largest document an owner may write, as
	// DocumentBytes counts it: MaxSpecBytes less StateReserveBytes.
	MaxDocumentBytes = MaxSpecBytes - StateReserveBytes
)

// DocumentBytes is the size of e as the store keeps it (compact proto3
// JSON without output-only metadata), counted with the longest status
// ("running") and without the state allotd writes (rampState, rollback),
// so that no status transition makes a larger document than CheckBounds
// accepted and a state write adds at most StateReserveBytes.
func DocumentBytes(e *experimentv1.Experiment) (int, error) {
	d := Spec(e)
	d.Status = StatusRunning
	ClearState(d)
	b, err := protojson.Marshal(d)
	if err != nil {
		return 0, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return 0, err
	}
	return buf.Len(), nil
}

// CheckBounds lists every bound of the document e breaks, each as
// "path: message".
func CheckBounds(e *experimentv1.Experiment) []string {
	var details []string
	over := func(field string, n, limit int, unit string) {
		if n > limit {
			details = append(details, fmt.Sprintf("%s: %d %s, limit %d", field, n, unit, limit))
		}
	}
	if n, err := DocumentBytes(e); err != nil {
		details = append(details, "experiment: not encodable as JSON: "+err.Error())
	} else {
		over("experiment", n, MaxDocumentBytes, "bytes as compact JSON (with the longest status)")
	}
	over("description", len(e.GetDescription()), MaxDescriptionBytes, "bytes")
	over("owner", len(e.GetOwner()), MaxOwnerBytes, "bytes")
	over("services", len(e.GetServices()), MaxServices, "services")
	over("variations", len(e.GetVariations()), MaxVariations, "variations")
	for i, v := range e.GetVariations() {
		if value, err := HeaderValue(v); err == nil {
			over("variations["+strconv.Itoa(i)+"]", len(value), MaxVariationValueBytes, "bytes as a header value")
		} // an invalid one is the engine's to report
	}
	over("hashAttribute", len(e.GetHashAttribute()), MaxAttributeNameBytes, "bytes")
	over("fallbackAttribute", len(e.GetFallbackAttribute()), MaxAttributeNameBytes, "bytes")
	over("seed", len(e.GetSeed()), MaxSeedBytes, "bytes")
	over("guardrails", len(e.GetGuardrails()), MaxGuardrails, "guardrails")
	over("ramp.steps", len(e.GetRamp().GetSteps()), MaxRampSteps, "steps")
	return details
}

// HeaderValue is a variation's header value as the filter renders it
// (engine.RenderVariation).
func HeaderValue(v *structpb.Value) (string, error) {
	raw, err := protojson.Marshal(v)
	if err != nil {
		return "", err
	}
	return engine.RenderVariation(raw)
}

// ServiceNameProblem says what makes name unusable as a service — an entry
// of an experiment's services, or the cluster a proxy presents — or returns
// "": empty, longer than MaxServiceNameBytes, or not valid UTF-8 without
// the characters JSON escapes (control characters, '"', '\\', '<', '>',
// '&', U+2028, U+2029), which keeps every record that lists clusters in
// the mesh registry of a bounded size.
func ServiceNameProblem(name string) string {
	switch {
	case name == "":
		return "empty service name"
	case len(name) > MaxServiceNameBytes:
		return fmt.Sprintf("%d bytes, limit %d", len(name), MaxServiceNameBytes)
	case !utf8.ValidString(name) || strings.ContainsFunc(name, escaped):
		return "not valid UTF-8 or contains a character JSON escapes (control, '\"', '\\', '<', '>', '&', U+2028, U+2029)"
	}
	return ""
}

// ActorNamePattern is the one rule for the name of a caller: a token's
// name in allotd's tokens file (admin.ParseTokens) and allotd's own actors.
// It is ASCII that JSON never escapes, at most MaxActorBytes, so that the
// audit history and rollback.acknowledgedBy record a caller exactly and
// within StateReserveBytes.
const ActorNamePattern = `^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`

var actorName = regexp.MustCompile(ActorNamePattern)

// ActorNameProblem says what makes name unusable as the name of a caller
// (ActorNamePattern, which holds it within MaxActorBytes), or returns "".
func ActorNameProblem(name string) string {
	switch {
	case actorName.MatchString(name):
		return ""
	case name == "":
		return "empty name"
	}
	return fmt.Sprintf("%q, want %s: 1 to %d letters, digits and . _ : @ -, starting with a letter or digit", name, ActorNamePattern, MaxActorBytes)
}

// escaped reports whether JSON encoding escapes r.
func escaped(r rune) bool {
	return r < 0x20 || r == 0x7f || r == '"' || r == '\\' || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029'
}
