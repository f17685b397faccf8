// A minimal absl::Cleanup for the two files of proxy-wasm-cpp-host that use
// it (src/hash.cc, src/signature_util.cc), so that building the host needs no
// Abseil: runs the callback when the object goes out of scope. Sluice's own
// code (Apache-2.0), not a copy of Abseil.
#pragma once
#include <utility>

namespace absl {
template <typename F> class Cleanup {
public:
  Cleanup(F f) : f_(std::move(f)) {}
  Cleanup(const Cleanup &) = delete;
  Cleanup &operator=(const Cleanup &) = delete;
  ~Cleanup() { f_(); }

private:
  F f_;
};
template <typename F> Cleanup(F) -> Cleanup<F>;
} // namespace absl
