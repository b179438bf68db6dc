package main

// testToken is the admin token of the allotd the tests start
// (writeStartFiles).
const testToken = "allotd-test-token-0123456789"
