package ingest

import (
	"unsafe"

	"github.com/kvroute/kvroute/blockhash"
	"github.com/kvroute/kvroute/index"
	"github.com/kvroute/kvroute/ingest/vllmevent"
)

// maxRetainedDecodeBytes bounds the decode buffers an applier keeps between
// batches. Ordinary batches fit (a 2,048-token prefill at block size 16 needs
// ~20 KiB); after a larger one the buffers are dropped, so one big message
// does not pin its size in memory for the life of the process.
const maxRetainedDecodeBytes = 1 << 20

// retainedBytes is the capacity, in bytes, the batch's reusable slices hold.
func retainedBytes(b *vllmevent.EventBatch) int {
	n := cap(b.Events) * int(unsafe.Sizeof(vllmevent.Event{}))
	for _, ev := range b.Events[:cap(b.Events)] {
		n += cap(ev.BlockHashes)*int(unsafe.Sizeof(blockhash.EventHash{})) +
			cap(ev.TokenIDs)*4 + cap(ev.ExtraKeys)*int(unsafe.Sizeof([]vllmevent.ExtraKey{}))
	}
	return n
}

// trimBuffers drops the applier's reusable buffers when the last batch grew
// them beyond maxRetainedDecodeBytes.
func (rs *rankState) trimBuffers() {
	if retainedBytes(&rs.batch) > maxRetainedDecodeBytes {
		rs.batch = vllmevent.EventBatch{}
	}
	if cap(rs.keysBuf)*int(unsafe.Sizeof(index.BlockKey(0))) > maxRetainedDecodeBytes {
		rs.keysBuf = nil
	}
}

// maxQueuedBytes bounds the payload bytes queued per replica rank: four
// messages of the largest size accepted.
func (m *Manager) maxQueuedBytes() int64 { return 4 * m.set.MaxMessageBytes }
