package ndk

import (
	"github.com/xdpndk/xdpndk/internal/plumb"
	"github.com/xdpndk/xdpndk/transport"
	"github.com/xdpndk/xdpndk/transport/link"
)

// The module's own commands, benchmarks and tests reach the engine under an adapter
// through internal/plumb; applications use the public API only.
func init() {
	plumb.SetExtra = func(opts any, x plumb.Extra) { opts.(*Options).x = x }
	plumb.Engine = func(a any) *transport.Engine { return a.(*Adapter).engs[0].eng }
	plumb.Group = func(a any) *transport.Group { return a.(*Adapter).grp }
	plumb.Link = func(a any) link.Link { return a.(*Adapter).link }
	plumb.QP = func(q any) *transport.QP { return q.(*QP).tq }
}
