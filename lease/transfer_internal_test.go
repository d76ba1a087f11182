package lease

import "testing"

// A transfer's note admits its successor without a read: blockers known
// or being read are dropped, and its own record counts as confirmed at
// the transfer's revision. A note for another record under the key (an
// earlier creation revision) changes nothing.
func TestHeadedAdmitsWithoutARead(t *testing.T) {
	const dir = "headed/"
	newWaiter := func() *waiter {
		w := &waiter{key: dir + "c", dir: dir, owner: "tok", wakec: make(chan struct{}, 1)}
		w.fin.Init()
		w.setMyRev(30)
		return w
	}

	t.Run("blockers known", func(t *testing.T) {
		w := newWaiter()
		w.setBlockers(map[string]int64{dir + "a": 10, dir + "b": 20}, 1, 31)
		w.headed(29, 40) // an earlier record under the key
		if w.admitted() {
			t.Fatal("admitted by a note for another record")
		}
		w.headed(30, 40)
		if !w.admitted() {
			t.Fatal("not admitted by the transfer's note")
		}
		if at := w.unconfirmed(); at != 0 {
			t.Fatalf("must confirm its record at %d; the transfer compared it", at)
		}
	})
	t.Run("while reading the queue", func(t *testing.T) {
		w := newWaiter()
		w.reading()
		w.headed(30, 40)
		if w.admitted() {
			t.Fatal("admitted while its queue read is under way")
		}
		// The read, older than the transfer, still lists the records it
		// deleted: none of them blocks any more.
		if !w.setBlockers(map[string]int64{dir + "a": 10, dir + "b": 20}, 1, 35) {
			t.Fatal("a read older than the transfer kept blockers it deleted")
		}
		if at := w.unconfirmed(); at != 0 {
			t.Fatalf("must confirm its record at %d; the transfer compared it", at)
		}
	})
}
