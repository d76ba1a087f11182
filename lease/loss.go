package lease

// relState says whether a delete of a held lease's record may be its
// holder's own Release of the last hold. It is the records table's state,
// kept on the Lease (Lease.rel, Lease.sawDelete) under the table's lock.
type relState uint8

const (
	relNone     relState = iota
	relInFlight          // such a Release waits for etcd's reply: the reply decides
	relPending           // such a Release returned with an unknown outcome: a delete is it
)

// startRelease marks l's Release of its last hold as in flight and reports
// whether the table still tracks l's record. When it does not, the record
// was already seen gone or the lease has ended: a delete of it cannot be
// this Release's, and an unknown outcome must not be taken for one.
func (t *records) startRelease(l *Lease) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held[l.key] != l {
		return false
	}
	l.rel, l.sawDelete = relInFlight, false
	return true
}

// settleRelease sets l's release state after a call: pending while a
// Release of the last hold has an unknown outcome, none otherwise. It
// reports (forgetting it) whether the watch saw the record deleted while
// a Release was in flight.
func (t *records) settleRelease(l *Lease, pending bool) (sawDelete bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l.rel = relNone
	if pending {
		l.rel = relPending
	}
	sawDelete, l.sawDelete = l.sawDelete, false
	return sawDelete
}

// recordGone handles a held lease whose record is gone, and appends to
// ends the lease to end once t.mu is released, if any. A delete while its
// last-hold Release is in flight is left to that Release to judge; a
// delete after it returned with an unknown outcome is that Release taking
// effect; any other delete is a loss, whose cause (ErrSessionExpired or
// ErrKeyDeleted) the Client finds out in the background. t.mu is held,
// and the table is not closed.
func (t *records) recordGone(l *Lease, ends []ending) []ending {
	switch l.rel {
	case relInFlight:
		l.sawDelete = true
		return ends
	case relPending:
		t.finish(l, true)
		return append(ends, ending{l, ErrReleased})
	}
	t.finish(l, true)
	if l.sess.noteDeleted(l) {
		t.keeper.checkGone(l.sess)
	}
	return ends
}
