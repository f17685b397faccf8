package pggcra

import "github.com/jackc/pgx/v5/pgxpool"

// NewOnPool returns Buckets over a pool of the test's own configuration
// (its session settings not overridden by Config's).
func NewOnPool(pool *pgxpool.Pool) *Buckets { return newBuckets(pool) }

// SchemaVersion is the schema's latest version.
const SchemaVersion = schemaVersion

// MigrationSQL is the migration to schema version v.
func MigrationSQL(v int) string { return migrations[v-1] }
