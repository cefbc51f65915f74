package zmtpcap

// Scanner is zmtpScanner for the external tests (they write their streams
// with internal/zmtptest, which imports this package).
type Scanner = zmtpScanner

// NewScanner returns a scanner refusing messages over limit bytes.
func NewScanner(limit uint64) *Scanner { return &zmtpScanner{maxMessageBytes: limit} }

// Scan is scan.
func (s *zmtpScanner) Scan(b []byte) error { return s.scan(b) }

// Passing is the body bytes of the current frame still to pass and the
// bytes of the current message so far.
func (s *zmtpScanner) Passing() (body, message uint64) { return s.body, s.message }
