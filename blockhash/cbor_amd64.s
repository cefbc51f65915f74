//go:build !purego

#include "textflag.h"

// func putCBORUintsSSE(dst *byte, ids []uint64, tab *cborPairTable) (written int, high uint64)
//
// Writes len(ids)/4*4 ids below 2^32 as CBOR unsigned integers, four per
// step: each id's class (0: < 24, 1: < 256, 2: < 65536, 3: < 2^32) from
// unsigned compares, then for each pair a PSHUFB with tab's mask for the two
// classes picks the heads and the big-endian value bytes out of the pair's
// low dwords and a register of head bytes (see cborPairTable). Each pair
// stores 16 bytes, of which tab's length count. high is the OR of the ids'
// upper halves: non-zero means an id of 2^32 or more, written wrongly.
TEXT ·putCBORUintsSSE(SB), NOSPLIT, $0-56
	MOVQ  dst+0(FP), DI
	MOVQ  ids_base+8(FP), SI
	MOVQ  ids_len+16(FP), CX
	MOVQ  tab+32(FP), R8
	MOVQ  DI, R9
	SHRQ  $2, CX
	PXOR  X8, X8                 // OR of all ids
	MOVOU ·cborBias(SB), X9
	MOVOU ·cborMax0(SB), X10
	MOVOU ·cborMax1(SB), X11
	MOVOU ·cborMax2(SB), X12
	MOVOU ·cborKeyMul(SB), X13
	MOVOU ·cborHeads(SB), X14
	TESTQ CX, CX
	JZ    done

loop:
	MOVOU      0(SI), X0         // ids 0, 1
	MOVOU      16(SI), X1        // ids 2, 3
	POR        X0, X8
	POR        X1, X8
	PSHUFD     $0x08, X0, X0     // low dwords to lanes 0, 1
	PSHUFD     $0x08, X1, X1
	PUNPCKLQDQ X1, X0            // X0 = [id0 id1 id2 id3] as uint32

	// -class per lane: the number of class maxima (23, 255, 65535) the id
	// exceeds, compared unsigned by flipping the sign bits.
	MOVO    X0, X2
	PXOR    X9, X2
	MOVO    X2, X3
	PCMPGTL X10, X3
	MOVO    X2, X4
	PCMPGTL X11, X4
	PCMPGTL X12, X2
	PADDL   X4, X3
	PADDL   X2, X3
	PMULLD  X13, X3              // [c0, 4*c1, c2, 4*c3]
	PHADDD  X3, X3               // [c0+4*c1, c2+4*c3, ...]: the pairs' table keys
	MOVQ    X3, AX

	// Pair 0, 1: source [id0 id1 | heads].
	MOVO       X0, X5
	PUNPCKLQDQ X14, X5
	MOVL       AX, BX
	MOVBQZX    256(R8)(BX*1), DX // its length
	SHLQ       $4, BX
	PSHUFB     (R8)(BX*1), X5
	MOVOU      X5, 0(DI)
	ADDQ       DX, DI

	// Pair 2, 3: source [id2 id3 | heads].
	PSHUFD     $0x0e, X0, X6
	PUNPCKLQDQ X14, X6
	SHRQ       $32, AX
	MOVBQZX    256(R8)(AX*1), DX
	SHLQ       $4, AX
	PSHUFB     (R8)(AX*1), X6
	MOVOU      X6, 0(DI)
	ADDQ       DX, DI

	ADDQ $32, SI
	DECQ CX
	JNZ  loop

done:
	SUBQ   R9, DI
	MOVQ   DI, written+40(FP)
	PSHUFD $0x0d, X8, X8         // the upper dwords
	MOVQ   X8, AX
	MOVQ   AX, high+48(FP)
	RET

DATA ·cborBias+0(SB)/8, $0x8000000080000000
DATA ·cborBias+8(SB)/8, $0x8000000080000000
GLOBL ·cborBias(SB), RODATA|NOPTR, $16

// The largest id of classes 0, 1 and 2, sign-flipped like the ids.
DATA ·cborMax0+0(SB)/8, $0x8000001780000017
DATA ·cborMax0+8(SB)/8, $0x8000001780000017
GLOBL ·cborMax0(SB), RODATA|NOPTR, $16
DATA ·cborMax1+0(SB)/8, $0x800000ff800000ff
DATA ·cborMax1+8(SB)/8, $0x800000ff800000ff
GLOBL ·cborMax1(SB), RODATA|NOPTR, $16
DATA ·cborMax2+0(SB)/8, $0x8000ffff8000ffff
DATA ·cborMax2+8(SB)/8, $0x8000ffff8000ffff
GLOBL ·cborMax2(SB), RODATA|NOPTR, $16

// -1, -4, -1, -4: the compares give -1 per maximum exceeded.
DATA ·cborKeyMul+0(SB)/8, $0xfffffffcffffffff
DATA ·cborKeyMul+8(SB)/8, $0xfffffffcffffffff
GLOBL ·cborKeyMul(SB), RODATA|NOPTR, $16

// The heads of 1-, 2- and 4-byte values (0x18, 0x19, 0x1a): source bytes 8..10.
DATA ·cborHeads+0(SB)/8, $0x00000000001a1918
DATA ·cborHeads+8(SB)/8, $0
GLOBL ·cborHeads(SB), RODATA|NOPTR, $16
