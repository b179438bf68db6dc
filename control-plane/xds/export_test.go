package xds

import (
	"time"

	"google.golang.org/grpc"
)

// Snapshots counts the snapshots the cache holds for clusters, every
// artifact's.
func Snapshots(s *Server, clusters []string) int {
	n := 0
	for _, c := range clusters {
		for _, a := range s.served {
			if _, err := s.cache.GetSnapshot(snapshotKey(a, c)); err == nil {
				n++
			}
		}
	}
	return n
}

// ClusterState counts the clusters the server keeps state of any kind for.
func ClusterState(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for c := range s.clusters {
		seen[c] = true
	}
	for c := range s.since {
		seen[c] = true
	}
	for c := range s.idle {
		seen[c] = true
	}
	return len(seen)
}

// ForgetIdle runs one pass of the forgetting of idle clusters now.
func ForgetIdle(s *Server) { s.forgetIdle() }

// Held counts the watches the cache holds although the snapshot cache
// would have answered them, and the node hashes it keeps.
func Held(s *Server) (watches, nodes int) { return s.cache.heldCount(), s.cache.heldNodes() }

// ServerOptionsWithin is ServerOptions with a first-request timeout of d.
func ServerOptionsWithin(d time.Duration) []grpc.ServerOption { return serverOptions(d) }
