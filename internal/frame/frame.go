// Package frame is the one length-prefixed framing of agentd's stream
// protocols (/agentd/record, /agentd/sync, /agentd/probe and
// /agentd/liveness): an unsigned varint (LEB128, minimally encoded, as in
// multiformats/unsigned-varint) byte length, then that many bytes.
package frame

import (
	"errors"
	"fmt"
	"io"

	"github.com/multiformats/go-varint"

	"github.com/agentd/agentd/record"
)

// Errors of Read. ErrTooLarge matches record.ErrTooLarge and ErrMalformed
// record.ErrMalformed, so trust.ReasonOf counts them as too_large and
// malformed; a stream that ends inside a frame also matches
// io.ErrUnexpectedEOF.
var (
	ErrTooLarge  = fmt.Errorf("%w: frame", record.ErrTooLarge)
	ErrMalformed = fmt.Errorf("%w: frame", record.ErrMalformed)
)

// Write writes one frame, prefix and body in one Write call (one packet on
// the wire for a small frame).
func Write(w io.Writer, body []byte) error {
	buf := make([]byte, 0, varint.MaxLenUvarint63+len(body))
	buf = append(buf, varint.ToUvarint(uint64(len(body)))...)
	buf = append(buf, body...)
	_, err := w.Write(buf)
	return err
}

// Read reads one frame whose body is at most limit bytes. It reads the
// prefix a byte at a time (from r itself when r is an io.ByteReader, such
// as a bufio.Reader) and refuses a non-minimal or oversized prefix before
// reading any of the body. A stream that ends before the first byte
// returns io.EOF.
func Read(r io.Reader, limit int) ([]byte, error) {
	br, ok := r.(io.ByteReader)
	if !ok {
		br = &byteReader{r: r}
	}
	counting := &countingByteReader{r: br}
	n, err := varint.ReadUvarint(counting)
	if err != nil {
		switch {
		case errors.Is(err, io.EOF) && counting.n == 0:
			return nil, io.EOF
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return nil, fmt.Errorf("%w: length prefix truncated: %w", ErrMalformed, io.ErrUnexpectedEOF)
		case errors.Is(err, varint.ErrNotMinimal) || errors.Is(err, varint.ErrOverflow):
			return nil, fmt.Errorf("%w: length prefix: %v", ErrMalformed, err)
		}
		return nil, err
	}
	if n > uint64(limit) {
		return nil, fmt.Errorf("%w of %d bytes, limit %d", ErrTooLarge, n, limit)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: body truncated: %w", ErrMalformed, io.ErrUnexpectedEOF)
		}
		return nil, err
	}
	return body, nil
}

type byteReader struct {
	r   io.Reader
	one [1]byte
}

func (b *byteReader) ReadByte() (byte, error) {
	_, err := io.ReadFull(b.r, b.one[:])
	return b.one[0], err
}

type countingByteReader struct {
	r io.ByteReader
	n int
}

func (c *countingByteReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}
