package chattemplate

import (
	"errors"
	"fmt"
)

// Error is a failure while rendering, named after the Python exception
// Jinja2 would raise: "TemplateError" (the template's own
// raise_exception), "UndefinedError", "TypeError", "ValueError",
// "SecurityError" (what the sandbox forbids) or "LimitError" (a render
// budget ran out).
type Error struct {
	Kind string
	Msg  string
}

// Error prints "Kind: message", as Python prints the exception.
func (e *Error) Error() string { return e.Kind + ": " + e.Msg }

// ErrBudgetExceeded is wrapped by every LimitError, so callers can tell a
// runaway template from a broken one.
var ErrBudgetExceeded = errors.New("render budget exceeded")

// Unwrap lets errors.Is(err, ErrBudgetExceeded) see limit failures.
func (e *Error) Unwrap() error {
	if e.Kind == "LimitError" {
		return ErrBudgetExceeded
	}
	return nil
}

func errorf(kind, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

func typeErrorf(format string, args ...any) error { return errorf("TypeError", format, args...) }

// UndefinedError is returned for a use of an undefined value that Jinja2's
// default Undefined refuses (arithmetic, attribute access, calls, tojson).
type UndefinedError struct{ Msg string }

// Error prints the message Jinja2 gives.
func (e *UndefinedError) Error() string { return "UndefinedError: " + e.Msg }
