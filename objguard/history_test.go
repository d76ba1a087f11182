package objguard_test

import (
	"fmt"
	"strings"

	"github.com/fencekit/fencekit/fence"
)

// chain orders the applied writes of one key as the store applied them,
// from the conditions they carried: the first write is the one that
// created the key (If-None-Match: *), and each next one is the write
// whose If-Match is the ETag the previous one produced. Tests write unique
// bytes per call and tombstones carry a nonce, so ETags repeat only when a
// Guard sends the same bytes again after a lost reply (it re-reads, finds
// its own version, and writes it once more): such a write is conditional
// on the ETag it produces, a loop applied right where that version is
// current, and it must carry that version's token (anything else would
// make the order ambiguous, and is reported). It returns an error when a
// write does not fit on the chain: a write the store applied though its
// condition did not hold, or an unconditional one.
func chain(writes []applied) ([]applied, error) {
	next := map[string]applied{}    // condition -> the write that moved on from it
	loops := map[string][]applied{} // condition -> writes of the same bytes again
	for _, w := range writes {
		cond := w.ifMatch
		if w.ifNoneMatch == "*" {
			cond = "absent"
		}
		switch {
		case cond == "":
			return nil, fmt.Errorf("unconditional %s of %q applied", w.method, w.key)
		case w.method == "PUT" && cond == w.etag:
			loops[cond] = append(loops[cond], w)
			continue
		}
		if prev, dup := next[cond]; dup {
			return nil, fmt.Errorf("two writes of %q applied on one version %s: tokens %s and %s", w.key, cond, prev.token, w.token)
		}
		next[cond] = w
	}
	var out []applied
	for cur := "absent"; ; {
		w, ok := next[cur]
		if !ok {
			break
		}
		delete(next, cur)
		out = append(out, w)
		if w.method == "DELETE" {
			cur = "absent"
			continue
		}
		cur = w.etag
		for _, l := range loops[cur] {
			if l.token != w.token {
				return nil, fmt.Errorf("%q: the bytes of token %s's version written again by token %s", w.key, w.token, l.token)
			}
			out = append(out, l)
		}
		delete(loops, cur)
	}
	if len(next)+len(loops) > 0 {
		return out, fmt.Errorf("%d writes applied on versions that never existed", len(next)+len(loops))
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
