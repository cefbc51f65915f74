// Package vllmevent decodes vLLM's KV-cache event batches (the msgpack
// payload of each ZeroMQ message) in every layout vLLM has published, and
// prints them as JSON for operators. It is the one decoder kvroute's ingest,
// `kvroute events decode` and the engine emulator's tests share.
//
// Source of truth: vllm/distributed/kv_events.py at upstream main 5ac26849
// (msgspec structs, encoded by msgspec's MessagePack encoder);
// testdata/vllm/vllm_kv_events.json holds vLLM's own bytes.
package vllmevent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/kvroute/kvroute/blockhash"
)

// EventType is the kind of one KV-cache event.
type EventType uint8

// The KV-cache event kinds vLLM publishes (vllm/distributed/kv_events.py at
// upstream main 5ac26849); anything else decodes as EventUnknown and is skipped.
const (
	EventUnknown EventType = iota
	EventBlockStored
	EventBlockRemoved
	EventAllBlocksCleared
)

// String returns vLLM's class name for the event type.
func (t EventType) String() string {
	switch t {
	case EventBlockStored:
		return tagBlockStored
	case EventBlockRemoved:
		return tagBlockRemoved
	case EventAllBlocksCleared:
		return tagAllBlocksCleared
	default:
		return "unknown"
	}
}

// EventBatch is one decoded KVEventBatch: `[ts, events, data_parallel_rank]`.
type EventBatch struct {
	// TS is the engine's time.time() when the batch was taken, in seconds.
	TS     float64
	Events []Event
	// DataParallelRank is the publisher's DP rank; HasRank is false when the
	// batch carried nil or predates the field (2-element batch).
	DataParallelRank int
	HasRank          bool
}

// Event is one BlockStored, BlockRemoved or AllBlocksCleared event. Optional
// fields come with a Has flag so a nil on the wire stays distinguishable
// from a zero value.
type Event struct {
	Type EventType
	// TypeName is the tag as sent (kept for unknown types).
	TypeName    string
	BlockHashes []blockhash.EventHash
	// ParentBlockHash is the hash of the block before the run; HasParent is
	// false when the run starts at block 0 (sent as nil, or as the int 0).
	ParentBlockHash blockhash.EventHash
	HasParent       bool
	TokenIDs        []uint32
	BlockSize       int
	LoRAID          int64
	HasLoRAID       bool
	Medium          string
	HasMedium       bool
	LoRAName        string
	HasLoRAName     bool
	// ExtraKeys has one entry per block hash (a nil entry is None); HasExtraKeys
	// is false when the event predates the field or sent nil.
	ExtraKeys          [][]ExtraKey
	HasExtraKeys       bool
	GroupIdx           int
	HasGroupIdx        bool
	KVCacheSpecKind    string
	HasKVCacheSpecKind bool
	SlidingWindow      int
	HasSlidingWindow   bool
	Locality           string
	HasLocality        bool
}

// ExtraKeyKind is the Python type of one extra-key element.
type ExtraKeyKind uint8

// Extra-key element kinds as vLLM sends them (tuples arrive as arrays).
const (
	ExtraStr ExtraKeyKind = iota + 1
	ExtraInt
	ExtraBytes
	ExtraTuple
)

// ExtraKey is one element of a block's extra-keys tuple: a str (LoRA name,
// cache_salt, multimodal identifier), an int, bytes or a nested tuple.
type ExtraKey struct {
	Kind  ExtraKeyKind
	Str   string
	Int   int64
	Bytes []byte
	Items []ExtraKey
}

// Value converts the element to the blockhash representation.
func (x ExtraKey) Value() blockhash.Value {
	switch x.Kind {
	case ExtraStr:
		return blockhash.Str(x.Str)
	case ExtraInt:
		return blockhash.Int(x.Int)
	case ExtraBytes:
		return blockhash.Bytes(x.Bytes)
	default:
		items := make([]blockhash.Value, len(x.Items))
		for i, it := range x.Items {
			items[i] = it.Value()
		}
		return blockhash.Tuple(items...)
	}
}

// ErrMalformed wraps every decode failure: the batch is dropped and counted.
var ErrMalformed = errors.New("malformed KV event batch")

// maxExtraKeyDepth bounds nesting inside extra keys (vLLM nests two deep).
const maxExtraKeyDepth = 8

// The decode budget bounds what one batch may decode into: decodeBudgetBase
// bytes plus decodeBudgetPerByte a payload byte, counted as the decoder
// reads each container's length, before it allocates for it (an event is
// unsafe.Sizeof(Event{}), a hash 32 bytes plus a bin's bytes, a token 4, an
// extra key 80). Without it, 3-byte events of an unknown type decoded into
// 280-byte structs, and an extra-key array header claiming as many elements
// as bytes remained allocated 80 bytes for each: a 32 MiB message, the
// default ingest.max_message_bytes, could take gigabytes. vLLM's own batches
// need at most about 10 bytes a payload byte (one-hash BlockRemoved events in
// the positional layout: 29 bytes each, decoded into an event and a hash).
const (
	decodeBudgetBase    = 1 << 20
	decodeBudgetPerByte = 16
)

var (
	sizeofEvent     = int(unsafe.Sizeof(Event{}))
	sizeofHash      = int(unsafe.Sizeof(blockhash.EventHash{}))
	sizeofExtraKey  = int(unsafe.Sizeof(ExtraKey{}))
	sizeofExtraKeys = int(unsafe.Sizeof([]ExtraKey{}))
)

// Decoder decodes KVEventBatch payloads, reusing its buffers between calls.
// It is not safe for concurrent use.
type Decoder struct {
	payload []byte
	r       bytes.Reader
	dec     *msgpack.Decoder
	key     [64]byte
	budget  int // bytes the batch being decoded may still decode into
}

// NewDecoder returns a Decoder.
func NewDecoder() *Decoder {
	d := &Decoder{}
	d.dec = msgpack.NewDecoder(&d.r)
	return d
}

// DecodeBatch decodes one payload with a fresh Decoder.
func DecodeBatch(payload []byte) (*EventBatch, error) {
	var b EventBatch
	if err := NewDecoder().Decode(payload, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// Decode decodes payload into dst, reusing dst's slices. It accepts the
// current layout (events as maps keyed by field name, "type" first, defaults
// omitted) and the positional layout of vLLM ≤ 0.23 (events as
// [tag, fields…] of any length), int or bytes block hashes, and skips unknown
// event types and map keys. On error dst holds no usable events.
func (d *Decoder) Decode(payload []byte, dst *EventBatch) (err error) {
	d.payload = payload
	d.r.Reset(payload)
	d.dec.ResetReader(&d.r)
	d.budget = decodeBudgetBase + decodeBudgetPerByte*len(payload)
	events := dst.Events[:0]
	*dst = EventBatch{}
	defer func() {
		// Keep no reference to the payload: it may be the largest message seen.
		d.payload = nil
		d.r.Reset(nil)
		if err != nil {
			dst.Events = events[:0]
			err = fmt.Errorf("%w: %v", ErrMalformed, err)
		}
	}()
	n, err := d.arrayLen()
	if err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	if n < 2 {
		return fmt.Errorf("batch: array of %d elements, want [ts, events, data_parallel_rank]", n)
	}
	if dst.TS, err = d.float(); err != nil {
		return fmt.Errorf("batch ts: %w", err)
	}
	if math.IsNaN(dst.TS) || math.IsInf(dst.TS, 0) {
		return errors.New("batch ts: not a finite number") // vLLM sends time.time()
	}
	ne, err := d.arrayLen()
	if err != nil {
		return fmt.Errorf("batch events: %w", err)
	}
	if ne < 0 {
		return errors.New("batch events: nil")
	}
	if err := d.charge(ne, sizeofEvent); err != nil {
		return fmt.Errorf("batch events: %w", err)
	}
	for i := range ne {
		if len(events) < cap(events) {
			events = events[:len(events)+1]
		} else {
			events = append(events, Event{})
		}
		ev := &events[len(events)-1]
		if err := d.event(ev); err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
	}
	dst.Events = events
	if n >= 3 {
		if dst.DataParallelRank, dst.HasRank, err = d.optInt(); err != nil {
			return fmt.Errorf("batch data_parallel_rank: %w", err)
		}
		for range n - 3 {
			if err := d.skip(); err != nil {
				return fmt.Errorf("batch: %w", err)
			}
		}
	}
	if d.r.Len() != 0 {
		return fmt.Errorf("batch: %d trailing bytes", d.r.Len())
	}
	return nil
}

// event decodes one event, map or array, into ev (whose slices it reuses).
func (d *Decoder) event(ev *Event) error {
	hashes, tokens, extra := ev.BlockHashes[:0], ev.TokenIDs[:0], ev.ExtraKeys[:0]
	*ev = Event{BlockHashes: hashes, TokenIDs: tokens, ExtraKeys: extra}
	c, err := d.dec.PeekCode()
	if err != nil {
		return err
	}
	switch {
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		return d.mapEvent(ev)
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		return d.arrayEvent(ev)
	default:
		return fmt.Errorf("event is neither a map nor an array (code %#x)", c)
	}
}

// Field positions of the positional layout, after the tag (vLLM ≤ v0.23.x, vllm/distributed/kv_events.py).
var (
	storedFields  = []string{fBlockHashes, fParentBlockHash, fTokenIDs, fBlockSize, fLoRAID, fMedium, fLoRAName, fExtraKeys, fGroupIdx, fKVCacheSpecKind, fSlidingWindow, fLocality}
	removedFields = []string{fBlockHashes, fMedium, fGroupIdx, fLocality}
)

func (d *Decoder) arrayEvent(ev *Event) error {
	n, err := d.arrayLen()
	if err != nil {
		return err
	}
	if n < 1 {
		return errors.New("empty event array")
	}
	tag, err := d.str()
	if err != nil {
		return fmt.Errorf("tag: %w", err)
	}
	ev.setType(tag)
	var fields []string
	switch ev.Type {
	case EventBlockStored:
		fields = storedFields
	case EventBlockRemoved:
		fields = removedFields
	}
	seen := 0
	for i := 1; i < n; i++ {
		if i-1 >= len(fields) {
			if err := d.skip(); err != nil {
				return err
			}
			continue
		}
		if err := d.field(ev, fields[i-1]); err != nil {
			return fmt.Errorf("%s: %w", fields[i-1], err)
		}
		seen++
	}
	if ev.Type != EventUnknown && ev.Type != EventAllBlocksCleared && seen == 0 {
		return fmt.Errorf("%s without block_hashes", tag)
	}
	return nil
}

func (d *Decoder) mapEvent(ev *Event) error {
	n, err := d.dec.DecodeMapLen()
	if err != nil {
		return err
	}
	hasHashes := false
	for range n {
		key, err := d.keyBytes()
		if err != nil {
			return fmt.Errorf("map key: %w", err)
		}
		if string(key) == fType {
			tag, err := d.str()
			if err != nil {
				return fmt.Errorf("type: %w", err)
			}
			ev.setType(tag)
			continue
		}
		name, known := fieldName(key)
		if !known {
			if err := d.skip(); err != nil {
				return err
			}
			continue
		}
		hasHashes = hasHashes || name == fBlockHashes
		if err := d.field(ev, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if ev.TypeName == "" {
		return errors.New(`event map without "type"`)
	}
	if (ev.Type == EventBlockStored || ev.Type == EventBlockRemoved) && !hasHashes {
		return fmt.Errorf("%s without block_hashes", ev.TypeName)
	}
	return nil
}

func (ev *Event) setType(tag string) {
	switch tag {
	case tagBlockStored:
		ev.Type, ev.TypeName = EventBlockStored, tagBlockStored
	case tagBlockRemoved:
		ev.Type, ev.TypeName = EventBlockRemoved, tagBlockRemoved
	case tagAllBlocksCleared:
		ev.Type, ev.TypeName = EventAllBlocksCleared, tagAllBlocksCleared
	default:
		ev.Type, ev.TypeName = EventUnknown, tag
		if tag == "" {
			ev.TypeName = "?"
		}
	}
}

// fieldName maps a map key to its canonical constant without allocating.
func fieldName(key []byte) (string, bool) {
	for _, f := range storedFields {
		if string(key) == f {
			return f, true
		}
	}
	return "", false
}

// field decodes the named field's value into ev.
func (d *Decoder) field(ev *Event, name string) error {
	var err error
	switch name {
	case fBlockHashes:
		ev.BlockHashes, err = d.hashes(ev.BlockHashes[:0])
	case fParentBlockHash:
		ev.ParentBlockHash, ev.HasParent, err = d.optHash()
	case fTokenIDs:
		ev.TokenIDs, err = d.tokens(ev.TokenIDs[:0])
	case fBlockSize:
		var bs int
		bs, _, err = d.optInt()
		if err == nil && bs < 0 {
			err = fmt.Errorf("negative block size %d", bs)
		}
		ev.BlockSize = bs
	case fLoRAID:
		var id int
		id, ev.HasLoRAID, err = d.optInt()
		ev.LoRAID = int64(id)
	case fMedium:
		ev.Medium, ev.HasMedium, err = d.optStr()
	case fLoRAName:
		ev.LoRAName, ev.HasLoRAName, err = d.optStr()
	case fExtraKeys:
		ev.ExtraKeys, ev.HasExtraKeys, err = d.extraKeys(ev.ExtraKeys[:0])
	case fGroupIdx:
		ev.GroupIdx, ev.HasGroupIdx, err = d.optInt()
	case fKVCacheSpecKind:
		ev.KVCacheSpecKind, ev.HasKVCacheSpecKind, err = d.optStr()
	case fSlidingWindow:
		ev.SlidingWindow, ev.HasSlidingWindow, err = d.optInt()
	case fLocality:
		ev.Locality, ev.HasLocality, err = d.optStr()
	default:
		err = d.skip()
	}
	return err
}

// arrayLen reads an array header; -1 means nil. The length is checked
// against the bytes left so a forged header cannot force a huge allocation.
func (d *Decoder) arrayLen() (int, error) {
	n, err := d.dec.DecodeArrayLen()
	if err != nil {
		return 0, err
	}
	if n > d.r.Len() {
		return 0, fmt.Errorf("array of %d elements in %d bytes", n, d.r.Len())
	}
	return n, nil
}

// skip reads past one value of any kind. It replaces msgpack's Decoder.Skip,
// which recurses once a level of nesting: a payload of nested one-element
// arrays (one byte a level) overflowed the goroutine stack's 1 GB limit at
// 8 MiB, a fatal error no recover catches, well within
// ingest.max_message_bytes. skip keeps a count of the values still to read
// instead: constant stack, and time linear in the payload, since every value
// takes at least a byte and a container may announce no more elements than
// bytes remain. Strs, bins and exts are passed over in the payload; other
// scalars are left to msgpack's Skip, which does not recurse for them.
func (d *Decoder) skip() error {
	for pending := 1; pending > 0; pending-- {
		c, err := d.dec.PeekCode()
		if err != nil {
			return err
		}
		var n int
		switch {
		case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
			n, err = d.arrayLen()
		case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
			n, err = d.dec.DecodeMapLen()
			if err == nil && n > d.r.Len()/2 {
				err = fmt.Errorf("map of %d entries in %d bytes", n, d.r.Len())
			}
			n *= 2
		case msgpcode.IsString(c) || msgpcode.IsBin(c):
			var size int
			if size, err = d.dec.DecodeBytesLen(); err == nil {
				err = d.pass(size)
			}
		case msgpcode.IsExt(c):
			var size int
			if _, size, err = d.dec.DecodeExtHeader(); err == nil {
				err = d.pass(size)
			}
		default:
			err = d.dec.Skip()
		}
		if err != nil {
			return err
		}
		pending += n // an array's or map's values; 0 for a scalar
	}
	return nil
}

// pass reads past size bytes of the payload in place (msgpack's Skip copies
// them out, allocating up to 1 MiB whatever the payload holds).
func (d *Decoder) pass(size int) error {
	if size < 0 || size > d.r.Len() {
		return fmt.Errorf("value of %d bytes in %d", size, d.r.Len())
	}
	_, err := d.r.Seek(int64(size), io.SeekCurrent)
	return err
}

// charge takes n items of size bytes each from the decode budget, or fails
// when they do not fit (n is at most the payload's length, so n*size cannot
// overflow).
func (d *Decoder) charge(n, size int) error {
	if n*size > d.budget {
		return fmt.Errorf("%d items of %d bytes exceed what is left of the decode budget (%d bytes; %d a payload byte + %d)",
			n, size, d.budget, decodeBudgetPerByte, decodeBudgetBase)
	}
	d.budget -= n * size
	return nil
}

func (d *Decoder) isNil() (bool, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return false, err
	}
	if c == msgpcode.Nil {
		return true, d.skip()
	}
	return false, nil
}

func isUintCode(c byte) bool {
	return c <= msgpcode.PosFixedNumHigh || (c >= msgpcode.Uint8 && c <= msgpcode.Uint64)
}

func isIntCode(c byte) bool {
	return msgpcode.IsFixedNum(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Uint64) || (c >= msgpcode.Int8 && c <= msgpcode.Int64)
}

// uint reads a non-negative integer up to 2^64-1.
func (d *Decoder) uint() (uint64, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return 0, err
	}
	if !isUintCode(c) {
		if c == msgpcode.Int8 || c == msgpcode.Int16 || c == msgpcode.Int32 || c == msgpcode.Int64 {
			n, err := d.dec.DecodeInt64()
			if err != nil || n < 0 {
				return 0, fmt.Errorf("want a non-negative integer, got %d", n)
			}
			return uint64(n), nil
		}
		return 0, fmt.Errorf("want a non-negative integer (code %#x)", c)
	}
	return d.dec.DecodeUint64()
}

// fastUint reads a non-negative integer straight from the payload when the
// next value is one (the hot path for token ids and hashes); ok is false,
// with nothing consumed, for anything else.
func (d *Decoder) fastUint() (uint64, bool) {
	rest := d.payload[len(d.payload)-d.r.Len():]
	if len(rest) == 0 {
		return 0, false
	}
	c := rest[0]
	var v uint64
	var n int
	switch {
	case c <= msgpcode.PosFixedNumHigh:
		v, n = uint64(c), 1
	case c == msgpcode.Uint8 && len(rest) >= 2:
		v, n = uint64(rest[1]), 2
	case c == msgpcode.Uint16 && len(rest) >= 3:
		v, n = uint64(binary.BigEndian.Uint16(rest[1:])), 3
	case c == msgpcode.Uint32 && len(rest) >= 5:
		v, n = uint64(binary.BigEndian.Uint32(rest[1:])), 5
	case c == msgpcode.Uint64 && len(rest) >= 9:
		v, n = binary.BigEndian.Uint64(rest[1:]), 9
	default:
		return 0, false
	}
	_, _ = d.r.Seek(int64(n), io.SeekCurrent)
	return v, true
}

// optInt reads an int that fits an int, or nil.
func (d *Decoder) optInt() (int, bool, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return 0, false, err
	}
	if c == msgpcode.Nil {
		return 0, false, d.skip()
	}
	if !isIntCode(c) {
		return 0, false, fmt.Errorf("want an integer (code %#x)", c)
	}
	if c == msgpcode.Uint64 {
		u, err := d.dec.DecodeUint64()
		if err != nil {
			return 0, false, err
		}
		if u > math.MaxInt32 {
			return 0, false, fmt.Errorf("integer %d out of range", u)
		}
		return int(u), true, nil
	}
	n, err := d.dec.DecodeInt64()
	if err != nil {
		return 0, false, err
	}
	if n > math.MaxInt32 || n < math.MinInt32 {
		return 0, false, fmt.Errorf("integer %d out of range", n)
	}
	return int(n), true, nil
}

func (d *Decoder) float() (float64, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return 0, err
	}
	if c != msgpcode.Double && c != msgpcode.Float && !isIntCode(c) {
		return 0, fmt.Errorf("want a float (code %#x)", c)
	}
	return d.dec.DecodeFloat64()
}

// keyBytes reads a str into the decoder's scratch (valid until the next call).
func (d *Decoder) keyBytes() ([]byte, error) {
	c, err := d.dec.PeekCode()
	if err != nil {
		return nil, err
	}
	if !msgpcode.IsString(c) {
		return nil, fmt.Errorf("want a str (code %#x)", c)
	}
	n, err := d.dec.DecodeBytesLen()
	if err != nil {
		return nil, err
	}
	if n > d.r.Len() {
		return nil, fmt.Errorf("str of %d bytes in %d", n, d.r.Len())
	}
	if n > len(d.key) {
		// Longer than any field name or interned value.
		if err := d.charge(n, 1); err != nil {
			return nil, err
		}
		buf := make([]byte, n)
		return buf, d.dec.ReadFull(buf)
	}
	b := d.key[:n]
	return b, d.dec.ReadFull(b)
}

// str reads a str; well-known values are returned without allocating.
func (d *Decoder) str() (string, error) {
	b, err := d.keyBytes()
	if err != nil {
		return "", err
	}
	for _, s := range internedStrings {
		if string(b) == s {
			return s, nil
		}
	}
	if err := d.charge(len(b), 1); err != nil {
		return "", err
	}
	return string(b), nil
}

func (d *Decoder) optStr() (string, bool, error) {
	if isNil, err := d.isNil(); err != nil || isNil {
		return "", false, err
	}
	s, err := d.str()
	return s, err == nil, err
}

// hash reads one block hash: a uint (int mode) or bin (bytes mode).
func (d *Decoder) hash() (blockhash.EventHash, error) {
	if v, ok := d.fastUint(); ok {
		return blockhash.EventHash{Value: v}, nil
	}
	c, err := d.dec.PeekCode()
	if err != nil {
		return blockhash.EventHash{}, err
	}
	if msgpcode.IsBin(c) {
		n, err := d.dec.DecodeBytesLen()
		if err != nil {
			return blockhash.EventHash{}, err
		}
		if n <= 0 || n > 64 || n > d.r.Len() {
			return blockhash.EventHash{}, fmt.Errorf("hash of %d bytes", n)
		}
		if err := d.charge(n, 1); err != nil {
			return blockhash.EventHash{}, err
		}
		raw := make([]byte, n)
		if err := d.dec.ReadFull(raw); err != nil {
			return blockhash.EventHash{}, err
		}
		return blockhash.EventHash{Raw: raw, Value: bytesEventValue(raw)}, nil
	}
	v, err := d.uint()
	return blockhash.EventHash{Value: v}, err
}

// bytesEventValue is the 64-bit value vLLM would have published for a digest
// in int mode: its last 8 bytes, big-endian.
func bytesEventValue(raw []byte) uint64 {
	var v uint64
	if len(raw) > 8 {
		raw = raw[len(raw)-8:]
	}
	for _, b := range raw {
		v = v<<8 | uint64(b)
	}
	return v
}

// optHash reads a parent hash: nil, or an int 0, is "no parent" (the run
// starts at block 0). vLLM sends nil; llm-d-inference-sim (through
// llm-d-kv-cache's positional BlockStored) sends 0, which llm-d also reads as
// no parent. A real parent's 64-bit value is 0 with probability 2^-64.
func (d *Decoder) optHash() (blockhash.EventHash, bool, error) {
	if isNil, err := d.isNil(); err != nil || isNil {
		return blockhash.EventHash{}, false, err
	}
	h, err := d.hash()
	if err == nil && h.Raw == nil && h.Value == 0 {
		return blockhash.EventHash{}, false, nil
	}
	return h, err == nil, err
}

func (d *Decoder) hashes(dst []blockhash.EventHash) ([]blockhash.EventHash, error) {
	n, err := d.arrayLen()
	if err != nil {
		return dst, err
	}
	if n < 0 {
		return dst, errors.New("nil")
	}
	if err := d.charge(n, sizeofHash); err != nil {
		return dst, err
	}
	for range n {
		h, err := d.hash()
		if err != nil {
			return dst, err
		}
		dst = append(dst, h)
	}
	return dst, nil
}

func (d *Decoder) tokens(dst []uint32) ([]uint32, error) {
	n, err := d.arrayLen()
	if err != nil || n < 0 {
		return dst, err
	}
	if err := d.charge(n, 4); err != nil {
		return dst, err
	}
	for i := 0; i < n; i++ {
		if t, ok := d.fastUint(); ok {
			if t > math.MaxUint32 {
				return dst, errors.New("token id outside [0, 2^32)")
			}
			dst = append(dst, uint32(t))
			continue
		}
		t, err := d.uint()
		if err != nil {
			return dst, err
		}
		if t > math.MaxUint32 {
			return dst, errors.New("token id outside [0, 2^32)")
		}
		dst = append(dst, uint32(t))
	}
	return dst, nil
}

func (d *Decoder) extraKeys(dst [][]ExtraKey) ([][]ExtraKey, bool, error) {
	n, err := d.arrayLen()
	if err != nil || n < 0 {
		return dst, false, err
	}
	if err := d.charge(n, sizeofExtraKeys); err != nil {
		return dst, false, err
	}
	for range n {
		isNil, err := d.isNil()
		if err != nil {
			return dst, false, err
		}
		if isNil {
			dst = append(dst, nil)
			continue
		}
		x, err := d.extraKey(0)
		if err != nil {
			return dst, false, err
		}
		if x.Kind != ExtraTuple {
			// vLLM always sends a tuple; a bare value is one-element.
			if err := d.charge(1, sizeofExtraKey); err != nil {
				return dst, false, err
			}
			x = ExtraKey{Kind: ExtraTuple, Items: []ExtraKey{x}}
		}
		if x.Items == nil {
			x.Items = []ExtraKey{}
		}
		dst = append(dst, x.Items)
	}
	return dst, true, nil
}

func (d *Decoder) extraKey(depth int) (ExtraKey, error) {
	if depth > maxExtraKeyDepth {
		return ExtraKey{}, errors.New("extra keys nested too deep")
	}
	c, err := d.dec.PeekCode()
	if err != nil {
		return ExtraKey{}, err
	}
	switch {
	case msgpcode.IsString(c):
		s, err := d.str()
		return ExtraKey{Kind: ExtraStr, Str: s}, err
	case msgpcode.IsBin(c):
		n, err := d.dec.DecodeBytesLen()
		if err != nil {
			return ExtraKey{}, err
		}
		if n < 0 || n > d.r.Len() {
			return ExtraKey{}, fmt.Errorf("bin of %d bytes", n)
		}
		if err := d.charge(n, 1); err != nil {
			return ExtraKey{}, err
		}
		b := make([]byte, n)
		return ExtraKey{Kind: ExtraBytes, Bytes: b}, d.dec.ReadFull(b)
	case isIntCode(c):
		if c == msgpcode.Uint64 {
			u, err := d.dec.DecodeUint64()
			if err != nil || u > math.MaxInt64 {
				return ExtraKey{}, fmt.Errorf("extra-key integer out of range")
			}
			return ExtraKey{Kind: ExtraInt, Int: int64(u)}, nil
		}
		n, err := d.dec.DecodeInt64()
		return ExtraKey{Kind: ExtraInt, Int: n}, err
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := d.arrayLen()
		if err == nil {
			err = d.charge(n, sizeofExtraKey)
		}
		if err != nil {
			return ExtraKey{}, err
		}
		items := make([]ExtraKey, 0, n)
		for range n {
			it, err := d.extraKey(depth + 1)
			if err != nil {
				return ExtraKey{}, err
			}
			items = append(items, it)
		}
		return ExtraKey{Kind: ExtraTuple, Items: items}, nil
	default:
		return ExtraKey{}, fmt.Errorf("unsupported extra-key value (code %#x)", c)
	}
}
