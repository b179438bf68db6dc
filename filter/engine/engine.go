package engine

// Experiment is one experiment definition as a proxy evaluates it:
// GrowthBook's experiment model. What only the control plane acts on
// (status, schedule, owner, services, description) is not part of it: the
// control plane sends running experiments only. It has no JSON form of its
// own: filter/config decodes it from the FilterConfig contract (its JSON
// field names are config.proto's).
type Experiment struct {
	// Key names the experiment; it becomes a header-name suffix, so it must
	// match ^[a-z][a-z0-9._-]{0,62}$ and be unique in a Config.
	Key string
	// Variations are the variation values (header values): strings, or
	// numbers and booleans rendered canonically (1, 1.5, true). At least two.
	Variations []RawMessage
	// Weights split traffic between variations; they must sum to 1.
	// Absent means equal weights.
	Weights []float64
	// Coverage is the fraction of units included, in [0, 1]; absent means 1.
	Coverage *float64
	// HashAttribute is the attribute hashed to bucket a unit; default "id".
	HashAttribute string
	// FallbackAttribute is hashed when HashAttribute is missing or empty.
	FallbackAttribute string
	// HashVersion selects GrowthBook's hash: 1 (default) or 2.
	HashVersion int
	// Seed is hashed with the attribute value; default Key.
	Seed string
	// Namespace is [id, start, end]: only units whose namespace hash falls
	// in [start, end) are eligible (for mutually exclusive experiments).
	Namespace RawMessage
	// Condition is a GrowthBook targeting condition over attributes.
	Condition RawMessage
	// Force, when set, serves that variation index to every eligible unit.
	Force *int
	// Filters is a list of {seed, ranges, attribute, hashVersion}: a unit is
	// eligible only if it lands in some range of every filter. Filters
	// replace Namespace.
	Filters RawMessage
	// Ranges give each variation's bucket range directly, replacing
	// Weights and Coverage.
	Ranges [][]float64
	// BucketVersion is the version of the experiment's sticky buckets
	// (see AssignSticky): a stored assignment is reused only when it was
	// made for this version. At least 0.
	BucketVersion int
	// MinBucketVersion excludes a unit holding a sticky bucket of an older
	// version (below it) from the experiment. In [0, BucketVersion].
	MinBucketVersion int
	// DisableStickyBucketing makes the experiment ignore stored sticky
	// buckets and record none.
	DisableStickyBucketing bool
	// Observe asks the filter to count the outcomes of the experiment's
	// assigned requests per variation. The engine does not read it: it is
	// the one field here that is not evaluated, carried beside the
	// definition so that one decoder reads the whole experiment.
	Observe bool
	// AssignmentRevision numbers the experiment's assignment revisions (the
	// control plane's): the filter tags its outcome stats with it. Like
	// Observe, the engine does not read it. At least 0.
	AssignmentRevision int64
}

// Filter is one element of Experiment.Filters.
type Filter struct {
	// Attribute is hashed; default "id".
	Attribute string `json:"attribute,omitempty"`
	// Seed is hashed with the attribute value.
	Seed string `json:"seed"`
	// HashVersion is 1 or 2; default 2 (as in GrowthBook).
	HashVersion int `json:"hashVersion,omitempty"`
	// Ranges are [start, end) ranges; the hash must fall in one of them.
	Ranges [][]float64 `json:"ranges"`
}

// Config is everything Compile needs: the experiments and the saved groups
// their conditions may reference with $inGroup / $notInGroup.
type Config struct {
	Experiments []Experiment          `json:"experiments"`
	SavedGroups map[string]RawMessage `json:"savedGroups,omitempty"`
}

// Attributes are a unit's attribute values, JSON-typed (string, float64,
// bool, nil, []any, map[string]any). The filter passes strings only.
type Attributes map[string]any

// Assignment is the result of evaluating one experiment for one unit.
type Assignment struct {
	// Key is the experiment key.
	Key string
	// VariationID indexes the variations; 0 when not in the experiment.
	VariationID int
	// Value is the rendered variation (the header value); the first
	// variation's when not in the experiment, as in GrowthBook.
	Value string
	// InExperiment reports whether the unit is included.
	InExperiment bool
	// HashUsed reports whether the variation came from the hash (false when
	// forced or not included).
	HashUsed bool
	// StickyBucketUsed reports whether a stored sticky bucket decided: the
	// unit kept its stored variation, or was excluded because its bucket
	// is of a version below MinBucketVersion (AssignSticky only).
	StickyBucketUsed bool
	// HashAttribute is the attribute whose value was (or would be) hashed.
	HashAttribute string
	// HashValue is the value that was (or would be) hashed; empty if missing.
	HashValue string
}

// Set is a compiled, immutable set of experiments, safe for concurrent use.
type Set struct {
	// conds counts the distinct conditions (by compacted JSON); experiments
	// sharing a condition share its id, and Assign evaluates it at most once.
	conds int
	exps  []compiled
	keys  []string
	refs  []string // sorted attribute names
	slots []string // attribute names by slot index
	// refSlot[i] is the slot of refs[i].
	refSlot []int
	// condRefs are the sorted top-level names conditions read; byCond[id]
	// is the condition with that id.
	condRefs []string
	byCond   []*Condition
	// gate[i] is what AssignStrings checks before it reads experiment i:
	// gateOpen (no condition), gateShut (never assigns: fewer than two
	// variations) or the id of its condition, whose outcome
	// decides. A request's excluded experiments then cost a 4-byte read
	// each, not a call that reads their compiled form (natively a cold
	// request with 50 experiments 12% faster; in Envoy below what
	// bench-compare resolves: bench/README.md).
	gate []int32
	// stickySlots are the slots of GrowthBook's sticky-bucket identifier
	// attributes: every experiment's hash and fallback attribute. Only
	// their documents are read.
	stickySlots []int
}

// Gate values besides condition ids.
const (
	gateOpen int32 = -1
	gateShut int32 = -2
)

// compiled is one experiment, ready to evaluate.
type compiled struct {
	key          string
	values       []string
	ranges       [][2]float64
	hashAttr     string
	fallbackAttr string
	hashSlot     int
	fallbackSlot int // -1 without a fallback attribute
	hashVersion  int
	seed         string
	seedState    uint32 // fnv1a(offset, seed): hash version 2's prefix
	hasNS        bool
	hasForce     bool
	nsID         string
	nsStart      float64
	nsEnd        float64
	cond         *Condition
	condID       int // index of cond among the set's distinct conditions
	force        int
	filters      []compiledFilter
	// sticky is the experiment's sticky bucketing, nil when disabled; apart,
	// so that the path without sticky buckets reads no more of an
	// experiment than before (inline, AssignStrings measured 3% slower).
	sticky *stickyBucketing
}

type compiledFilter struct {
	attr        string
	slot        int
	seed        string
	seedState   uint32
	hashVersion int
	ranges      [][2]float64
}

// FieldError is one validation problem at a field path such as
// "experiments[2].weights".
type FieldError struct {
	Path    string
	Message string
}

// Error implements error as "path: message".
func (e *FieldError) Error() string { return e.Path + ": " + e.Message }
