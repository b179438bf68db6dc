package etcd

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/allotmesh/allot/control-plane/rollout"
)

// A replica's proxies' acknowledgements — what a rollout changes for every
// proxy — are kept apart from their records, which change only when a
// proxy connects, disconnects, is left unserved or rejects a version. They
// live in a few compact records per replica, mesh/acks/<replica>/<part>:
// the replica's proxies sorted by stream, maxAcksPerPart to a part, each as
// three numbers. A publish after ACKs rewrites those few records (about 20
// bytes a proxy) instead of every shard of proxy records (about 300 bytes a
// proxy, JSON-encoded one by one): what made etcd's share of a rollout
// grow with the fleet.

// maxAcksPerPart bounds a part of the acknowledgements: at most 3 numbers
// of at most 20 digits and a comma each per proxy, and the versions they
// name (xds.MaxVersionBytes each, at most one per proxy), so that a part
// stays far under etcd's request limit whatever the proxies send.
const maxAcksPerPart = 2048

// acksRecord is what mesh/acks/<replica>/<part> holds.
type acksRecord struct {
	// Versions are the versions the part's proxies acknowledged.
	Versions []string `json:"versions"`
	// Base is the earliest acknowledgement's time, in µs since the epoch.
	Base int64 `json:"base"`
	// Entries are three numbers per proxy: its stream, 1 + the index in
	// Versions of the version it acknowledged last (0: none yet), and when,
	// in µs after Base (0 with none).
	Entries []int64 `json:"entries"`
}

// ack is a proxy's last acknowledgement, as a part holds it; mod is the
// part's etcd revision when read.
type ack struct {
	stream  int64
	version string
	at      time.Time
	mod     int64
}

// encodeAcks encodes acks (sorted by stream) as one part. It appends the
// numbers itself: encoding/json would go through reflection for each.
func encodeAcks(acks []ack) (string, error) {
	var versions []string
	index := map[string]int{}
	base := int64(0)
	for _, a := range acks {
		if a.version == "" {
			continue
		}
		if _, ok := index[a.version]; !ok {
			index[a.version] = len(versions)
			versions = append(versions, a.version)
		}
		if us := a.at.UnixMicro(); base == 0 || us < base {
			base = us
		}
	}
	vs, err := json.Marshal(versions)
	if err != nil {
		return "", fmt.Errorf("encode acknowledged versions: %w", err)
	}
	b := make([]byte, 0, len(vs)+32+len(acks)*20)
	b = append(b, `{"versions":`...)
	b = append(b, vs...)
	b = append(b, `,"base":`...)
	b = strconv.AppendInt(b, base, 10)
	b = append(b, `,"entries":[`...)
	for i, a := range acks {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, a.stream, 10)
		if a.version == "" {
			b = append(b, ",0,0"...)
			continue
		}
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(index[a.version]+1), 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, a.at.UnixMicro()-base, 10)
	}
	b = append(b, "]}"...)
	return string(b), nil
}

// decodeAcks decodes a part, written at etcd revision mod, into the
// acknowledgements it holds by stream. A stream two parts list (while a
// publish that moved it between parts commits) keeps the newer part's.
func decodeAcks(b []byte, mod int64, into map[int64]ack) error {
	var rec acksRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return err
	}
	if len(rec.Entries)%3 != 0 {
		return fmt.Errorf("%d numbers, want three per proxy", len(rec.Entries))
	}
	for i := 0; i < len(rec.Entries); i += 3 {
		stream, v, off := rec.Entries[i], rec.Entries[i+1], rec.Entries[i+2]
		if v < 0 || v > int64(len(rec.Versions)) {
			return fmt.Errorf("stream %d: version %d of %d", stream, v, len(rec.Versions))
		}
		a := ack{stream: stream, mod: mod}
		if v > 0 {
			a.version, a.at = rec.Versions[v-1], time.UnixMicro(rec.Base+off).UTC()
		}
		if was, ok := into[stream]; !ok || was.mod <= mod {
			into[stream] = a
		}
	}
	return nil
}

// cutAcks encodes acks (sorted by stream) as parts of maxAcksPerPart.
func cutAcks(acks []ack) ([]string, error) {
	var parts []string
	for chunk := range slices.Chunk(acks, maxAcksPerPart) {
		v, err := encodeAcks(chunk)
		if err != nil {
			return nil, err
		}
		parts = append(parts, v)
	}
	return parts, nil
}

// acksPrefix is every replica's parts' prefix, ownAcks the replica's.
func (g *Registry) acksPrefix() string { return g.kv.Key("mesh/acks/") }
func (g *Registry) ownAcks() string    { return g.acksPrefix() + url.PathEscape(g.id) + "/" }

func (g *Registry) acksKey(part int) string { return g.ownAcks() + strconv.Itoa(part) }

// acksReplica is the replica of a part's key.
func (g *Registry) acksReplica(key string) (string, bool) {
	id, _, ok := strings.Cut(strings.TrimPrefix(key, g.acksPrefix()), "/")
	if !ok {
		return "", false
	}
	id, err := url.PathUnescape(id)
	return id, err == nil
}

// withAcks sets each proxy's acknowledgement from its replica's parts
// (acks: replica → stream → ack). A proxy its replica's parts do not list
// keeps what its record says (the layout before the parts put it there).
func withAcks(p *rollout.Proxy, acks map[string]map[int64]ack) {
	if a, ok := acks[p.Replica][p.Stream]; ok {
		p.Acked, p.AckedAt = a.version, a.at
	}
}

// sharedStreams are the stream numbers more than one of proxies has. The
// xDS server numbers its streams once each, so a stream names a proxy's
// acknowledgement in the parts; a proxy whose number another shares keeps
// its acknowledgement in its own record, as before the parts.
func sharedStreams(proxies []rollout.Proxy) map[int64]bool {
	seen := make(map[int64]bool, len(proxies))
	var shared map[int64]bool
	for _, p := range proxies {
		if seen[p.Stream] {
			if shared == nil {
				shared = map[int64]bool{}
			}
			shared[p.Stream] = true
		}
		seen[p.Stream] = true
	}
	return shared
}
