package etcd

import "github.com/allotmesh/allot/control-plane/internal/etcdkv"

// MaxTxnBytes is the most one registry transaction puts (etcdkv.MaxTxnBytes).
const MaxTxnBytes = etcdkv.MaxTxnBytes

// MaxPartBytes bounds a part of a shard of proxy records (maxPartBytes).
const MaxPartBytes = maxPartBytes

// ShardOf is the shard of a node's records (shardOf).
func ShardOf(node string) int { return shardOf(node) }
