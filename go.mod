module github.com/xdpndk/xdpndk

go 1.25.0

require (
	github.com/asavie/xdp v0.3.3
	github.com/cilium/ebpf v0.22.0
	github.com/vishvananda/netlink v1.3.1
	golang.org/x/sys v0.47.0
)

require github.com/vishvananda/netns v0.0.5

tool github.com/cilium/ebpf/cmd/bpf2go
