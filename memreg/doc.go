// Package memreg owns the memory that packets and remote peers touch: the pinned UMEM that
// every AF_XDP socket of an adapter shares, its packet frame pools, and (in later steps) the
// heap of registrable buffers, memory regions, windows and tokens.
//
// Layout of a UMEM:
//
//	offset 0                       FrameAreaEnd()                          Size()
//	|  frame | frame | ... | frame  |  heap for registrable application buffers  |
//	 \_ pool of socket 0 _/\_ pool of socket 1 _/ ...
//
// Each AF_XDP socket (one per interface queue, one engine each) gets its own FramePool carved
// from the frame area, so frames move between the engine and the kernel rings without locks or
// allocation. The UMEM is mmap'd, populated and mlock'd so the kernel can hold references to it
// at any time; it tries hugetlb pages, then transparent huge pages, and reports which it got.
//
// memreg is also the home of the memory vocabulary that the transport's resolver contract
// speaks: Access, PD, Span and ErrAccess, which every refused access matches. Package
// transport's Access, AccessRemoteRead, AccessRemoteWrite and ErrAccess are these, and
// Registry has the method set of transport.MemoryResolver (Acquire, Invalidate), so an
// adapter's registry is its engine's resolver with no conversion in between.
package memreg
