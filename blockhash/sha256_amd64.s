//go:build !purego

#include "go_asm.h"
#include "textflag.h"

// SHA-256 (FIPS 180-4) with the x86 SHA extensions. Source of truth for the
// instructions and the ABEF/CDGH state layout: Intel, "Intel SHA Extensions:
// New Instructions Supporting the Secure Hash Algorithm on Intel Architecture
// Processors" (July 2013).
//
// SHA256RNDS2 runs two rounds: it reads C,D,G,H from its destination, A,B,E,F
// from its source and W[t]+K[t], W[t+1]+K[t+1] from the low half of X0, and
// writes the new A,B,E,F to its destination. Two rounds later the old A,B,E,F
// are exactly the new C,D,G,H, so two registers alternate roles.

#define ABEF X1
#define CDGH X2
#define FLIP X8

// ROUNDS4 runs rounds t..t+3 with the message words w = W[t..t+3]; off is
// 4*t, the offset of K[t] in sha256K.
#define ROUNDS4(w, off) \
	MOVO        w, X0; \
	PADDL       (off)(AX), X0; \
	SHA256RNDS2 X0, ABEF, CDGH; \
	PSHUFD      $0x0e, X0, X0; \
	SHA256RNDS2 X0, CDGH, ABEF

// SCHEDULE turns a = W[t-16..t-13] into W[t..t+3], given b = W[t-12..t-9],
// c = W[t-8..t-5] and d = W[t-4..t-1]: MSG1 adds σ0, PALIGNR picks W[t-7..t-4],
// MSG2 adds σ1 (which needs W[t..t+1] for W[t+2..t+3], hence the instruction).
#define SCHEDULE(a, b, c, d) \
	SHA256MSG1 b, a; \
	MOVO       d, X7; \
	PALIGNR    $4, c, X7; \
	PADDL      X7, a; \
	SHA256MSG2 d, a

// BLOCK12 is rounds 16..63 after the first 16: twelve groups of four.
#define BLOCK12 \
	SCHEDULE(X3, X4, X5, X6); ROUNDS4(X3, 64); \
	SCHEDULE(X4, X5, X6, X3); ROUNDS4(X4, 80); \
	SCHEDULE(X5, X6, X3, X4); ROUNDS4(X5, 96); \
	SCHEDULE(X6, X3, X4, X5); ROUNDS4(X6, 112); \
	SCHEDULE(X3, X4, X5, X6); ROUNDS4(X3, 128); \
	SCHEDULE(X4, X5, X6, X3); ROUNDS4(X4, 144); \
	SCHEDULE(X5, X6, X3, X4); ROUNDS4(X5, 160); \
	SCHEDULE(X6, X3, X4, X5); ROUNDS4(X6, 176); \
	SCHEDULE(X3, X4, X5, X6); ROUNDS4(X3, 192); \
	SCHEDULE(X4, X5, X6, X3); ROUNDS4(X4, 208); \
	SCHEDULE(X5, X6, X3, X4); ROUNDS4(X5, 224); \
	SCHEDULE(X6, X3, X4, X5); ROUNDS4(X6, 240)

// LOADW loads W[0..15] of the 64-byte block at p into X3..X6 as big-endian
// words.
#define LOADW(p) \
	MOVOU  0(p), X3; \
	PSHUFB FLIP, X3; \
	MOVOU  16(p), X4; \
	PSHUFB FLIP, X4; \
	MOVOU  32(p), X5; \
	PSHUFB FLIP, X5; \
	MOVOU  48(p), X6; \
	PSHUFB FLIP, X6

// BLOCK64 is the 64 rounds of one block whose W[0..15] are in X3..X6, added
// to the chaining value kept in X9, X10.
#define BLOCK64 \
	ROUNDS4(X3, 0); \
	ROUNDS4(X4, 16); \
	ROUNDS4(X5, 32); \
	ROUNDS4(X6, 48); \
	BLOCK12; \
	PADDL  X9, ABEF; \
	PADDL  X10, CDGH

// func sum256SHANI(out *[32]byte, padded []byte)
// padded is a whole padded message: len(padded) is a positive multiple of 64.
TEXT ·sum256SHANI(SB), NOSPLIT, $0-32
	MOVQ  out+0(FP), DI
	MOVQ  padded_base+8(FP), SI
	MOVQ  padded_len+16(FP), DX
	SHRQ  $6, DX                 // DX = number of 64-byte blocks
	LEAQ  sha256K<>(SB), AX
	MOVOU sha256Flip<>(SB), FLIP
	MOVOU sha256IVABEF<>(SB), ABEF
	MOVOU sha256IVCDGH<>(SB), CDGH

block:
	MOVO   ABEF, X9              // keep the chaining value for the final addition
	MOVO   CDGH, X10
	LOADW(SI)
	BLOCK64
	ADDQ   $64, SI
	DECQ   DX
	JNZ    block

	// ABEF = [F E B A], CDGH = [H G D C] (lowest lane first) back to
	// [A B C D], [E F G H], then each word big-endian.
	PSHUFD  $0x1b, ABEF, ABEF    // [A B E F]
	PSHUFD  $0xb1, CDGH, CDGH    // [G H C D]
	MOVO    ABEF, X7
	PBLENDW $0xf0, CDGH, ABEF    // [A B C D]
	PALIGNR $8, X7, CDGH         // [E F G H]
	PSHUFB  FLIP, ABEF
	PSHUFB  FLIP, CDGH
	MOVOU   ABEF, 0(DI)
	MOVOU   CDGH, 16(DI)
	RET

// func chainSHA256CBOR(parent *[32]byte, ids []uint64, blocks int, p *chainParams, out unsafe.Pointer) (high uint64)
//
// The sha256_cbor chain of blocks (> 0) blocks of p.quads*4 ids each, from
// the parent digest *parent, which it leaves holding the last block's
// digest, each block's result stored from out on: its event
// value (p.digests false: the last 8 digest bytes read big-endian, a
// uint64) or its Digest (32 bytes and the length). One loop encodes block
// i+1's preimage into one slot of p.ring while it hashes block i's from the
// other: the encoding does not depend on the chain, so it runs in the
// shadow of the rounds' latency. A preimage is written with its 32 parent
// bytes (offsets 3..34) zero, and the previous digest is spliced into the
// first message block from registers (X11, X12), never stored and reloaded
// on the chain.
//
// A preimage: p.head (the 3-tuple's head, a bytes(32) head, zeros, the
// tokens' array head; p.headLen bytes), the ids as putCBORUintsSSE writes
// them, the block's extra keys (p.extra0Len bytes of p.extra0 for the
// first block, p.extraLen of p.extra after it; both readable 16 bytes past
// the end), then the SHA-256 padding. A slot is p.stride bytes, room for all
// of it and the 16-byte stores running past each part. high is the OR of
// the ids' upper halves: non-zero means an id of 2^32 or more, written
// wrongly, and the results are to be discarded.
//
// Registers: R8 p, SI the next id, DI the next result, CX blocks left to
// encode, R11 the slot being encoded (R12 its write position), R10 the
// slot to hash with R13 64-byte blocks (0: none yet, so the block being
// encoded is the first), BX the encoded slot's blocks, X13 the OR of the ids.
TEXT ·chainSHA256CBOR(SB), NOSPLIT, $0-64
	MOVQ  parent+0(FP), R9
	MOVQ  ids_base+8(FP), SI
	MOVQ  blocks+32(FP), CX
	MOVQ  p+40(FP), R8
	MOVQ  out+48(FP), DI
	MOVOU sha256Flip<>(SB), FLIP
	MOVOU 0(R9), X11
	MOVOU 16(R9), X12
	PXOR  X13, X13
	MOVQ  chainParams_ring(R8), R11
	MOVQ  chainParams_stride(R8), R10
	ADDQ  R11, R10
	XORL  R13, R13

chainstep:
	XORL  BX, BX
	TESTQ CX, CX
	JZ    chainhash

	// Encode the next block into R11: the head, ...
	MOVOU chainParams_head(R8), X0
	MOVOU X0, 0(R11)
	MOVOU 16+chainParams_head(R8), X0
	MOVOU X0, 16(R11)
	MOVOU 32+chainParams_head(R8), X0
	MOVOU X0, 32(R11)
	MOVQ  chainParams_headLen(R8), R12
	ADDQ  R11, R12

	// ... the ids, four at a time as in putCBORUintsSSE (cbor_amd64.s), ...
	MOVQ  chainParams_pairs(R8), AX
	MOVQ  chainParams_quads(R8), R9
	MOVOU ·cborBias(SB), X9
	MOVOU ·cborMax0(SB), X10
	MOVOU ·cborMax1(SB), X14
	MOVOU ·cborMax2(SB), X7
	MOVOU ·cborKeyMul(SB), X6
	MOVOU ·cborHeads(SB), X5

chainids:
	MOVOU      0(SI), X0
	MOVOU      16(SI), X1
	POR        X0, X13
	POR        X1, X13
	PSHUFD     $0x08, X0, X0
	PSHUFD     $0x08, X1, X1
	PUNPCKLQDQ X1, X0
	MOVO       X0, X2
	PXOR       X9, X2
	MOVO       X2, X3
	PCMPGTL    X10, X3
	MOVO       X2, X4
	PCMPGTL    X14, X4
	PCMPGTL    X7, X2
	PADDL      X4, X3
	PADDL      X2, X3
	PMULLD     X6, X3
	PHADDD     X3, X3
	MOVQ       X3, BX

	MOVO       X0, X1
	PUNPCKLQDQ X5, X1
	MOVL       BX, DX
	SHLQ       $4, DX
	PSHUFB     (AX)(DX*1), X1
	MOVOU      X1, 0(R12)
	SHRQ       $4, DX
	MOVBQZX    256(AX)(DX*1), DX
	ADDQ       DX, R12

	PSHUFD     $0x0e, X0, X2
	PUNPCKLQDQ X5, X2
	SHRQ       $32, BX
	SHLQ       $4, BX
	PSHUFB     (AX)(BX*1), X2
	MOVOU      X2, 0(R12)
	SHRQ       $4, BX
	MOVBQZX    256(AX)(BX*1), BX
	ADDQ       BX, R12

	ADDQ $32, SI
	DECQ R9
	JNZ  chainids

	// ... the extra keys, 16 bytes at a time, ...
	MOVQ  chainParams_extra(R8), BX
	MOVQ  chainParams_extraLen(R8), DX
	TESTQ R13, R13
	JNZ   chainextrahead
	MOVQ  chainParams_extra0(R8), BX
	MOVQ  chainParams_extra0Len(R8), DX

chainextrahead:
	LEAQ (R12)(DX*1), R9

chainextra:
	MOVOU 0(BX), X0
	MOVOU X0, 0(R12)
	ADDQ  $16, BX
	ADDQ  $16, R12
	SUBQ  $16, DX
	JGT   chainextra

	// ... and the padding: 0x80, zeros, the length in bits at the end of
	// the last 64-byte block.
	MOVB  $0x80, 0(R9)
	PXOR  X0, X0
	MOVOU X0, 1(R9)
	MOVOU X0, 17(R9)
	MOVOU X0, 33(R9)
	MOVOU X0, 49(R9)
	SUBQ  R11, R9                // the preimage's length
	LEAQ  72(R9), BX
	ANDQ  $-64, BX               // padded
	SHLQ  $3, R9
	BSWAPQ R9
	MOVQ  R9, -8(R11)(BX*1)
	SHRQ  $6, BX                 // its 64-byte blocks
	DECQ  CX

chainhash:
	TESTQ R13, R13
	JZ    chainnext

	// Hash the slot R10 (R13 blocks): the first block is bytes 0..15 =
	// head | parent[0..12], 16..31 = parent[13..28], 32..47 = parent[29..31]
	// | memory, 48..63 = memory.
	LEAQ    sha256K<>(SB), AX
	MOVQ    R10, R12
	MOVOU   sha256IVABEF<>(SB), ABEF
	MOVOU   sha256IVCDGH<>(SB), CDGH
	MOVO    ABEF, X9
	MOVO    CDGH, X10
	MOVO    X11, X3
	PSLLDQ  $3, X3
	MOVOU   0(R12), X0
	POR     X0, X3
	PSHUFB  FLIP, X3
	MOVO    X12, X4
	PALIGNR $13, X11, X4
	PSHUFB  FLIP, X4
	MOVO    X12, X5
	PSRLDQ  $13, X5
	MOVOU   32(R12), X0
	POR     X0, X5
	PSHUFB  FLIP, X5
	MOVOU   48(R12), X6
	PSHUFB  FLIP, X6
	JMP     chainrounds

chainblock:
	MOVO   ABEF, X9
	MOVO   CDGH, X10
	LOADW(R12)

chainrounds:
	BLOCK64
	ADDQ  $64, R12
	DECQ  R13
	JNZ   chainblock

	// The digest bytes, as at the end of sum256SHANI, into X11, X12.
	PSHUFD  $0x1b, ABEF, X11
	PSHUFD  $0xb1, CDGH, X12
	MOVO    X11, X7
	PBLENDW $0xf0, X12, X11
	PALIGNR $8, X7, X12
	PSHUFB  FLIP, X11
	PSHUFB  FLIP, X12
	CMPB    chainParams_digests(R8), $0
	JNE     chaindigest
	PEXTRQ  $1, X12, AX          // digest bytes 24..31
	BSWAPQ  AX
	MOVQ    AX, 0(DI)
	ADDQ    $8, DI
	JMP     chainnext

chaindigest:
	MOVOU X11, 0(DI)
	MOVOU X12, 16(DI)
	MOVB  $32, Digest_n(DI)
	ADDQ  $Digest__size, DI

chainnext:
	MOVQ  BX, R13                // the slot just encoded is hashed next
	XCHGQ R10, R11
	TESTQ R13, R13
	JNZ   chainstep

	MOVQ   parent+0(FP), R9      // the last digest, for a next call to chain on
	MOVOU  X11, 0(R9)
	MOVOU  X12, 16(R9)
	PSHUFD $0x0d, X13, X13       // the ids' upper dwords
	MOVQ   X13, AX
	MOVQ   AX, high+56(FP)
	RET

// func cpuid(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL subleaf+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// PSHUFB mask reversing the bytes of each 32-bit lane.
DATA sha256Flip<>+0(SB)/8, $0x0405060700010203
DATA sha256Flip<>+8(SB)/8, $0x0c0d0e0f08090a0b
GLOBL sha256Flip<>(SB), RODATA|NOPTR, $16

// The initial hash value H(0) in the SHA256RNDS2 layout: [F E B A], [H G D C].
DATA sha256IVABEF<>+0(SB)/4, $0x9b05688c
DATA sha256IVABEF<>+4(SB)/4, $0x510e527f
DATA sha256IVABEF<>+8(SB)/4, $0xbb67ae85
DATA sha256IVABEF<>+12(SB)/4, $0x6a09e667
GLOBL sha256IVABEF<>(SB), RODATA|NOPTR, $16
DATA sha256IVCDGH<>+0(SB)/4, $0x5be0cd19
DATA sha256IVCDGH<>+4(SB)/4, $0x1f83d9ab
DATA sha256IVCDGH<>+8(SB)/4, $0xa54ff53a
DATA sha256IVCDGH<>+12(SB)/4, $0x3c6ef372
GLOBL sha256IVCDGH<>(SB), RODATA|NOPTR, $16

// The round constants K[0..63].
DATA sha256K<>+0(SB)/4, $0x428a2f98
DATA sha256K<>+4(SB)/4, $0x71374491
DATA sha256K<>+8(SB)/4, $0xb5c0fbcf
DATA sha256K<>+12(SB)/4, $0xe9b5dba5
DATA sha256K<>+16(SB)/4, $0x3956c25b
DATA sha256K<>+20(SB)/4, $0x59f111f1
DATA sha256K<>+24(SB)/4, $0x923f82a4
DATA sha256K<>+28(SB)/4, $0xab1c5ed5
DATA sha256K<>+32(SB)/4, $0xd807aa98
DATA sha256K<>+36(SB)/4, $0x12835b01
DATA sha256K<>+40(SB)/4, $0x243185be
DATA sha256K<>+44(SB)/4, $0x550c7dc3
DATA sha256K<>+48(SB)/4, $0x72be5d74
DATA sha256K<>+52(SB)/4, $0x80deb1fe
DATA sha256K<>+56(SB)/4, $0x9bdc06a7
DATA sha256K<>+60(SB)/4, $0xc19bf174
DATA sha256K<>+64(SB)/4, $0xe49b69c1
DATA sha256K<>+68(SB)/4, $0xefbe4786
DATA sha256K<>+72(SB)/4, $0x0fc19dc6
DATA sha256K<>+76(SB)/4, $0x240ca1cc
DATA sha256K<>+80(SB)/4, $0x2de92c6f
DATA sha256K<>+84(SB)/4, $0x4a7484aa
DATA sha256K<>+88(SB)/4, $0x5cb0a9dc
DATA sha256K<>+92(SB)/4, $0x76f988da
DATA sha256K<>+96(SB)/4, $0x983e5152
DATA sha256K<>+100(SB)/4, $0xa831c66d
DATA sha256K<>+104(SB)/4, $0xb00327c8
DATA sha256K<>+108(SB)/4, $0xbf597fc7
DATA sha256K<>+112(SB)/4, $0xc6e00bf3
DATA sha256K<>+116(SB)/4, $0xd5a79147
DATA sha256K<>+120(SB)/4, $0x06ca6351
DATA sha256K<>+124(SB)/4, $0x14292967
DATA sha256K<>+128(SB)/4, $0x27b70a85
DATA sha256K<>+132(SB)/4, $0x2e1b2138
DATA sha256K<>+136(SB)/4, $0x4d2c6dfc
DATA sha256K<>+140(SB)/4, $0x53380d13
DATA sha256K<>+144(SB)/4, $0x650a7354
DATA sha256K<>+148(SB)/4, $0x766a0abb
DATA sha256K<>+152(SB)/4, $0x81c2c92e
DATA sha256K<>+156(SB)/4, $0x92722c85
DATA sha256K<>+160(SB)/4, $0xa2bfe8a1
DATA sha256K<>+164(SB)/4, $0xa81a664b
DATA sha256K<>+168(SB)/4, $0xc24b8b70
DATA sha256K<>+172(SB)/4, $0xc76c51a3
DATA sha256K<>+176(SB)/4, $0xd192e819
DATA sha256K<>+180(SB)/4, $0xd6990624
DATA sha256K<>+184(SB)/4, $0xf40e3585
DATA sha256K<>+188(SB)/4, $0x106aa070
DATA sha256K<>+192(SB)/4, $0x19a4c116
DATA sha256K<>+196(SB)/4, $0x1e376c08
DATA sha256K<>+200(SB)/4, $0x2748774c
DATA sha256K<>+204(SB)/4, $0x34b0bcb5
DATA sha256K<>+208(SB)/4, $0x391c0cb3
DATA sha256K<>+212(SB)/4, $0x4ed8aa4a
DATA sha256K<>+216(SB)/4, $0x5b9cca4f
DATA sha256K<>+220(SB)/4, $0x682e6ff3
DATA sha256K<>+224(SB)/4, $0x748f82ee
DATA sha256K<>+228(SB)/4, $0x78a5636f
DATA sha256K<>+232(SB)/4, $0x84c87814
DATA sha256K<>+236(SB)/4, $0x8cc70208
DATA sha256K<>+240(SB)/4, $0x90befffa
DATA sha256K<>+244(SB)/4, $0xa4506ceb
DATA sha256K<>+248(SB)/4, $0xbef9a3f7
DATA sha256K<>+252(SB)/4, $0xc67178f2
GLOBL sha256K<>(SB), RODATA|NOPTR, $256
