package scenario

import (
	"reflect"
	"testing"
)

// TestSamples: a /metrics body's series keep their labels as written;
// comments and unreadable lines are skipped.
func TestSamples(t *testing.T) {
	body := "# HELP x a counter\n# TYPE x counter\nx 3\n" +
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Txn"} 1.5e+06` + "\nbroken\nnan_value abc\n"
	want := []sample{{"x", 3}, {`grpc_server_handled_total{grpc_code="OK",grpc_method="Txn"}`, 1.5e6}}
	if got := samples([]byte(body)); !reflect.DeepEqual(got, want) {
		t.Errorf("samples = %v, want %v", got, want)
	}
}
