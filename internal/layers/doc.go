// Package layers holds the test that enforces the import rules of docs/ARCHITECTURE.md over
// the module's packages (their non-test dependencies, as `go list -deps` reports them):
//
//   - transport/link and bpf import nothing of the module: they are leaves;
//   - transport and its subpackages never import xdp, bpf, ndk, cmd or bench (the engine runs on
//     any link and knows no AF_XDP);
//   - memreg imports nothing of transport, xdp, bpf or ndk (memory is below the engine);
//   - xdp imports of the engine only its link contract (transport/link), and xdp's lower
//     layer (its subpackages: sockets, rings, framing) imports neither transport nor any
//     netlink package;
//   - commands (cmd/...) never import bench/..., and nothing imports cmd/...;
//   - ndk imports nothing of bench, cmd or the test helpers; of internal/ only internal/plumb,
//     the hooks through which the module's own tools reach the engine under an adapter,
//     which imports nothing above the engine;
//   - the examples (examples/...) import of the module only ndk and xdp directly: they use
//     the public API, as a user's program does.
//
// It has no code of its own to import.
package layers
