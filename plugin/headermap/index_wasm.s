#include "textflag.h"

// SLOT pushes the address of found[j] (R12 + 8*R10).
#define SLOT \
	Get R12; \
	Get R10; \
	I64Const $3; \
	I64Shl; \
	I64Add; \
	I32WrapI64

// NAMES pushes the address of names[j]'s string header (R8 + 16*R10).
#define NAMES \
	Get R8; \
	Get R10; \
	I64Const $4; \
	I64Shl; \
	I64Add; \
	I32WrapI64

// COMPARE branches to differ when the pair's name (at R0+R3) and
// names[j] (at R11) differ in the LOAD-sized word at the offset OFFSET
// pushes.
#define COMPARE(LOAD, OFFSET) \
	Get R0; \
	Get R3; \
	I64Add; \
	OFFSET; \
	I64Add; \
	I32WrapI64; \
	LOAD $0; \
	Get R11; \
	OFFSET; \
	I64Add; \
	I32WrapI64; \
	LOAD $0; \
	I64Ne; \
	BrIf differ

// func Index(b []byte, names []string, mask uint64, found []uint64) int
//
// indexGo in headermap.go, step by step, as WebAssembly loops: Go's
// WebAssembly code sends every branch of a loop through its function's
// dispatch table and keeps its values in memory, which made the Go pass
// cost four times this one under WAMR's fast JIT.
//
// Registers: R0 b's address, R1 len(b), R2 the pair's offset in the
// lengths (i), R3 where its name starts (data), R4 mask, R5 where the
// lengths end (lensEnd), R6 the name's length, R7 where the pair ends,
// R8 names' address, R9 len(names), R10 the name index j, R11 names[j]'s
// address, R12 found's address, R13 the offset compared, R14 the result, R15
// the names found.
TEXT ·Index(SB), NOSPLIT, $0-88
	I64Load b_base+0(FP)
	Set R0
	I64Load b_len+8(FP)
	Set R1
	I64Load names_base+24(FP)
	Set R8
	I64Load names_len+32(FP)
	Set R9
	I64Load mask+48(FP)
	Set R4
	I64Load found_base+56(FP)
	Set R12
	I64Const $-1
	Set R14
	I64Const $0
	Set R15

done:
	Block
		// found holds a slot per name; clear them.
		I64Load found_len+64(FP)
		Get R9
		I64LtU
		BrIf done
		I64Const $0
		Set R10
	cleared:
		Block
		clear:
			Loop
				Get R10
				Get R9
				I64GeU
				BrIf cleared
				SLOT
				I64Const $0
				I64Store $0
				Get R10
				I64Const $1
				I64Add
				Set R10
				Br clear
			End
		End

		// An empty b is the empty map.
		I64Const $0
		Set R14
		Get R1
		I64Eqz
		BrIf done
		I64Const $-1
		Set R14

		// The count, and at least 10 bytes for each pair after it.
		Get R1
		I64Const $4
		I64LtU
		BrIf done
		Get R0
		I32WrapI64
		I64Load32U $0
		Set R5
		Get R5
		I64Const $10
		I64Mul
		Get R1
		I64Const $4
		I64Sub
		I64GtU
		BrIf done
		Get R5
		I64Const $3
		I64Shl
		Set R5
		Get R5
		I64Const $4
		I64Add
		Set R3
		I64Const $0
		Set R2

	pairs:
		Loop
		candidate:
			Block
			skip:
				Loop
					// After the last pair: the pairs must end where b ends.
					Get R2
					Get R5
					I64GeU
					If
						Get R3
						Get R1
						I64Eq
						If
							Get R15
							Set R14
						End
						Br done
					End

					// R6 = the name's length, R7 = data + name + NUL +
					// value + NUL, from the pair's two lengths in one load.
					Get R0
					Get R2
					I64Add
					I32WrapI64
					I64Load $4
					Tee R6
					I64Const $32
					I64ShrU
					Get R6
					I64Const $0xffffffff
					I64And
					Tee R6
					I64Add
					Get R3
					I64Add
					I64Const $2
					I64Add
					Set R7

					// A name of a length in mask (mod 64) is compared.
					Get R4
					Get R6
					I64ShrU
					I32WrapI64
					I32Const $1
					I32And
					BrIf candidate

					Get R7
					Set R3
					Get R2
					I64Const $8
					I64Add
					Set R2
					Br skip
				End
			End

			// A pair it compares lies in b, with a NUL after its name
			// and after its value (R14 is -1 here).
			Get R7
			Get R1
			I64GtU
			BrIf done
			Get R0
			Get R3
			I64Add
			Get R6
			I64Add
			I32WrapI64
			I32Load8U $0
			BrIf done
			Get R0
			Get R7
			I64Add
			I64Const $1
			I64Sub
			I32WrapI64
			I32Load8U $0
			BrIf done

			I64Const $0
			Set R10
		next:
			Block
			names:
				Loop
					Get R10
					Get R9
					I64GeU
					BrIf next

					// names[j] of the name's length: compare them.
					NAMES
					I64Load $8
					Get R6
					I64Eq
					If
						NAMES
						I64Load $0
						Set R11
					differ:
						Block
							// 8 bytes at a time, the last 8 overlapping
							// the ones before; shorter names in two
							// overlapping halves.
							Get R6
							I64Const $8
							I64GeU
							If
								I64Const $0
								Set R13
							words:
								Loop
									Get R13
									I64Const $8
									I64Add
									Get R6
									I64LtU
									If
										COMPARE(I64Load, Get R13)
										Get R13
										I64Const $8
										I64Add
										Set R13
										Br words
									End
								End
								COMPARE(I64Load, Get R6; I64Const $8; I64Sub)
							Else
								Get R6
								I64Const $4
								I64GeU
								If
									COMPARE(I64Load32U, I64Const $0)
									COMPARE(I64Load32U, Get R6; I64Const $4; I64Sub)
								Else
									Get R6
									I64Const $2
									I64GeU
									If
										COMPARE(I64Load16U, I64Const $0)
										COMPARE(I64Load16U, Get R6; I64Const $2; I64Sub)
									Else
										Get R6
										I64Eqz
										I32Eqz
										If
											COMPARE(I64Load8U, I64Const $0)
										End
									End
								End
							End

							// The name is names[j]: keep its first value,
							// (offset << 32) | length.
							SLOT
							I64Load $0
							I64Eqz
							If
								SLOT
								Get R3
								Get R6
								I64Add
								I64Const $1
								I64Add
								I64Const $32
								I64Shl
								Get R7
								Get R3
								I64Sub
								Get R6
								I64Sub
								I64Const $2
								I64Sub
								I64Or
								I64Store $0
								Get R15
								I64Const $1
								I64Add
								Set R15
							End
							Br next
						End
					End
					Get R10
					I64Const $1
					I64Add
					Set R10
					Br names
				End
			End

			Get R7
			Set R3
			Get R2
			I64Const $8
			I64Add
			Set R2
			Br pairs
		End
	End

	Get SP
	Get R14
	I64Store ret+80(FP)
	RET
