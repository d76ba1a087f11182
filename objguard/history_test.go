package objguard_test

import (
	"fmt"
	"strings"

	"github.com/fencekit/fencekit/fence"
)

// chain orders the applied writes of one key as the store applied them,
// from the conditions they carried: the first write is the one that
// created the key (If-None-Match: *), and each next one is the write
// whose If-Match is the ETag the previous one produced. Every write
// produces bytes of its own (tests write unique bytes, tombstones carry a
// nonce), so ETags do not repeat and the order is unique. It returns an
// error when a write does not fit on the chain: a write the store applied
// though its condition did not hold, or an unconditional one.
func chain(writes []applied) ([]applied, error) {
	byCond := map[string]applied{}
	for _, w := range writes {
		cond := w.ifMatch
		if w.ifNoneMatch == "*" {
			cond = "absent"
		}
		if cond == "" {
			return nil, fmt.Errorf("unconditional %s of %q applied", w.method, w.key)
		}
		if prev, dup := byCond[cond]; dup {
			return nil, fmt.Errorf("two writes of %q applied on one version %s: tokens %s and %s", w.key, cond, prev.token, w.token)
		}
		byCond[cond] = w
	}
	var out []applied
	for cur := "absent"; ; {
		w, ok := byCond[cur]
		if !ok {
			break
		}
		delete(byCond, cur)
		out = append(out, w)
		if w.method == "DELETE" {
			cur = "absent"
			continue
		}
		cur = w.etag
	}
	if len(byCond) > 0 {
		return out, fmt.Errorf("%d writes applied on versions that never existed", len(byCond))
	}
	return out, nil
}

// staleAccepted counts the writes of an ordered history whose token is
// older than one applied before them (of the same lock), and describes
// the first.
func staleAccepted(h []applied) (int, string, error) {
	var mark fence.Token
	n, first := 0, ""
	for i, w := range h {
		t, err := fence.Parse(w.token)
		if err != nil {
			return 0, "", fmt.Errorf("write %d of %q: token %q: %w", i, w.key, w.token, err)
		}
		if err := fence.Check(mark, t); err != nil {
			if n == 0 {
				first = fmt.Sprintf("write %d of %q with token %d after %d", i, w.key, t.Revision, mark.Revision)
			}
			n++
			continue
		}
		mark = fence.Max(mark, t)
	}
	return n, first, nil
}

// checkHistory orders each key's applied writes and counts the stale
// writes the store accepted, over all keys.
func checkHistory(writes []applied) (ordered map[string][]applied, stale int, first string, err error) {
	byKey := map[string][]applied{}
	for _, w := range writes {
		if !strings.HasPrefix(w.key, ".fencekit-probe/") { // the conformance probe's scratch keys
			byKey[w.key] = append(byKey[w.key], w)
		}
	}
	ordered = map[string][]applied{}
	for k, ws := range byKey {
		h, err := chain(ws)
		if err != nil {
			return nil, 0, "", err
		}
		n, f, err := staleAccepted(h)
		if err != nil {
			return nil, 0, "", err
		}
		if n > 0 && stale == 0 {
			first = f
		}
		stale += n
		ordered[k] = h
	}
	return ordered, stale, first, nil
}
