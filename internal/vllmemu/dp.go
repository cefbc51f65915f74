package vllmemu

import (
	"context"
	"errors"
	"fmt"
)

// NewDataParallel builds the size engines of one vLLM server started with
// --data-parallel-size: rank r gets DataParallelRank r and, when events
// are enabled, the events and replay endpoints offset by r as vLLM offsets
// them (OffsetEndpoint). base is every rank's other options.
func NewDataParallel(base Options, size int, events KVEventsConfig) ([]*Engine, error) {
	if size < 1 {
		return nil, fmt.Errorf("vllmemu: data parallel size %d: want at least 1", size)
	}
	engines := make([]*Engine, 0, size)
	for r := range size {
		opts := base
		opts.DataParallelRank = r
		opts.EventsEndpoint, opts.ReplayEndpoint = "", ""
		if events.Enabled() {
			ep, err := OffsetEndpoint(events.Endpoint, r)
			if err != nil {
				return nil, fmt.Errorf("vllmemu rank %d: %w", r, err)
			}
			replay, err := OffsetEndpoint(events.ReplayEndpoint, r)
			if err != nil {
				return nil, fmt.Errorf("vllmemu rank %d: %w", r, err)
			}
			opts.EventsEndpoint, opts.ReplayEndpoint = ep, replay
			opts.Topic, opts.ReplayBuffer = events.Topic, events.BufferSteps
		}
		e, err := New(opts)
		if err != nil {
			return nil, err
		}
		engines = append(engines, e)
	}
	return engines, nil
}

// StartAll starts every engine; on an error it closes the ones started.
func StartAll(ctx context.Context, engines []*Engine) error {
	for i, e := range engines {
		if err := e.Start(ctx); err != nil {
			return errors.Join(err, CloseAll(engines[:i]))
		}
	}
	return nil
}

// CloseAll closes every engine and joins their errors.
func CloseAll(engines []*Engine) error {
	var errs []error
	for _, e := range engines {
		errs = append(errs, e.Close())
	}
	return errors.Join(errs...)
}
