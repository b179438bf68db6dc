package admin

import (
	"maps"
	"math/bits"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// appendRolloutJSON appends ro as the HTTP API writes every message —
// protojson's encoding (jsonOut), compacted — without protojson's
// reflection: GET /v1/rollout lists every proxy of the mesh, and encoding
// 10,000 of them through protojson cost a replica about 50 ms of CPU and
// 25 MB of garbage (docs/perf/fleet-scale.md, seventh pass).
// It declines (ok false) what it does not encode exactly as protojson
// would — a string that is not UTF-8, a time outside protojson's range —
// and the caller encodes ro with protojson instead. TestRolloutJSON holds
// it to protojson, field by field.
func appendRolloutJSON(b []byte, ro *adminv1.Rollout) (_ []byte, ok bool) {
	e := jsonEnc{b: b, ok: true}
	var m members
	e.open()
	e.str(&m, "result", ro.GetResult())
	e.str(&m, "error", ro.GetError())
	jsonMap(&e, &m, "targets", ro.GetTargets(), e.quote)
	jsonList(&e, &m, "proxies", ro.GetProxies(), e.proxy)
	jsonList(&e, &m, "replicas", ro.GetReplicas(), e.replica)
	jsonMap(&e, &m, "counts", ro.GetCounts(), func(n int32) { e.b = strconv.AppendInt(e.b, int64(n), 10) })
	e.b = append(e.b, '}')
	return e.b, e.ok
}

// proxy appends one ProxyStatus, its fields in declaration order, the
// unset ones left out (jsonOut does not emit unpopulated fields).
func (e *jsonEnc) proxy(p *adminv1.ProxyStatus) {
	var m members
	e.open()
	e.str(&m, "nodeId", p.GetNodeId())
	e.str(&m, "cluster", p.GetCluster())
	e.str(&m, "address", p.GetAddress())
	e.str(&m, "state", p.GetState())
	e.str(&m, "targetVersion", p.GetTargetVersion())
	e.str(&m, "sentVersion", p.GetSentVersion())
	e.str(&m, "ackedVersion", p.GetAckedVersion())
	e.str(&m, "rejectedVersion", p.GetRejectedVersion())
	e.str(&m, "rejectionError", p.GetRejectionError())
	e.integer(&m, "pushes", int64(p.GetPushes()))
	e.timestamp(&m, "connectTime", p.GetConnectTime())
	e.timestamp(&m, "lastSeen", p.GetLastSeen())
	e.timestamp(&m, "ackedTime", p.GetAckedTime())
	e.str(&m, "artifact", p.GetArtifact())
	e.str(&m, "error", p.GetError())
	e.str(&m, "replica", p.GetReplica())
	e.b = append(e.b, '}')
}

// replica appends one ReplicaStatus.
func (e *jsonEnc) replica(r *adminv1.ReplicaStatus) {
	var m members
	e.open()
	e.str(&m, "id", r.GetId())
	e.str(&m, "adminAddr", r.GetAdminAddr())
	e.str(&m, "xdsAddr", r.GetXdsAddr())
	if v := r.GetRevision(); v != 0 { // an int64: a JSON string
		e.key(&m, "revision")
		e.b = append(e.b, '"')
		e.b = strconv.AppendInt(e.b, v, 10)
		e.b = append(e.b, '"')
	}
	e.integer(&m, "proxies", int64(r.GetProxies()))
	e.b = append(e.b, '}')
}

// jsonList appends member k, the array of xs (each appended by each),
// unless xs is empty.
func jsonList[T any](e *jsonEnc, m *members, k string, xs []T, each func(T)) {
	if len(xs) == 0 {
		return
	}
	e.key(m, k)
	e.b = append(e.b, '[')
	for i, x := range xs {
		e.sep(i)
		each(x)
	}
	e.b = append(e.b, ']')
}

// jsonMap appends member k, the object of kv's entries sorted by key (as
// protojson writes a map; each appends a value), unless kv is empty.
func jsonMap[V any](e *jsonEnc, m *members, k string, kv map[string]V, each func(V)) {
	if len(kv) == 0 {
		return
	}
	e.key(m, k)
	e.open()
	for i, key := range slices.Sorted(maps.Keys(kv)) {
		e.sep(i)
		e.quote(key)
		e.b = append(e.b, ':')
		each(kv[key])
	}
	e.b = append(e.b, '}')
}

// jsonEnc appends JSON; ok turns false on anything protojson would encode
// otherwise, or refuse.
type jsonEnc struct {
	b  []byte
	ok bool
}

// members counts an object's members written so far.
type members int

func (e *jsonEnc) open() { e.b = append(e.b, '{') }

// sep separates the i-th element of an array or map from the one before.
func (e *jsonEnc) sep(i int) {
	if i > 0 {
		e.b = append(e.b, ',')
	}
}

func (e *jsonEnc) key(m *members, k string) {
	e.sep(int(*m))
	*m++
	e.b = append(e.b, '"')
	e.b = append(e.b, k...)
	e.b = append(e.b, '"', ':')
}

func (e *jsonEnc) str(m *members, k, v string) {
	if v != "" {
		e.key(m, k)
		e.quote(v)
	}
}

func (e *jsonEnc) integer(m *members, k string, v int64) {
	if v != 0 {
		e.key(m, k)
		e.b = strconv.AppendInt(e.b, v, 10)
	}
}

// Timestamps protojson encodes: from 0001-01-01 to 9999-12-31 UTC.
const (
	minTimestampSeconds = -62135596800
	maxTimestampSeconds = 253402300799
)

// timestamp appends t as protojson does: RFC 3339 in UTC, with 0, 3, 6 or 9
// digits of fraction.
func (e *jsonEnc) timestamp(m *members, k string, t *timestamppb.Timestamp) {
	if t == nil {
		return
	}
	s, n := t.GetSeconds(), t.GetNanos()
	if s < minTimestampSeconds || s > maxTimestampSeconds || n < 0 || n > 999_999_999 {
		e.ok = false
		return
	}
	e.key(m, k)
	e.b = append(e.b, '"')
	e.b = time.Unix(s, int64(n)).UTC().AppendFormat(e.b, "2006-01-02T15:04:05")
	if n != 0 {
		digits := 9
		for digits > 3 && n%1000 == 0 {
			n /= 1000
			digits -= 3
		}
		e.b = append(e.b, '.')
		var frac [9]byte // n's digits, zero-padded to digits
		for i := digits - 1; i >= 0; i-- {
			frac[i] = byte('0' + n%10)
			n /= 10
		}
		e.b = append(e.b, frac[:digits]...)
	}
	e.b = append(e.b, 'Z', '"')
}

// quote appends s as a JSON string, escaped as protojson escapes it: '"',
// '\\' and the control characters, nothing else. A string that is not
// UTF-8 turns ok false (protojson refuses it).
func (e *jsonEnc) quote(s string) {
	e.b = append(e.b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= ' ' && c != '"' && c != '\\' && c < utf8.RuneSelf {
			e.b = append(e.b, c)
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				e.ok = false
			}
			e.b = append(e.b, s[i:i+n]...)
			i += n
			continue
		}
		e.b = append(e.b, '\\')
		switch c {
		case '"', '\\':
			e.b = append(e.b, c)
		case '\b':
			e.b = append(e.b, 'b')
		case '\f':
			e.b = append(e.b, 'f')
		case '\n':
			e.b = append(e.b, 'n')
		case '\r':
			e.b = append(e.b, 'r')
		case '\t':
			e.b = append(e.b, 't')
		default: // \u then the code in hex, without leading zeros past four digits
			e.b = append(e.b, 'u')
			e.b = append(e.b, "0000"[1+(bits.Len32(uint32(c))-1)/4:]...)
			e.b = strconv.AppendUint(e.b, uint64(c), 16)
		}
		i++
	}
	e.b = append(e.b, '"')
}
