package routing

// Decision outcomes and reasons: the label values of
// kvroute_route_decisions_total{pool,outcome,reason}. Bounded sets.
const (
	OutcomePrefix   = "prefix" // a replica was chosen on cached prefix and load
	OutcomeLoad     = "load"   // chosen on load alone
	OutcomeRejected = "rejected"

	ReasonHit              = "hit"
	ReasonNoHit            = "no_hit"
	ReasonNoBody           = "no_body"
	ReasonNoTokenizer      = "no_tokenizer"
	ReasonBadJSON          = "bad_json"
	ReasonUnknownModel     = "unknown_model"
	ReasonUnsupported      = "unsupported_input"
	ReasonEmptyPrompt      = "empty_prompt"
	ReasonChatTemplate     = "chat_template_error"
	ReasonHashError        = "hash_error"
	ReasonBlockSizeUnknown = "block_size_unknown"
	ReasonNoEligible       = "no_eligible_replica"
	// ReasonParityMismatch: a replica of the pool disagrees with the pool's
	// config and parity.on_mismatch is route_by_load.
	ReasonParityMismatch = "parity_mismatch"
	ReasonBodyTooLarge   = "body_too_large"
	// Over the per-request limits (routing.max_prompt_bytes,
	// max_prompt_tokens, max_messages) or the in-flight decision budget
	// (routing.max_decide_bytes_in_flight): routed by load, untokenized.
	ReasonPromptTooLarge  = "prompt_too_large"
	ReasonTooManyMessages = "too_many_messages"
	ReasonDecideBudget    = "decide_budget_full"
	// ReasonInternalError: the decision panicked (a bug); counted in
	// kvroute_panics_total{component="extproc_decide"} too.
	ReasonInternalError = "internal_error"

	// PoolUnknown is the pool label of a decision made before its pool was
	// known (bad JSON, an unknown model, a body over the limit).
	PoolUnknown = "unknown"
)
