package objguard_test

import (
	"context"
	"testing"

	"github.com/fencekit/fencekit/fence"
)

// TestETagNamesBytes pins the premise of the package documentation's
// "ETags name bytes, not versions": on versitygw, as on S3, two versions
// with the same bytes and different marks have the same ETag, so If-Match
// cannot tell them apart; and two tombstones of one token differ, because
// each carries a nonce.
func TestETagNamesBytes(t *testing.T) {
	ctx := context.Background()
	s := startStore(t)
	g := s.newGuard(t)
	a, b := fence.Token{Lock: "e", Revision: 1}, fence.Token{Lock: "e", Revision: 2}
	v1, err := g.Put(ctx, "e/same", a, []byte("same bytes"))
	if err != nil {
		t.Fatal(err)
	}
	v2, err := g.Put(ctx, "e/same", b, []byte("same bytes"))
	if err != nil {
		t.Fatal(err)
	}
	if v1.ETag != v2.ETag {
		t.Logf("this store's ETags differ for equal bytes (%s, %s): If-Match names versions here", v1.ETag, v2.ETag)
	} else {
		// The limit the rule is for: A wrote X and remembers its ETag; B
		// writes Y and then X again; A's late write on its remembered
		// version passes If-Match. Documented, not prevented: fenced
		// writes must not repeat an earlier version's bytes.
		gA, gB := s.newGuard(t), s.newGuard(t)
		if _, err := gA.Put(ctx, "e/aba", a, []byte("X")); err != nil {
			t.Fatal(err)
		}
		for _, body := range []string{"Y", "X"} {
			if _, err := gB.Put(ctx, "e/aba", b, []byte(body)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := gA.Put(ctx, "e/aba", a, []byte("late")); err != nil {
			t.Logf("A's late write after X, Y, X was refused (%v): this store or Guard closes the ABA case", err)
		} else {
			t.Logf("as documented: A's late write after X, Y, X (equal bytes under token 2) landed")
		}
	}
	if err := g.Delete(ctx, "e/t", b); err != nil {
		t.Fatal(err)
	}
	t1, err := g.Head(ctx, "e/t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Put(ctx, "e/t", b, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := g.Delete(ctx, "e/t", b); err != nil {
		t.Fatal(err)
	}
	t2, err := g.Head(ctx, "e/t")
	if err != nil {
		t.Fatal(err)
	}
	if !t1.Deleted || !t2.Deleted || t1.ETag == t2.ETag {
		t.Errorf("tombstones %+v and %+v: want two tombstones with different ETags", t1, t2)
	}
}
