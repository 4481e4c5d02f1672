package config

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every error that reports a bad configuration
// value; errors.Is(err, ErrInvalid) holds for all of them.
var ErrInvalid = errors.New("invalid configuration")

// FieldError names what is wrong with a configuration: the file and line
// when the value came from a file, the dotted path of the field
// (discovery.udp.port, trust.allowList[2]) and the reason. Its text is
// "<file>:<line>: <field>: <reason>", leaving out the parts that are not
// known.
type FieldError struct {
	File   string
	Line   int
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	var s string
	switch {
	case e.File != "" && e.Line > 0:
		s = fmt.Sprintf("%s:%d: ", e.File, e.Line)
	case e.File != "":
		s = e.File + ": "
	}
	if e.Field != "" {
		s += e.Field + ": "
	}
	return s + e.Reason
}

// Unwrap makes every FieldError match ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// FieldErrors returns every *FieldError inside err (which may be a single
// FieldError or an errors.Join of them), in order.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if fe, ok := e.(*FieldError); ok {
			out = append(out, fe)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}
