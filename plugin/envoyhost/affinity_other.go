//go:build !linux

package envoyhost

import "errors"

// PinTo is supported on Linux only, where the host program runs.
func (h *Host) PinTo(cpu int) error { return errors.New("pinning the host to a CPU needs Linux") }

// BenchCPU reports no pinning outside Linux.
func BenchCPU() (cpu int, ok bool, err error) { return 0, false, nil }
