package variant

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/proxywasm"
)

// TestOFREPBulkChecked: Allot's plugin, run natively on the fake host with
// e's configuration, answers the load generator's bulk evaluation with
// what CheckBulk wants for the warm ids; a 404's body, one flag short or a
// wrong variant fails the check.
func TestOFREPBulkChecked(t *testing.T) {
	v, err := ByID("e")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := allotConfig(v.Allot, ofrepShape)
	if err != nil {
		t.Fatal(err)
	}
	js, err := translate.ConfigJSON(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := fakehost.New()
	p := proxywasm.New(h)
	root, ok := h.StartPlugin(p, js)
	if !ok {
		t.Fatalf("configuration refused: %v", h.Logs)
	}
	req, err := v.Request(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range CheckIDs(v, 8, 97, "pre", 1) {
		if raw := string(req(nil, 0)); !strings.HasPrefix(raw, "POST "+OFREPBulkPath+" ") || !strings.Contains(raw, "content-type: application/json\r\n") {
			t.Fatalf("request %q", raw)
		}
		s := h.Send(p, root, [][2]string{{":method", "POST"}, {":path", OFREPBulkPath}, {"content-type", "application/json"}},
			AppendOFREPBody(nil, id))
		if s.Reply == nil || s.Reply.Status != 200 {
			t.Fatalf("%s: reply %+v", id, s.Reply)
		}
		if err := v.CheckBulk(id, s.Reply.Body); err != nil {
			t.Errorf("%s: %v", id, err)
		}
		var answer struct{ Flags []map[string]any }
		if err := json.Unmarshal(s.Reply.Body, &answer); err != nil {
			t.Fatal(err)
		}
		short, _ := json.Marshal(map[string]any{"flags": answer.Flags[1:]})
		answer.Flags[0]["variant"] = "nope"
		wrong, _ := json.Marshal(answer)
		for name, body := range map[string][]byte{"404": []byte("no route"), "short": short, "wrong": wrong} {
			if err := v.CheckBulk(id, body); err == nil {
				t.Errorf("%s: %s answer passed", id, name)
			}
		}
	}
}

// TestOFREPRequestBody: the load generator's body for warm unit n is the
// pre-flight's for user-<n>.
func TestOFREPRequestBody(t *testing.T) {
	v, err := ByID("f")
	if err != nil {
		t.Fatal(err)
	}
	req, err := v.Request(1)
	if err != nil {
		t.Fatal(err)
	}
	raw := string(req(nil, 1007))
	_, body, _ := strings.Cut(raw, "\r\n\r\n")
	if want := string(AppendOFREPBody(nil, "user-7")); body != want {
		t.Errorf("body %q, want %q", body, want)
	}
	var ctx struct{ Context map[string]string }
	if err := json.Unmarshal([]byte(body), &ctx); err != nil || ctx.Context["targetingKey"] != "user-7" {
		t.Errorf("body %q: %v", body, err)
	}
}

// TestOFREPBufferRoute: e's bootstrap turns the buffer filter on for
// /ofrep/ alone, in a route before the others; f's has no such route.
func TestOFREPBufferRoute(t *testing.T) {
	p := &Paths{AllotWasm: "/x/allot.wasm", AllotSO: "/x/liballot.so"}
	for id, want := range map[string]bool{"e": true, "f": false, "G": false} {
		v, err := ByID(id)
		if err != nil {
			t.Fatal(err)
		}
		f, err := v.Filters(p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := bootstrap(f, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		first := strings.Index(s, `"prefix": "/ofrep/"`)
		if got := first >= 0 && first < strings.Index(s, `"prefix": "/"`) && strings.Contains(s, "BufferPerRoute"); got != want {
			t.Errorf("%s: OFREP route with the buffer on %v, want %v", id, got, want)
		}
		if got := strings.Contains(s, `"disabled": true`); got != want {
			t.Errorf("%s: buffer filter off by default %v, want %v", id, got, want)
		}
	}
}
