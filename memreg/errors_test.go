package memreg

import (
	"errors"
	"testing"
)

// TestRefusalsMatchErrAccess: every error of Resolve, Acquire and Invalidate matches
// ErrAccess (the transport's ErrAccess) and its own reason, with no allocation; Invalidate
// of a normal MR's token matches ErrWrongKind too, while ErrWrongKind from a control
// operation (InvalidateMR of a normal MR) is no refused access.
func TestRefusalsMatchErrAccess(t *testing.T) {
	f := newRegFixture(t, MRAllowLocalWrite|MRAllowRemoteRead)
	r, pd, mr := f.r, f.pd, f.mr
	pd2 := r.NewPD()
	tok, va := mr.RemoteToken(), mr.VA()
	for _, c := range []struct {
		name   string
		err    error
		reason error
	}{
		{"Resolve bad token", second(r.Resolve(pd, 0, va, 1, AccessRemoteRead)), ErrBadToken},
		{"Resolve stale", second(r.Resolve(pd, tok^(1<<r.idxBits), va, 1, AccessRemoteRead)), ErrStale},
		{"Resolve wrong PD", second(r.Resolve(pd2, tok, va, 1, AccessRemoteRead)), ErrWrongPD},
		{"Resolve rights", second(r.Resolve(pd, tok, va, 1, AccessRemoteWrite)), ErrRights},
		{"Resolve bounds", second(r.Resolve(pd, tok, va-1, 1, AccessRemoteRead)), ErrBounds},
		{"Acquire bad token", second(r.Acquire(pd, 0, va, 1, AccessRemoteRead)), ErrBadToken},
		{"Acquire wrong PD", second(r.Acquire(pd2, tok, va, 1, AccessRemoteRead)), ErrWrongPD},
		{"Acquire bounds", second(r.Acquire(pd, tok, va+1<<16, 1, AccessRemoteRead)), ErrBounds},
		{"Invalidate wrong kind", r.Invalidate(pd, tok), ErrWrongKind},
		{"Invalidate local token", r.Invalidate(pd, mr.LocalToken()), ErrWrongKind},
		{"Invalidate wrong PD", r.Invalidate(pd2, tok), ErrWrongPD},
	} {
		if !errors.Is(c.err, ErrAccess) || !errors.Is(c.err, c.reason) {
			t.Errorf("%s: %v, want an error matching ErrAccess and %v", c.name, c.err, c.reason)
		}
	}
	if err := r.InvalidateMR(mr); !errors.Is(err, ErrWrongKind) || errors.Is(err, ErrAccess) {
		t.Errorf("InvalidateMR of a normal MR: %v, want ErrWrongKind and no refused access", err)
	}
	if errors.Is(ErrWrongKind, ErrAccess) {
		t.Error("ErrWrongKind matches ErrAccess")
	}
	if n := testing.AllocsPerRun(1000, func() {
		_ = r.Invalidate(pd, tok)
		_, _ = r.Acquire(pd2, tok, va, 1, AccessRemoteRead)
	}); n != 0 {
		t.Errorf("refusing allocates %v times", n)
	}
}

func second[T any](_ T, err error) error { return err }
