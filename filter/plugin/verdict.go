package plugin

// Verdict is what a request callback tells its adapter to do with the
// stream. A request the filter assigns continues; an OFREP request (issue
// #45: the filter answers OpenFeature's remote evaluation protocol itself,
// where the configuration enables it) waits for its body, then is answered
// with a local reply and goes no further.
type Verdict uint8

const (
	// Continue passes the request on, its headers as the plugin left them.
	Continue Verdict = iota
	// AwaitBody holds the request while its body arrives: the adapter
	// buffers it and calls RequestBody as it comes, the last time with
	// endOfStream set.
	AwaitBody
	// Answered means the plugin sent a local reply (LocalReplier): the
	// adapter stops the stream's request path.
	Answered
)

// LocalReplier is a Host that answers a request itself, its body read:
// both adapters are one. The plugin uses it only for the requests it
// answers (an OFREP evaluation), never for a request it assigns.
type LocalReplier interface {
	// RequestBody returns the request body buffered so far; after the
	// last body callback (endOfStream), the whole body. The slice is valid
	// until the next call.
	RequestBody() ([]byte, error)
	// SendLocalReply answers the request with status, headers and body;
	// the request reaches no upstream.
	SendLocalReply(status uint32, headers [][2]string, body []byte) error
}
