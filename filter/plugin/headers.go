package plugin

// DictionaryMember is an assignment of experiment key to variation value
// (its rendered header value) as an RFC 9651 dictionary member of the
// dictionary header, the separator included: `, key="value"`. The header's
// value is a request's members without the first separator.
func DictionaryMember(key, value string) string { return ", " + key + "=" + sfString(value) }

// AssignmentHeaderBytes is how many bytes of request headers (names and
// values, as Envoy counts a header map against its limit) the assignment of
// experiment key to variation value adds: its dictionary member and, with
// per-experiment headers, its own header prefix+key: value.
func AssignmentHeaderBytes(prefix, key, value string, perExperiment bool) int {
	n := len(DictionaryMember(key, value))
	if perExperiment {
		n += len(prefix) + len(key) + len(value)
	}
	return n
}

// HeaderBytes is how many bytes of request headers the filter adds to a
// request whose assignments add assigned bytes (the sum of their
// AssignmentHeaderBytes; 0 for none): those, the dictionary header's name
// when there is any (its value is the members less the first separator),
// and the version header.
func HeaderBytes(assigned int, dictionaryHeader, versionHeader, version string) int {
	n := 0
	if version != "" {
		n += len(versionHeader) + len(version)
	}
	if assigned > 0 {
		n += assigned + len(dictionaryHeader) - len(", ")
	}
	return n
}

// MaxHeaderBytes is the most bytes of request headers the filter adds to
// one request under c: every experiment assigned its longest variation.
func (c *Config) MaxHeaderBytes() int {
	sum := 0
	for i, key := range c.keys {
		most := 0
		for _, value := range c.values[i] {
			most = max(most, AssignmentHeaderBytes(c.HeaderPrefix, key, value, c.PerExperimentHeaders))
		}
		sum += most
	}
	return HeaderBytes(sum, c.DictionaryHeader, c.VersionHeader, c.Version)
}
