//go:build !wasip1

package main

// The probe only runs as wasm; natively (go vet) these are stand-ins.

func rawPairs(uint32) string { return "err:native" }

func mapSize(uint32) string { return "err:native" }

func rawBuffer(uint32, uint32, uint32) string { return "err:native" }

func bufferStatus(uint32) string { return "err:native" }
