package admin

// ErrorOf is toError, for the external tests.
var ErrorOf = toError

// DocumentBytes is documentBytes, for the external tests.
var DocumentBytes = documentBytes
