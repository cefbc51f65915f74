//go:build !purego

#include "textflag.h"

// func plainRun16(s []byte, i int) int
//
// A byte is plain when it is not '"', not '\\' and, as a signed byte, not
// below 0x20 (which catches the controls and every byte of 0x80 or more):
// PCMPEQB twice and PCMPGTB once a sixteen-byte block, PMOVMSKB and BSF to
// find the first byte that is not.
TEXT ·plainRun16(SB), NOSPLIT, $0-40
	MOVQ s_base+0(FP), SI
	MOVQ s_len+8(FP), BX
	MOVQ i+24(FP), AX
	MOVQ $0x2222222222222222, DX
	MOVQ DX, X1
	PUNPCKLQDQ X1, X1
	MOVQ $0x5c5c5c5c5c5c5c5c, DX
	MOVQ DX, X2
	PUNPCKLQDQ X2, X2
	MOVQ $0x2020202020202020, DX
	MOVQ DX, X3
	PUNPCKLQDQ X3, X3

loop:
	LEAQ 16(AX), CX
	CMPQ CX, BX
	JA   done
	MOVOU (SI)(AX*1), X0
	MOVO  X0, X4
	PCMPEQB X1, X4
	MOVO  X0, X5
	PCMPEQB X2, X5
	POR   X5, X4
	MOVO  X3, X5
	PCMPGTB X0, X5
	POR   X5, X4
	PMOVMSKB X4, DX
	TESTL DX, DX
	JNZ  found
	MOVQ CX, AX
	JMP  loop

found:
	BSFL DX, DX
	ADDQ DX, AX

done:
	MOVQ AX, ret+32(FP)
	RET
