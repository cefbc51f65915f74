package vllmemu

import (
	"context"
	"slices"
	"time"
)

// scheduled is one request's share of a step.
type scheduled struct {
	r       *request
	tokens  int
	prefill bool // tokens are prompt (or recomputed) tokens, not a decode
}

// schedulerLoop runs steps while there is work and sleeps on e.wake when
// idle. A step is planned under the lock, lasts the modelled compute time
// with the lock released, and is applied under the lock; its KV events are
// published as one batch, as vLLM's EngineCore does once per step
// (vllm/v1/core/sched/scheduler.py update_from_output, upstream main 5ac26849).
func (e *Engine) schedulerLoop(ctx context.Context) {
	defer e.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		e.mu.Lock()
		plan := e.schedule()
		if len(plan) == 0 {
			e.publishLocked(e.pool.takeEvents())
			e.updateGauges()
			e.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-e.wake:
			}
			continue
		}
		d := e.stepDuration(plan)
		e.updateGauges()
		e.mu.Unlock()
		if d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			return
		}
		e.mu.Lock()
		e.finishStep(plan)
		e.publishLocked(e.pool.takeEvents())
		e.updateGauges()
		e.mu.Unlock()
	}
}

func (e *Engine) stepDuration(plan []scheduled) time.Duration {
	prefill, decoding := 0, false
	for _, s := range plan {
		if s.prefill {
			prefill += s.tokens
		} else {
			decoding = true
		}
	}
	return e.opts.TimeModel().Step(prefill, decoding)
}

// schedule plans one step as vLLM's v1 scheduler does, simplified to one
// KV-cache group without speculative decoding: running requests first (a
// prefill chunk or one decode token each, within the token budget, preempting
// the most recently admitted request when blocks run out), then waiting
// requests in FIFO order while there are sequence slots, budget and blocks
// (vllm/v1/core/sched/scheduler.py schedule, upstream main 5ac26849).
func (e *Engine) schedule() []scheduled {
	e.dropAborted()
	budget := e.opts.MaxNumBatchedTokens
	var plan []scheduled
	preempted := false
	for i := 0; i < len(e.running) && budget > 0; i++ {
		r := e.running[i]
		n := min(len(r.tokens)-r.numComputed, budget)
		if n <= 0 {
			continue
		}
		for !e.allocate(r, n, nil) {
			victim := e.running[len(e.running)-1]
			e.preempt(victim)
			preempted = true
			if victim == r {
				break
			}
		}
		if !slices.Contains(e.running, r) {
			break
		}
		plan = append(plan, scheduled{r: r, tokens: n, prefill: r.numComputed < r.promptLen || n > 1})
		budget -= n
	}
	for !preempted && len(e.waiting) > 0 && len(e.running) < e.opts.MaxNumSeqs && budget > 0 {
		r := e.waiting[0]
		maxHit := (len(r.tokens) - 1) / e.opts.BlockSize
		hit := e.pool.longestHit(r.digests, maxHit)
		hitTokens := len(hit) * e.opts.BlockSize
		n := min(len(r.tokens)-hitTokens, budget)
		if !e.allocate(r, n, hit) {
			break
		}
		e.waiting = e.waiting[1:]
		e.running = append(e.running, r)
		if !r.admitted {
			r.admitted, r.hitTokens, r.scheduled = true, hitTokens, e.opts.Now()
			e.met.queue.Observe(r.scheduled.Sub(r.arrival).Seconds())
			e.stats.Requests++
			e.stats.PromptTokens += int64(r.promptLen)
			e.stats.CachedPromptTokens += int64(hitTokens)
			e.met.admitted(r.promptLen, hitTokens)
		}
		plan = append(plan, scheduled{r: r, tokens: n, prefill: true})
		budget -= n
	}
	if len(plan) > 0 {
		e.stats.Steps++
	}
	return plan
}

// allocate is KVCacheManager.allocate_slots: take the hit blocks (when
// admitting), add blocks for n new tokens and commit the newly full blocks to
// the prefix cache. It changes nothing and reports false when the free queue
// is too short.
func (e *Engine) allocate(r *request, n int, hit []*block) bool {
	bs := e.opts.BlockSize
	computed := r.numComputed + len(hit)*bs
	need := (computed+n+bs-1)/bs - len(r.blocks) - len(hit)
	// Hit blocks that sit in the free queue stop being allocatable.
	evictable := 0
	for _, b := range hit {
		if b.ref == 0 {
			evictable++
		}
	}
	if need > e.pool.numFree-evictable {
		return false
	}
	if len(hit) > 0 {
		e.pool.touch(hit)
		r.blocks = append(r.blocks, hit...)
		r.numComputed = computed
		r.numCached = len(hit)
	}
	if need > 0 {
		r.blocks = append(r.blocks, e.pool.getNewBlocks(need)...)
	}
	numFull := min(r.numComputed+n, len(r.tokens)) / bs
	e.pool.cacheFullBlocks(r, r.numCached, numFull)
	r.numCached = max(r.numCached, numFull)
	return true
}

// preempt frees a running request's blocks and puts it back at the head of
// the waiting queue to be recomputed, as vLLM's recompute preemption does.
func (e *Engine) preempt(r *request) {
	e.running = slices.DeleteFunc(e.running, func(x *request) bool { return x == r })
	e.freeRequest(r)
	r.numComputed, r.numCached = 0, 0
	e.waiting = append([]*request{r}, e.waiting...)
	e.stats.Preemptions++
	e.met.preemptions.Inc()
}

// freeRequest releases r's blocks, last block first (vLLM's
// SingleTypeKVCacheManager.free), so a request's tail is evicted before its
// shared prefix.
func (e *Engine) freeRequest(r *request) {
	rev := slices.Clone(r.blocks)
	slices.Reverse(rev)
	e.pool.freeBlocks(rev)
	r.blocks = nil
}

// dropAborted removes requests whose client went away and frees their blocks.
func (e *Engine) dropAborted() {
	e.waiting = slices.DeleteFunc(e.waiting, func(r *request) bool {
		if r.aborted.Load() {
			e.freeRequest(r)
			return true
		}
		return false
	})
	e.running = slices.DeleteFunc(e.running, func(r *request) bool {
		if r.aborted.Load() {
			e.freeRequest(r)
			return true
		}
		return false
	})
}

// finishStep applies a step: computed tokens advance; a request whose known
// tokens are all computed samples one token; a request with max_tokens
// outputs finishes and frees its blocks.
func (e *Engine) finishStep(plan []scheduled) {
	now := e.opts.Now()
	for _, s := range plan {
		r := s.r
		if !slices.Contains(e.running, r) {
			continue
		}
		r.numComputed += s.tokens
		if r.numComputed < len(r.tokens) {
			continue
		}
		ft := e.filler[r.outputs%len(e.filler)]
		r.tokens = append(r.tokens, ft.id)
		r.outputs++
		e.stats.GeneratedTokens++
		e.met.genTokens.Inc()
		if r.outputs == 1 {
			r.firstToken = now
			e.met.ttft.Observe(now.Sub(r.arrival).Seconds())
			e.met.prefilled(r.promptLen, r.hitTokens, now.Sub(r.scheduled).Seconds())
			e.stats.PrefillSeconds += now.Sub(r.scheduled).Seconds()
			e.stats.PrefillCount++
			e.stats.PrefilledPromptTokens += int64(r.promptLen)
			e.stats.PrefilledCachedTokens += int64(r.hitTokens)
		}
		if err := r.hashNewBlocks(e.hasher); err != nil {
			e.log.Error("vllm-emu: hashing generated tokens", "err", err)
		}
		done := r.outputs >= r.maxTokens || len(r.tokens) >= e.opts.MaxModelLen
		if r.out != nil { // nil for a Virtual engine's requests
			r.out <- output{text: ft.text, cachedTokens: r.hitTokens, done: done}
		}
		if done {
			e.running = slices.DeleteFunc(e.running, func(x *request) bool { return x == r })
			e.freeRequest(r)
			e.stats.Finished++
			e.met.finished(now.Sub(r.arrival).Seconds())
		}
	}
}

// submit queues r and wakes the scheduler.
func (e *Engine) submit(r *request) error {
	e.mu.Lock()
	if e.closed || !e.started {
		e.mu.Unlock()
		return errEngineClosed
	}
	e.waiting = append(e.waiting, r)
	e.updateGauges()
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
	return nil
}

// publishLocked encodes events as one batch and queues it for the publisher
// goroutine; a full queue drops the batch (counted), never blocking a step.
func (e *Engine) publishLocked(events []kvEvent) {
	if len(events) == 0 || e.pub == nil {
		return
	}
	rank := e.opts.DataParallelRank
	b := eventBatch{ts: unixSeconds(e.opts.Now()), events: events, dpRank: &rank}
	payload := encodeBatch(nil, &b, e.opts.LegacyLayout)
	select {
	case e.pubq <- payload:
		e.stats.EventBatches++
	default:
		e.stats.EventDrops++
	}
}

// publishLoop sends queued batches in order, as vLLM's publisher thread does.
func (e *Engine) publishLoop(ctx context.Context) {
	defer e.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-e.pubq:
			if _, err := e.pub.Publish(p); err != nil {
				e.log.Debug("vllm-emu: publish", "rank", e.opts.DataParallelRank, "err", err)
			}
		}
	}
}

// unixSeconds is t as Python's time.time() reports it: float seconds. Whole
// seconds and the fraction are converted apart, so a time like x.25 s stays
// exact.
func unixSeconds(t time.Time) float64 {
	return float64(t.Unix()) + float64(t.Nanosecond())/1e9
}
