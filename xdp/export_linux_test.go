package xdp

// zcPending reports whether datagrams with referenced segments await completion (for the
// tests: the link's zcState.pending).
func (l *Link) zcPending() bool { return l.zc.pending() }
