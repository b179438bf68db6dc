package config

import (
	"encoding/base64"
	"strings"

	"github.com/allotmesh/allot/filter/engine"
)

// The schema: the fields of FilterConfig and its messages, with their
// types and where each decoded value goes.

// kind is the type of a field's value, as the descriptor test compares it
// with the proto's.
type kind uint8

const (
	kindString kind = iota
	kindBool
	kindInt32
	kindInt64
	kindDouble
	kindEnum
	kindMessage   // Experiment, Attribute, StickyCookie or SigningKey
	kindValue     // google.protobuf.Value
	kindStruct    // google.protobuf.Struct
	kindList      // google.protobuf.ListValue
	kindTimestamp // google.protobuf.Timestamp
	kindBytes     // bytes: base64 text
	kindUint32
)

// field is one field of a message: its two names, its type and, when the
// filter configuration must leave it at its default value, why. The
// message's setter (filterField, attributeField, experimentField) decodes
// the others, by JSON name.
type field struct {
	json, proto string
	kind        kind
	repeated    bool // a repeated field; with kindList in savedGroups, a map's values
	oneof       bool // in Attribute's oneof source
	reject      string
}

// Why an Experiment field is not part of the filter configuration.
const (
	controlPlaneOnly = "the control plane's field; proxies receive running experiments without it"
	outputOnly       = "output-only metadata the control plane keeps; proxies receive experiments without it"
)

// filterFields are FilterConfig's fields.
var filterFields = []field{
	{json: "version", proto: "version"},
	{json: "unitHeader", proto: "unit_header"},
	{json: "headerPrefix", proto: "header_prefix"},
	{json: "experiments", proto: "experiments", kind: kindMessage, repeated: true},
	{json: "savedGroups", proto: "saved_groups", kind: kindList, repeated: true},
	{json: "attributes", proto: "attributes", kind: kindMessage, repeated: true},
	{json: "dictionaryHeader", proto: "dictionary_header"},
	{json: "versionHeader", proto: "version_header"},
	{json: "cacheSize", proto: "cache_size", kind: kindInt32},
	{json: "disableExposureState", proto: "disable_exposure_state", kind: kindBool},
	{json: "assignmentHeaders", proto: "assignment_headers", kind: kindEnum},
	{json: "cacheMaxBytes", proto: "cache_max_bytes", kind: kindInt32},
	{json: "stickyCookie", proto: "sticky_cookie", kind: kindMessage},
	{json: "ofrep", proto: "ofrep", kind: kindMessage},
}

// ofrepFields are Ofrep's fields.
var ofrepFields = []field{
	{json: "enabled", proto: "enabled", kind: kindBool},
	{json: "maxBodyBytes", proto: "max_body_bytes", kind: kindUint32},
	{json: "corsAllowOrigins", proto: "cors_allow_origins", repeated: true},
}

// stickyCookieFields are StickyCookie's fields.
var stickyCookieFields = []field{
	{json: "name", proto: "name"},
	{json: "keys", proto: "keys", kind: kindMessage, repeated: true},
	{json: "path", proto: "path"},
	{json: "domain", proto: "domain"},
	{json: "maxAgeSeconds", proto: "max_age_seconds", kind: kindInt32},
	{json: "sameSite", proto: "same_site"},
	{json: "insecure", proto: "insecure", kind: kindBool},
	{json: "scriptReadable", proto: "script_readable", kind: kindBool},
}

// signingKeyFields are SigningKey's fields.
var signingKeyFields = []field{
	{json: "id", proto: "id"},
	{json: "secret", proto: "secret", kind: kindBytes},
}

// attributeFields are Attribute's fields.
var attributeFields = []field{
	{json: "name", proto: "name"},
	{json: "header", proto: "header", oneof: true},
	{json: "cookie", proto: "cookie", oneof: true},
	{json: "query", proto: "query", oneof: true},
	{json: "property", proto: "property", oneof: true},
}

// experimentFields are Experiment's fields: those the engine evaluates, then
// those the control plane keeps for itself and strips before any proxy sees
// them (experiment.Definition in the control plane).
var experimentFields = []field{
	{json: "key", proto: "key"},
	{json: "variations", proto: "variations", kind: kindValue, repeated: true},
	{json: "weights", proto: "weights", kind: kindDouble, repeated: true},
	{json: "coverage", proto: "coverage", kind: kindDouble},
	{json: "hashAttribute", proto: "hash_attribute"},
	{json: "fallbackAttribute", proto: "fallback_attribute"},
	{json: "hashVersion", proto: "hash_version", kind: kindInt32},
	{json: "seed", proto: "seed"},
	{json: "namespace", proto: "namespace", kind: kindList},
	{json: "condition", proto: "condition", kind: kindStruct},
	{json: "force", proto: "force", kind: kindInt32},
	{json: "filters", proto: "filters", kind: kindList},
	{json: "ranges", proto: "ranges", kind: kindList},
	{json: "bucketVersion", proto: "bucket_version", kind: kindInt32},
	{json: "minBucketVersion", proto: "min_bucket_version", kind: kindInt32},
	{json: "disableStickyBucketing", proto: "disable_sticky_bucketing", kind: kindBool},
	{json: "observe", proto: "observe", kind: kindBool},
	{json: "assignmentRevision", proto: "assignment_revision", kind: kindInt64},

	{json: "status", proto: "status", reject: controlPlaneOnly},
	{json: "description", proto: "description", reject: controlPlaneOnly},
	{json: "owner", proto: "owner", reject: controlPlaneOnly},
	{json: "services", proto: "services", repeated: true, reject: controlPlaneOnly},
	{json: "startTime", proto: "start_time", kind: kindTimestamp, reject: controlPlaneOnly},
	{json: "endTime", proto: "end_time", kind: kindTimestamp, reject: controlPlaneOnly},
	{json: "guardrails", proto: "guardrails", kind: kindMessage, repeated: true, reject: controlPlaneOnly},
	{json: "ramp", proto: "ramp", kind: kindMessage, reject: controlPlaneOnly},
	{json: "revision", proto: "revision", kind: kindInt64, reject: outputOnly},
	{json: "createTime", proto: "create_time", kind: kindTimestamp, reject: outputOnly},
	{json: "updateTime", proto: "update_time", kind: kindTimestamp, reject: outputOnly},
	{json: "createdBy", proto: "created_by", reject: outputOnly},
	{json: "updatedBy", proto: "updated_by", reject: outputOnly},
	{json: "rampState", proto: "ramp_state", kind: kindMessage, reject: outputOnly},
	{json: "rollback", proto: "rollback", kind: kindMessage, reject: outputOnly},
}

// set decodes v into the field of message m (a *Filter, *Attribute or
// *engine.Experiment) whose JSON name is name, and reports whether the
// message's setter knows the field. One setter per message, rather than a
// function per field or a generic decoder per message type, keeps the Wasm
// module small.
func (d *decoder) set(m any, name string, v any) bool {
	switch m := m.(type) {
	case *Filter:
		return d.filterField(m, name, v)
	case *Attribute:
		return d.attributeField(m, name, v)
	case *engine.Experiment:
		return d.experimentField(m, name, v)
	case *StickyCookie:
		return d.stickyCookieField(m, name, v)
	case *SigningKey:
		return d.signingKeyField(m, name, v)
	case *Ofrep:
		return d.ofrepField(m, name, v)
	}
	return false
}

func (d *decoder) stickyCookieField(c *StickyCookie, name string, v any) bool {
	switch name {
	case "name":
		c.Name = d.str(v)
	case "keys":
		if n := arrayLen(v); n > 0 {
			c.Keys = make([]SigningKey, n)
		}
		d.list(v, func(i int, x any) { d.message(x, signingKeyFields, &c.Keys[i]) })
	case "path":
		c.Path = d.str(v)
	case "domain":
		c.Domain = d.str(v)
	case "maxAgeSeconds":
		c.MaxAgeSeconds = int(d.integer(v, 32))
	case "sameSite":
		c.SameSite = d.str(v)
	case "insecure":
		c.Insecure = d.boolean(v)
	case "scriptReadable":
		c.ScriptReadable = d.boolean(v)
	default:
		return false
	}
	return true
}

func (d *decoder) ofrepField(o *Ofrep, name string, v any) bool {
	switch name {
	case "enabled":
		o.Enabled = d.boolean(v)
	case "maxBodyBytes":
		n := d.integer(v, 64)
		if n < 0 || n > 1<<32-1 {
			d.fail("out of the uint32 range")
		}
		o.MaxBodyBytes = int(n)
	case "corsAllowOrigins":
		d.list(v, func(_ int, x any) { o.CorsAllowOrigins = append(o.CorsAllowOrigins, d.str(x)) })
	default:
		return false
	}
	return true
}

func (d *decoder) signingKeyField(k *SigningKey, name string, v any) bool {
	switch name {
	case "id":
		k.ID = d.str(v)
	case "secret":
		k.Secret = d.bytes(v)
	default:
		return false
	}
	return true
}

// bytes decodes a bytes field: base64 text, standard or URL-safe, padded
// or not, as protojson reads it.
func (d *decoder) bytes(v any) []byte {
	s := d.str(v)
	enc := base64.StdEncoding
	if strings.ContainsAny(s, "-_") {
		enc = base64.URLEncoding
	}
	if len(s)%4 != 0 {
		enc = enc.WithPadding(base64.NoPadding)
	}
	b, err := enc.DecodeString(s)
	if err != nil {
		d.fail("not base64")
	}
	return b
}

func (d *decoder) filterField(f *Filter, name string, v any) bool {
	switch name {
	case "version":
		f.Version = d.str(v)
	case "unitHeader":
		f.UnitHeader = d.str(v)
	case "headerPrefix":
		f.HeaderPrefix = d.str(v)
	case "experiments":
		if n := arrayLen(v); n > 0 {
			f.Experiments = make([]engine.Experiment, n)
		}
		d.list(v, func(i int, x any) { d.message(x, experimentFields, &f.Experiments[i]) })
	case "savedGroups":
		f.SavedGroups = d.savedGroups(v)
	case "attributes":
		if n := arrayLen(v); n > 0 {
			f.Attributes = make([]Attribute, n)
		}
		d.list(v, func(i int, x any) { d.message(x, attributeFields, &f.Attributes[i]) })
	case "dictionaryHeader":
		f.DictionaryHeader = d.str(v)
	case "versionHeader":
		f.VersionHeader = d.str(v)
	case "cacheSize":
		f.CacheSize = int(d.integer(v, 32))
	case "disableExposureState":
		f.DisableExposureState = d.boolean(v)
	case "assignmentHeaders":
		f.AssignmentHeaders = d.enum(v)
	case "cacheMaxBytes":
		f.CacheMaxBytes = int(d.integer(v, 32))
	case "stickyCookie":
		f.StickyCookie = &StickyCookie{}
		d.message(v, stickyCookieFields, f.StickyCookie)
	case "ofrep":
		f.Ofrep = &Ofrep{}
		d.message(v, ofrepFields, f.Ofrep)
	default:
		return false
	}
	return true
}

func (d *decoder) attributeField(a *Attribute, name string, v any) bool {
	switch name {
	case "name":
		a.Name = d.str(v)
	case "header":
		a.Header = d.str(v)
	case "cookie":
		a.Cookie = d.str(v)
	case "query":
		a.Query = d.str(v)
	case "property":
		a.Property = d.str(v)
	default:
		return false
	}
	return true
}

func (d *decoder) experimentField(e *engine.Experiment, name string, v any) bool {
	switch name {
	case "key":
		e.Key = d.str(v)
	case "variations":
		if n := arrayLen(v); n > 0 {
			e.Variations = make([]engine.RawMessage, 0, n)
		}
		d.list(v, func(_ int, x any) { e.Variations = append(e.Variations, d.value(x, 3)) })
	case "weights":
		if n := arrayLen(v); n > 0 {
			e.Weights = make([]float64, 0, n)
		}
		d.list(v, func(_ int, x any) { e.Weights = append(e.Weights, d.double(x)) })
	case "coverage":
		c := d.double(v)
		e.Coverage = &c
	case "hashAttribute":
		e.HashAttribute = d.str(v)
	case "fallbackAttribute":
		e.FallbackAttribute = d.str(v)
	case "hashVersion":
		e.HashVersion = int(d.integer(v, 32))
	case "seed":
		e.Seed = d.str(v)
	case "namespace":
		e.Namespace = d.listValue(v, 3)
	case "condition":
		e.Condition = d.structValue(v, 3)
	case "force":
		f := int(d.integer(v, 32))
		e.Force = &f
	case "filters":
		e.Filters = d.listValue(v, 3)
	case "ranges":
		e.Ranges = d.ranges(v)
	case "bucketVersion":
		e.BucketVersion = int(d.integer(v, 32))
	case "minBucketVersion":
		e.MinBucketVersion = int(d.integer(v, 32))
	case "disableStickyBucketing":
		e.DisableStickyBucketing = d.boolean(v)
	case "observe":
		e.Observe = d.boolean(v)
	case "assignmentRevision":
		if e.AssignmentRevision = d.integer(v, 64); e.AssignmentRevision < 0 {
			d.fail("at least 0")
		}
	default:
		return false
	}
	return true
}

// assignmentHeadersNames are the AssignmentHeaders values by number.
var assignmentHeadersNames = []string{AssignmentHeadersUnspecified, AssignmentHeadersAll, AssignmentHeadersDictionary}
