package etcd

// MaxTxnBytes is what the registry puts in one transaction beside the
// replica's record (maxTxnBytes).
const MaxTxnBytes = maxTxnBytes
