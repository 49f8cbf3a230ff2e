package xdp

// testPort is the UDP port of the tests' links; it is here, in a file built on every
// platform, for the tests of every platform. Package nexthop's tests use the same port.
const testPort = 4793
