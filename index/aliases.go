package index

// AliasBudget is how many of Options.MaxEntries the aliases kept for the
// index outside it (AccountAliases) may take together: half. Their keeper
// holds them under it and drops its least recently used ones first, so
// block and speculative entries always keep the other half and evicting
// them can bring the total back under the cap.
func (ix *Index) AliasBudget() int64 { return max(ix.maxEntries/2, 1) }
