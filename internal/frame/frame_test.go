package frame

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/agentd/agentd/record"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	for _, body := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte("y"), 300)} {
		if err := Write(&buf, body); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []io.Reader{bytes.NewReader(buf.Bytes()), bufio.NewReader(bytes.NewReader(buf.Bytes())), iotestOneByte(buf.Bytes())} {
		for _, want := range []int{0, 1, 300} {
			b, err := Read(r, 1000)
			if err != nil || len(b) != want {
				t.Fatalf("%d bytes, %v; want %d", len(b), err, want)
			}
		}
		if _, err := Read(r, 1000); err != io.EOF {
			t.Fatalf("at the end: %v, want io.EOF", err)
		}
	}
}

func iotestOneByte(b []byte) io.Reader { return &oneByte{b: b} }

type oneByte struct{ b []byte }

func (o *oneByte) Read(p []byte) (int, error) {
	if len(o.b) == 0 {
		return 0, io.EOF
	}
	p[0] = o.b[0]
	o.b = o.b[1:]
	return 1, nil
}

func TestRefusals(t *testing.T) {
	for _, c := range []struct {
		name, in string
		is       error
	}{
		{"non-minimal prefix", "\x81\x00x", record.ErrMalformed},
		{"over the limit", "\x0bhello world", record.ErrTooLarge},
		{"truncated prefix", "\x80", io.ErrUnexpectedEOF},
		{"truncated body", "\x05abc", io.ErrUnexpectedEOF},
		{"overflowing prefix", strings.Repeat("\xff", 10) + "\x01", record.ErrMalformed},
	} {
		_, err := Read(strings.NewReader(c.in), 10)
		if !errors.Is(err, c.is) {
			t.Errorf("%s: %v, want %v", c.name, err, c.is)
		}
	}
	// The body of an oversized frame is not read.
	r := strings.NewReader("\x0bhello world")
	_, _ = Read(r, 10)
	if r.Len() != 11 {
		t.Errorf("read %d body bytes of a refused frame", 11-r.Len())
	}
}

// FuzzRead: whatever Read accepts is what Write writes for that body (one
// encoding per frame), and nothing is read past the frame.
func FuzzRead(f *testing.F) {
	for _, s := range []string{"", "\x00", "\x01x", "\x81\x00x", "\x80\x01" + strings.Repeat("z", 128), "\x05abc"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		body, err := Read(r, 1<<10)
		if err != nil {
			return
		}
		var w bytes.Buffer
		if err := Write(&w, body); err != nil {
			t.Fatal(err)
		}
		consumed := len(in) - r.Len()
		if !bytes.Equal(w.Bytes(), in[:consumed]) {
			t.Fatalf("read %q as a %d-byte frame, which writes as %q", in[:consumed], len(body), w.Bytes())
		}
	})
}
