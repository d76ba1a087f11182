package lease

// opKind is a call that changes a lease's hold count.
type opKind uint8

const (
	opRenew opKind = iota
	opRelease
	opReenter
	opProclaim
	opTransfer // Term.Transfer: not a change of the hold count, counted with them
)

func (k opKind) String() string {
	switch k {
	case opRelease:
		return "release"
	case opReenter:
		return "reenter"
	case opProclaim:
		return "proclaim"
	case opTransfer:
		return "transfer"
	}
	return "renew"
}

// delta is the change k makes to the hold count.
func (k opKind) delta() int {
	switch k {
	case opRelease:
		return -1
	case opReenter:
		return 1
	}
	return 0
}
