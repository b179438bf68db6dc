//go:build wasip1 && !allot_noresponse

package abi

// proxy_on_response_headers carries sticky bucketing's Set-Cookie. A
// module cannot export a callback for some configurations only, so every
// stream of every mesh pays this crossing; make bench measures it against
// a build without it (tag allot_noresponse, which the benchmark alone
// uses).

//go:wasmexport proxy_on_response_headers
func onResponseHeaders(id, numHeaders, endOfStream uint32) uint32 {
	if handler == nil {
		return uint32(ActionContinue)
	}
	return uint32(handler.OnResponseHeaders(id, int(numHeaders), endOfStream != 0))
}
