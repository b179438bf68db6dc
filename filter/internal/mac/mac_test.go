package mac

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

// TestSum256 checks SHA-256 against FIPS 180-4's examples and crypto/sha256
// at every length across three blocks (each padding case).
func TestSum256(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
	} {
		if got := Sum256([]byte(tc.in)); hex.EncodeToString(got[:]) != tc.want {
			t.Errorf("Sum256(%q) = %x, want %s", tc.in, got, tc.want)
		}
	}
	data := make([]byte, 200)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for n := range data {
		if got, want := Sum256(data[:n]), sha256.Sum256(data[:n]); got != want {
			t.Fatalf("Sum256 of %d bytes = %x, want %x", n, got, want)
		}
	}
}

// TestHMAC checks RFC 4231's test case 2 and crypto/hmac over random keys
// (shorter and longer than a block) and messages split into parts.
func TestHMAC(t *testing.T) {
	got := NewKey([]byte("Jefe")).Sum([]byte("what do ya want "), []byte("for nothing?"))
	if want := "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"; hex.EncodeToString(got[:]) != want {
		t.Errorf("RFC 4231 case 2: %x, want %s", got, want)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 500; i++ {
		key := make([]byte, r.IntN(150))
		msg := make([]byte, r.IntN(300))
		for j := range key {
			key[j] = byte(r.Uint32())
		}
		for j := range msg {
			msg[j] = byte(r.Uint32())
		}
		cut := 0
		if len(msg) > 0 {
			cut = r.IntN(len(msg))
		}
		got := NewKey(key).Sum(msg[:cut], msg[cut:])
		m := hmac.New(sha256.New, key)
		m.Write(msg)
		if want := m.Sum(nil); !hmac.Equal(got[:], want) {
			t.Fatalf("key %x msg %x: %x, want %x", key, msg, got, want)
		}
	}
}

func TestEqual(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{{"", "", true}, {"abc", "abc", true}, {"abc", "abd", false}, {"abc", "ab", false}} {
		if got := Equal([]byte(tc.a), []byte(tc.b)); got != tc.want {
			t.Errorf("Equal(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

func TestSumAllocatesNothing(t *testing.T) {
	k := NewKey([]byte("0123456789abcdef0123456789abcdef"))
	msg := []byte("cookie=k1.payload")
	if n := testing.AllocsPerRun(100, func() { _ = k.Sum(msg, msg) }); n != 0 {
		t.Errorf("Sum allocates %v times", n)
	}
}

func FuzzHMAC(f *testing.F) {
	f.Add([]byte("key"), []byte("message"))
	f.Fuzz(func(t *testing.T, key, msg []byte) {
		got := NewKey(key).Sum(msg)
		m := hmac.New(sha256.New, key)
		m.Write(msg)
		if !hmac.Equal(got[:], m.Sum(nil)) {
			t.Fatalf("key %x msg %x: differs from crypto/hmac", key, msg)
		}
	})
}

func BenchmarkSum(b *testing.B) {
	k := NewKey([]byte("0123456789abcdef0123456789abcdef"))
	msg := make([]byte, 120)
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		_ = k.Sum(msg)
	}
}
