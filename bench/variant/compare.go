package variant

import ()

type Module struct {
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}
