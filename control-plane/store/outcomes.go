package store

// OutcomeRecord is one replica's outcome figures of an observed
// experiment as records shared by replicas hold them (control-plane/outcomes/etcd): its
// total since the experiment's assignment revision (Minute 0), or one
// minute's tallies. Value is encoded by the control plane's outcomes
// package; the store keeps it as it is.
type OutcomeRecord struct {
	// Key is the experiment's key.
	Key string
	// Replica is the id of the replica that counted the figures;
	// RetiredReplica for the totals folded from replicas no longer live.
	Replica string
	// Minute is the Unix minute of a minute's tallies; 0 for the total.
	Minute int64
	// Value is the encoded figures; nil in a write deletes the record.
	Value []byte
	// Mod is the store revision of the record's last write; 0 when the
	// record is absent. In a write it is the revision the record must
	// still have (compare-and-swap; 0: the record must be absent).
	Mod int64
}

// RetiredReplica is the Replica of the record of an experiment's totals
// folded from replicas that are no longer live.
const RetiredReplica = ""
