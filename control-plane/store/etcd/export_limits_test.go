package etcd

// MaxTxnBytes is the most one registry transaction puts (maxTxnBytes).
const MaxTxnBytes = maxTxnBytes

// MaxPartBytes bounds a part of a shard of proxy records (maxPartBytes).
const MaxPartBytes = maxPartBytes

// ShardOf is the shard of a node's records (shardOf).
func ShardOf(node string) int { return shardOf(node) }
