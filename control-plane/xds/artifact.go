package xds

import (
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// Wire names shared with the bootstraps in envoy-configs/: a proxy says
// which build of the filter it runs in its node metadata.
const (
	// ArtifactKey is the Envoy node metadata key naming the filter artifact
	// a proxy runs (node.metadata["allot.artifact"]).
	ArtifactKey = "allot.artifact"
	// ArtifactWasm is the proxy-wasm module (bin/allot.wasm) in Envoy's Wasm
	// filter. A proxy whose node metadata has no ArtifactKey runs it.
	ArtifactWasm = "wasm"
	// ArtifactNative is the Envoy dynamic module (bin/liballot.so) in
	// Envoy's dynamic module filter.
	ArtifactNative = "native"
)

// Artifacts are the artifacts a Server made by NewArtifacts serves.
var Artifacts = []string{ArtifactWasm, ArtifactNative}

// nodeArtifact returns the artifact node's metadata names: ArtifactWasm
// when ArtifactKey is absent, its value when it is a string, and an error
// naming the value otherwise. Whether the server serves it is not checked.
func nodeArtifact(node *corev3.Node) (string, error) {
	v, ok := node.GetMetadata().GetFields()[ArtifactKey]
	if !ok {
		return ArtifactWasm, nil
	}
	if s, ok := v.GetKind().(*structpb.Value_StringValue); ok {
		return s.StringValue, nil
	}
	js, err := protojson.Marshal(v)
	if err != nil {
		js = []byte(v.String())
	}
	return string(js), fmt.Errorf("node metadata %s is %s, want a string", ArtifactKey, js)
}

// unservedKey is the snapshot key of every proxy whose artifact the server
// does not serve. No snapshot is ever set for it, so the snapshot cache
// holds such a proxy's requests unanswered: it gets no configuration.
const unservedKey = "\x00unserved"

// snapshotKey names the snapshot of cluster's proxies running artifact.
// Artifact names contain no "/", so the first "/" ends the artifact.
func snapshotKey(artifact, cluster string) string { return artifact + "/" + cluster }

// nodeHash groups proxies by the filter artifact they run and the Envoy
// node's cluster: proxies of one service running one artifact share a
// snapshot. Proxies whose artifact is not served share unservedKey.
type nodeHash struct{ served map[string]bool }

func (h nodeHash) ID(node *corev3.Node) string {
	a, err := nodeArtifact(node)
	if err != nil || !h.served[a] {
		return unservedKey
	}
	return snapshotKey(a, node.GetCluster())
}

// unservedReason says why a proxy running artifact a gets no configuration
// ("" when a is served); err is nodeArtifact's error.
func (h nodeHash) unservedReason(a string, err error, served []string) string {
	switch {
	case err != nil:
		return err.Error() + "; no filter configuration is sent"
	case !h.served[a]:
		return fmt.Sprintf("node metadata %s is %q, an artifact allotd does not serve (it serves %s); no filter configuration is sent",
			ArtifactKey, a, strings.Join(served, ", "))
	}
	return ""
}
