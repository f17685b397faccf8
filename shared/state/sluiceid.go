package state

// SluiceIDLen is the length of a sluice_id.
const SluiceIDLen = 32

// AppendSluiceID appends the sluice_id of an identity (as AppendIdentity
// builds it): 32 hex digits, two independent 64-bit hashes, Fingerprint
// and a second FNV-1a 64 pass from another offset basis, both through the
// murmur3 finalizer. Fleet mode names an identity by it to the rate limit
// service, so it is unkeyed: every proxy and the admin compute the same
// id, and the identity itself (which may hold an API key) never leaves the
// proxy. 128 bits make a collision between two identities of one rule
// negligible.
func AppendSluiceID(dst []byte, identity string) []byte {
	h := uint64(0x84222325cbf29ce4) // a different basis from FNV's
	for i := 0; i < len(identity); i++ {
		h ^= uint64(identity[i])
		h *= 0x100000001b3
	}
	h ^= uint64(len(identity))
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	dst = AppendHex16(dst, Fingerprint(identity))
	return AppendHex16(dst, h)
}

// SluiceIDOfKey is the sluice_id of a composite limit key as an override
// names it (before AppendIdentity shortens a long one): the id the
// filter sends for that identity.
func SluiceIDOfKey(composite string) string {
	id := AppendIdentity(make([]byte, 0, MaxIdentity+1), composite)
	return string(AppendSluiceID(make([]byte, 0, SluiceIDLen), string(id)))
}
