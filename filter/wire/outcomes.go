package wire

import (
	"strconv"
	"strings"
)

// Outcome classes: what became of a request an observed experiment
// assigned, by its response's :status. Their order is the order of each
// variation's counters and of the native module's stat ids.
const (
	Class2xx   = iota // :status 200–299
	Class3xx          // 300–399
	Class4xx          // 400–499
	Class5xx          // 500–599
	ClassOther        // any other :status (101 Switching Protocols, say)
	// ClassAborted: the stream ended before response headers reached the
	// filter, which only the downstream side does (the client gave up,
	// reset the stream or closed its connection): Envoy answers every
	// failure between the proxy and the service before the response
	// headers (connection failure, upstream reset, timeout) with a 5xx
	// local reply, which the filter sees as a 5xx.
	ClassAborted
	// NumClasses is the number of classes.
	NumClasses
)

// Latency stands, where OutcomeMetric and ParseOutcomeMetric take a class,
// for a variation's latency histogram: the milliseconds from the request
// headers to the response headers.
const Latency = -1

// classNames name the classes in stat names.
var classNames = [NumClasses]string{"2xx", "3xx", "4xx", "5xx", "other", "aborted"}

// ClassName is the name of class in stat names ("2xx", …, "aborted").
func ClassName(class int) string { return classNames[class] }

// StatusClass is the class of a response whose :status is status.
func StatusClass(status string) int {
	if len(status) != 3 || status[1] < '0' || status[1] > '9' || status[2] < '0' || status[2] > '9' {
		return ClassOther
	}
	switch status[0] {
	case '2':
		return Class2xx
	case '3':
		return Class3xx
	case '4':
		return Class4xx
	case '5':
		return Class5xx
	}
	return ClassOther
}

// RevisionSlots is how many assignment revisions of one experiment have
// outcome stats of their own in a proxy: a revision's stats carry its
// number modulo RevisionSlots (RevisionSlot), so that a proxy defines at
// most RevisionSlots × 7 stats per observed variation however many
// revisions come and go, and allotd tells the revisions it keeps apart as
// long as it keeps fewer (outcomes.MaxRevisions).
const RevisionSlots = 32

// RevisionSlot is the slot of assignment revision rev in outcome stat names.
func RevisionSlot(rev int64) int { return int(uint64(rev) % RevisionSlots) }

// LatencyBounds are the upper bounds (ms) of the buckets of the
// response_time_ms histogram: Envoy's default histogram buckets, which the
// bootstraps keep (no histogram_bucket_settings). allotd sums every
// proxy's samples into them and drops a histogram with other bounds.
var LatencyBounds = []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000}

// The parts of an outcome stat's name.
const (
	outcomeHead    = "allot.experiment."
	outcomeRev     = ".rev."
	outcomeVar     = ".variation."
	outcomeClass   = ".response."
	outcomeLatency = ".response_time_ms"
)

// OutcomeMetric names an outcome stat of the requests that assignment
// revision rev of experiment key assigned variation v: the counter of
// responses of class,
// allot.experiment.<key>.rev.<slot>.variation.<v>.response.<class>, or,
// for class Latency, the histogram
// allot.experiment.<key>.rev.<slot>.variation.<v>.response_time_ms; slot
// is RevisionSlot(rev). ParseOutcomeMetric reads it back.
func OutcomeMetric(key string, rev int64, v, class int) string {
	head := outcomeHead + key + outcomeRev + strconv.Itoa(RevisionSlot(rev)) + outcomeVar + strconv.Itoa(v)
	if class == Latency {
		return head + outcomeLatency
	}
	return head + outcomeClass + classNames[class]
}

// ParseOutcomeMetric reads an outcome stat's name (as OutcomeMetric builds
// it, without the Namespace) back into its experiment key, revision slot,
// variation and class (Latency for the histogram); ok is false for any
// other name. It reads from the right, so a key may hold any characters.
func ParseOutcomeMetric(name string) (key string, slot, v, class int, ok bool) {
	rest, ok := strings.CutPrefix(name, outcomeHead)
	if !ok {
		return "", 0, 0, 0, false
	}
	if head, found := strings.CutSuffix(rest, outcomeLatency); found {
		rest, class = head, Latency
	} else {
		i := strings.LastIndex(rest, outcomeClass)
		if i < 0 {
			return "", 0, 0, 0, false
		}
		class = -2
		for c, n := range classNames {
			if rest[i+len(outcomeClass):] == n {
				class = c
			}
		}
		if class == -2 {
			return "", 0, 0, 0, false
		}
		rest = rest[:i]
	}
	rest, v, ok = cutNumber(rest, outcomeVar)
	if !ok {
		return "", 0, 0, 0, false
	}
	key, slot, ok = cutNumber(rest, outcomeRev)
	if !ok || key == "" || slot >= RevisionSlots {
		return "", 0, 0, 0, false
	}
	return key, slot, v, class, true
}

// cutNumber splits s at its last sep into what precedes it and the
// decimal number that follows (digits only, no sign).
func cutNumber(s, sep string) (before string, n int, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return "", 0, false
	}
	digits := s[i+len(sep):]
	if digits == "" || strings.TrimLeft(digits, "0123456789") != "" || len(digits) > 1 && digits[0] == '0' {
		return "", 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil {
		return "", 0, false
	}
	return s[:i], n, true
}
