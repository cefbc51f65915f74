package chattemplate

import "errors"

// IsRaised reports whether err came from the template calling
// raise_exception (as opposed to an engine or data problem).
func IsRaised(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == "TemplateError"
}
