// Package panics describes a recovered panic value for a log line, without
// fmt (which the Wasm module must not link). The filter's plugin and its
// native ABI layer both recover panics and log them with it.
package panics

// Message is v's text when v is an error or a string.
func Message(v any) string {
	switch v := v.(type) {
	case error:
		return v.Error()
	case string:
		return v
	default:
		return "non-error panic value"
	}
}
