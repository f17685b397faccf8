package store

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
)

// sqlDB is the database with the store's one dialect difference in
// queries: SQLite takes "?" placeholders, PostgreSQL "$1, $2, ...". Every
// query is written with "?" and rewritten for PostgreSQL here, so the
// store's methods are the same code on both.
type sqlDB struct {
	*sql.DB
	pg bool
}

func (d *sqlDB) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return d.DB.ExecContext(ctx, rebind(d.pg, q), args...)
}

func (d *sqlDB) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return d.DB.QueryContext(ctx, rebind(d.pg, q), args...)
}

func (d *sqlDB) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return d.DB.QueryRowContext(ctx, rebind(d.pg, q), args...)
}

func (d *sqlDB) QueryRow(q string, args ...any) *sql.Row {
	return d.QueryRowContext(context.Background(), q, args...)
}

func (d *sqlDB) BeginTx(ctx context.Context, opts *sql.TxOptions) (*sqlTx, error) {
	tx, err := d.DB.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &sqlTx{Tx: tx, pg: d.pg}, nil
}

// sqlTx is a transaction of a sqlDB.
type sqlTx struct {
	*sql.Tx
	pg bool
}

func (t *sqlTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return t.Tx.ExecContext(ctx, rebind(t.pg, q), args...)
}

func (t *sqlTx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	return t.Tx.QueryRowContext(ctx, rebind(t.pg, q), args...)
}

// rebind turns the "?" placeholders of q into PostgreSQL's "$n" (outside
// quoted strings) when pg is set.
func rebind(pg bool, q string) string {
	if !pg || !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	n, quoted := 0, false
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case c == '\'':
			quoted = !quoted
		case c == '?' && !quoted:
			n++
			b.WriteString("$" + strconv.Itoa(n))
			if i+1 < len(q) && q[i+1] >= '0' && q[i+1] <= '9' {
				b.WriteByte(' ') // "?0" is not "$10"
			}
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// isConstraint tells whether err is a refused constraint (unique, check,
// foreign key) in either database.
func isConstraint(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "23") // integrity_constraint_violation
	}
	return primaryCode(err) == codeConstraint
}

func primaryCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() & 0xff
	}
	return 0
}
