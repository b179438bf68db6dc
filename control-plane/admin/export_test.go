package admin

// ErrorOf is toError, for the external tests.
var ErrorOf = toError
