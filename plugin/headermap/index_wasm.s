#include "textflag.h"

// ADVANCE moves R3 past the pair's name and value and their NULs, to
// where the next pair's name starts, and R2 to the next pair's lengths,
// leaving R2 < lensEnd pushed.
#define ADVANCE \
	Get R3; \
	Get R6; \
	I64Add; \
	Get R2; \
	I32WrapI64; \
	I64Load32U $4; \
	I64Add; \
	I64Const $2; \
	I64Add; \
	Set R3; \
	Get R2; \
	I64Const $8; \
	I64Add; \
	Tee R2; \
	Get R5; \
	I64LtU

// COMPARE branches to differ when the pair's name (at R0+R3) and the
// entry's name differ in the 8 bytes at the offset OFFSET pushes.
#define COMPARE(OFFSET) \
	Get R0; \
	Get R3; \
	I64Add; \
	OFFSET; \
	I64Add; \
	I32WrapI64; \
	I64Load $0; \
	Get R10; \
	I32WrapI64; \
	I64Load $8; \
	OFFSET; \
	I64Add; \
	I32WrapI64; \
	I64Load $0; \
	I64Ne; \
	BrIf differ

// TWOHALVES sets R11 to nameWord of a name of R6 bytes at R13, for
// HALF-byte halves loaded by LOAD.
#define TWOHALVES(LOAD, HALF) \
	Get R13; \
	I32WrapI64; \
	LOAD $0; \
	Get R13; \
	Get R6; \
	I64Add; \
	I64Const $HALF; \
	I64Sub; \
	I32WrapI64; \
	LOAD $0; \
	I64Const $(HALF*8); \
	I64Shl; \
	I64Or; \
	Set R11

// func Index(b []byte, names *Names, found []uint64) int
//
// indexGo in headermap.go, step by step, as WebAssembly loops: Go's
// WebAssembly code sends every branch of a loop through its function's
// dispatch table and keeps its values in memory, which made the Go pass
// cost four times this one under WAMR's fast JIT.
//
// Registers: R0 b's address, R1 len(b), R2 the address of the pair's
// lengths, R3 where its name starts (offset in b), R4 names.lengths,
// R5 where the lengths end (address), R6 the name's length, R7 where the
// pair ends, R8 and R9 where the entries start and end, R10 the entry,
// R11 the name's word, R12 found's address, R13 a scratch address or
// offset, R15 the names found.
TEXT ·Index(SB), NOSPLIT, $0-64
	I64Load b_base+0(FP)
	Set R0
	I64Load b_len+8(FP)
	Set R1
	I64Load names+24(FP)
	I32WrapI64
	I64Load $24
	Set R4
	I64Load names+24(FP)
	I32WrapI64
	I64Load $0
	Set R8
	I64Load names+24(FP)
	I32WrapI64
	I64Load $8
	I64Const $5
	I64Shl
	Get R8
	I64Add
	Set R9
	I64Load found_base+32(FP)
	Set R12
	I64Const $0
	Set R15

done:
	Block
	bad:
		Block
			// found holds a slot per name; clear them.
			I64Load found_len+40(FP)
			Get R9
			Get R8
			I64Sub
			I64Const $5
			I64ShrU
			I64LtU
			BrIf bad
			Get R8
			Set R10
			Get R12
			Set R13
		cleared:
			Block
			clear:
				Loop
					Get R10
					Get R9
					I64GeU
					BrIf cleared
					Get R13
					I32WrapI64
					I64Const $0
					I64Store $0
					Get R13
					I64Const $8
					I64Add
					Set R13
					Get R10
					I64Const $32
					I64Add
					Set R10
					Br clear
				End
			End

			// An empty b is the empty map.
			Get R1
			I64Eqz
			BrIf done

			// The count, and at least 10 bytes for each pair after it.
			Get R1
			I64Const $4
			I64LtU
			BrIf bad
			Get R0
			I32WrapI64
			I64Load32U $0
			Tee R5
			I64Const $10
			I64Mul
			Get R1
			I64Const $4
			I64Sub
			I64GtU
			BrIf bad
			Get R5
			I64Const $3
			I64Shl
			Get R0
			I64Add
			I64Const $4
			I64Add
			Set R5
			Get R0
			I64Const $4
			I64Add
			Set R2
			Get R5
			Get R0
			I64Sub
			Set R3

		ended:
			Block
				Get R2
				Get R5
				I64GeU
				BrIf ended
			pairs:
				Loop
				candidate:
					Block
					skip:
						Loop
							// A name of a length in names.lengths (mod
							// 64) is compared: shifted by the length
							// (wasm shifts by it mod 64), its bit is the
							// sign bit.
							Get R4
							Get R2
							I32WrapI64
							I64Load32U $0
							Tee R6
							I64Shl
							I64Const $0
							I64LtS
							BrIf candidate
							ADVANCE
							BrIf skip
						End
						Br ended
					End

					// R13 = the name's address (it starts at R3). The
					// name lies in b, with a byte after it.
					Get R3
					Get R6
					I64Add
					Get R1
					I64GeU
					BrIf bad
					Get R0
					Get R3
					I64Add
					Set R13

					// R11 = nameWord of the name (at R13).
					Get R6
					I64Const $8
					I64GeU
					If
						Get R13
						I32WrapI64
						I64Load $0
						Set R11
					Else
						Get R6
						I64Const $4
						I64GeU
						If
							TWOHALVES(I64Load32U, 4)
						Else
							Get R6
							I64Const $2
							I64GeU
							If
								TWOHALVES(I64Load16U, 2)
							Else
								I64Const $0
								Set R11
								Get R6
								I64Eqz
								I32Eqz
								If
									Get R13
									I32WrapI64
									I64Load8U $0
									Set R11
								End
							End
						End
					End

					// The entry of the same word and length, and bytes
					// after the word, is the name's.
					Get R8
					Set R10
				next:
					Block
					entries:
						Loop
							Get R10
							I32WrapI64
							I64Load $0
							Get R11
							I64Eq
							If
								Get R10
								I32WrapI64
								I64Load $16
								Get R6
								I64Eq
								If
								differ:
									Block
										// The bytes after the first 8,
										// 8 at a time, the last 8
										// overlapping the ones before.
										Get R6
										I64Const $8
										I64GtU
										If
											I64Const $8
											Set R13
										words:
											Loop
												Get R13
												I64Const $8
												I64Add
												Get R6
												I64LtU
												If
													COMPARE(Get R13)
													Get R13
													I64Const $8
													I64Add
													Set R13
													Br words
												End
											End
											COMPARE(Get R6; I64Const $8; I64Sub)
										End

										// The pair is the name's: R7 = where
										// it ends. It lies in b, with a NUL
										// after its name and its value.
										Get R3
										Get R6
										I64Add
										Get R2
										I32WrapI64
										I64Load32U $4
										I64Add
										I64Const $2
										I64Add
										Tee R7
										Get R1
										I64GtU
										BrIf bad
										Get R0
										Get R3
										I64Add
										Get R6
										I64Add
										I32WrapI64
										I32Load8U $0
										BrIf bad
										Get R0
										Get R7
										I64Add
										I64Const $1
										I64Sub
										I32WrapI64
										I32Load8U $0
										BrIf bad

										// Keep the name's first value,
										// (offset << 32) | length, in the
										// entry's slot (8 bytes a 32-byte
										// entry).
										Get R12
										Get R10
										Get R8
										I64Sub
										I64Const $2
										I64ShrU
										I64Add
										Tee R13
										I32WrapI64
										I64Load $0
										I64Eqz
										If
											Get R13
											I32WrapI64
											Get R3
											Get R6
											I64Add
											I64Const $1
											I64Add
											Tee R13
											I64Const $32
											I64Shl
											Get R7
											Get R13
											I64Sub
											I64Const $1
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
							End
							Get R10
							I64Const $32
							I64Add
							Tee R10
							Get R9
							I64LtU
							BrIf entries
						End
					End

					ADVANCE
					BrIf pairs
				End
			End

			// The pairs end where b does.
			Get R3
			Get R1
			I64Ne
			BrIf bad
			Br done
		End
		I64Const $-1
		Set R15
	End

	Get SP
	Get R15
	I64Store ret+56(FP)
	RET
